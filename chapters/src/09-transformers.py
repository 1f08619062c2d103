# %% [markdown]
# # Transformers, warmup and long runs · Transformer 的梯度与学习率预热

# %% [markdown]
# **What you will learn**
#
# - to build a small causal Transformer in Keras, post-LN and pre-LN, and measure the gradient
#   that reaches each of its blocks at initialization, with a plain tape;
# - which conditions give the picture Xiong et al. (2020) drew (post-LN gradients growing
#   towards the output, pre-LN flat), and which give the opposite, measured one at a time;
# - why Adam's first steps are risky (Liu et al. 2020, RAdam), what warmup does, and Keras 3's
#   own warmup (`CosineDecay(..., warmup_target=, warmup_steps=)`) with and without, on both
#   stacks, in the live **TransformerExplorer**;
# - the Tuning Playbook's recipe for an unstable run: a learning-rate sweep to find where
#   training breaks, warmup to move that edge, clipping at the 90th percentile of the gradient
#   norms, and a loss spike with the gradient norm around it;
# - to write per-layer gradient norms and histograms for TensorBoard with
#   `gl.GradNormLogger(log_dir=...)`, from `fit` and from a custom loop.
#
# All models here are small (2 to 24 blocks of width 64, sequences of 32 tokens), so the
# chapter runs in a few minutes on a laptop CPU; every number is measured in the cell above
# it.

# %% [markdown]
# ## Setup

# %%
import gradlab as gl  # noqa: I001  (first: it imports TensorFlow quietly)
import keras
import numpy as np
import tensorflow as tf
from gradlab.engines.transformer import TransformerGradientEngine
from gradlab.models.transformer import TransformerBlock
from gradlab.reports.transformer import block_gradient_report
from gradlab.train import warmup
from gradlab.exercises import ch09
from gradlab.plots import transformer as tplots
from gradlab.widgets.transformer_explorer import TransformerExplorer

gl.setup(seed=0)
np.set_printoptions(formatter={"float": lambda v: f"{v:.3g}"})   # 3 significant digits

# %% [markdown]
# ## A small causal Transformer · 一个小型因果 Transformer
#
# `gl.build_transformer(num_layers)` writes the model a learner would write: token and
# position embeddings, `num_layers` blocks, and a `Dense` layer that returns one logit per
# token of the vocabulary. Each block is causal `MultiHeadAttention` and a ReLU feed-forward
# network (FFN), each wrapped in a residual connection and a `LayerNormalization`. The only
# difference between the two stacks is where the LayerNorm sits:

# %%
import inspect  # noqa: E402

print(inspect.getsource(TransformerBlock.call))

# %% [markdown]
# Post-LN, $x \leftarrow \mathrm{LN}(x + f(x))$, is the original Transformer (Vaswani et al.
# 2017); pre-LN, $x \leftarrow x + f(\mathrm{LN}(x))$, adds a final LayerNorm before the logits
# and is what GPT-2 and most models since use. Everything else is Keras's defaults (Glorot
# kernels, zero biases, LayerNorm γ = 1 and β = 0, and an `Embedding` drawn from
# U(−0.05, 0.05)) except LayerNorm's ε: $10^{-6}$ here, because Keras's default $10^{-3}$ is
# larger than the variance of that embedding ($0.029^2 \approx 8 \cdot 10^{-4}$). The first
# LayerNorm sees token plus position embedding, variance about $1.7 \cdot 10^{-3}$, and with
# $\varepsilon = 10^{-3}$ would bring it to $\sqrt{1.7/(1.7 + 1)} \approx 0.79$ rms instead
# of 1 (measured below, once there is a batch). Block `i`'s variables live under `block_{i}/`:

# %%
pre = gl.build_transformer(6, norm_position="pre")      # d_model 64, 4 heads, FFN 256, 64 tokens
post = gl.build_transformer(6, norm_position="post")
paths = [v.path for v in pre.trainable_variables]
print(len(paths), "variables, e.g.", paths[2], "·", paths[16], "·", paths[-1])
print("pre-LN has a final norm:", "final_norm/gamma" in paths,
      "· post-LN:", "final_norm/gamma" in [v.path for v in post.trainable_variables])

# %% [markdown]
# One Keras detail on the way: if you *seed* `MultiHeadAttention`'s `kernel_initializer`, Keras
# clones that one initializer, seed included, for the query, key, value and output
# projections, so they all start with the same numbers. `build_transformer` gives each its own
# seed.

# %%
mha = keras.layers.MultiHeadAttention(4, 16, kernel_initializer=keras.initializers.GlorotUniform(seed=1))
z = tf.zeros([1, 5, 64])
mha(z, z)
print("seeded initializer: query == key?", np.array_equal(mha.query_dense.kernel, mha.key_dense.kernel))
att = pre.get_layer("block_0").attention
print("build_transformer:  query == key?", np.array_equal(att.query_dense.kernel, att.key_dense.kernel))

# %% [markdown]
# The data are token sequences from a fixed Markov chain over 64 tokens in which every token
# draws 4 successors, and the target is the next token. A model that knows nothing has loss
# $\ln 64 = 4.16$. The successors are drawn with replacement, so some tokens have fewer than
# 4 distinct ones (one of them twice as likely), and a model that has learned the chain gets
# down to the chain's entropy, a little below $\ln 4 = 1.39$ (computed two cells down).

# %%
x, y = gl.markov_tokens(batch_size=8, seq_len=32, vocab_size=64)
print("x[0, :10]:", x[0, :10])
print("y[0, :10]:", y[0, :10], " (x shifted by one)")
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
print(f"loss at initialization: {float(loss_fn(y, pre(x))):.3f}   # ln 64 = {np.log(64):.3f}")

# %% [markdown]
# The initial loss is above $\ln 64$ because the untrained logits are not all equal. The loss
# is $\log\sum_j e^{z_j} - z_y$; with logits spread around their mean, the log-sum-exp
# exceeds $\ln 64$ by about half their variance across the vocabulary, while the target's
# logit is about as high as any other (it knows nothing yet). A zero output layer would start
# at exactly $\ln 64$:

# %%
z = tf.cast(pre(x), tf.float64)
lse = tf.reduce_logsumexp(z, axis=-1)
z_y = tf.gather(z, y, batch_dims=2)
spread = tf.math.reduce_std(z, axis=-1)
print(f"logits' std across the 64 tokens: {float(tf.reduce_mean(spread)):.3f}; "
      f"half their variance: {float(tf.reduce_mean(spread ** 2)) / 2:.3f}")
print(f"log-sum-exp − ln 64: {float(tf.reduce_mean(lse)) - np.log(64):.3f}; mean target logit − mean logit: "
      f"{float(tf.reduce_mean(z_y - tf.reduce_mean(z, axis=-1))):.3f}")
print(f"loss = ln 64 + {float(tf.reduce_mean(lse)) - np.log(64):.3f} − ({float(tf.reduce_mean(z_y)):.3f}) "
      f"= {float(tf.reduce_mean(lse - z_y)):.3f}")

# %% [markdown]
# The floor of the loss is the entropy of the next token given the current one, averaged over
# how often each token occurs. Counted on 128,000 transitions of the same chain:

# %%
xl, yl = gl.markov_tokens(batch_size=4000, seq_len=32, vocab_size=64, seed=1)
counts = np.zeros((64, 64))
np.add.at(counts, (xl.ravel(), yl.ravel()), 1)
p_next = counts / counts.sum(axis=1, keepdims=True)   # P(next | current)
with np.errstate(divide="ignore", invalid="ignore"):
    entropy = -np.sum(np.where(p_next > 0, p_next * np.log(p_next), 0.0), axis=1)
weight = counts.sum(axis=1) / counts.sum()             # how often each token is the current one
print("tokens with fewer than 4 distinct successors:", int(np.sum((counts > 0).sum(axis=1) < 4)), "of 64")
print(f"loss floor: {np.sum(weight * entropy):.3f}   # ln 4 = {np.log(4):.3f}")

# %% [markdown]
# And the LayerNorm ε of the model description, on this batch's residual stream (eagerly, in
# `tf.function` and under XLA):

# %%
stream = pre.get_layer("embedding")(x)   # token + position embedding: what block 1's first LayerNorm sees
print(f"stream variance: {float(tf.reduce_mean(tf.math.reduce_variance(tf.cast(stream, tf.float64), -1))):.2g}")
for eps in (1e-3, 1e-6):
    norm = keras.layers.LayerNormalization(epsilon=eps)

    def rms(s, norm=norm):
        return tf.sqrt(tf.reduce_mean(tf.square(norm(s))))

    print(f"epsilon {eps:g}: rms after LayerNorm {float(rms(stream)):.3f} eager, "
          f"{float(tf.function(rms)(stream)):.3f} tf.function, {float(tf.function(rms, jit_compile=True)(stream)):.3f} XLA")

# %% [markdown]
# ## The gradient of each block at initialization · 初始化时每个块的梯度
#
# Measure it the plain way: one tape, the gradient of every variable, grouped by the block
# its path starts with, and each block's global norm taken in float64.

# %%
def block_norms(model, x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x))
    grads = tape.gradient(loss, model.trainable_variables)
    blocks = {v.path.split("/")[0] for v in model.trainable_variables if v.path.startswith("block_")}
    norms = []
    for i in range(len(blocks)):   # one entry per block_<i>/ prefix, however many blocks
        squares = [tf.reduce_sum(tf.square(tf.cast(g, tf.float64)))
                   for v, g in zip(model.trainable_variables, grads) if v.path.startswith(f"block_{i}/")]
        norms.append(float(tf.sqrt(tf.add_n(squares))))
    return np.array(norms)


print("pre-LN  blocks 1..6:", block_norms(pre, x, y))
print("post-LN blocks 1..6:", block_norms(post, x, y))

# %% [markdown]
# `gl.reports.transformer.block_gradient_report` is the same measurement, packaged; it also gives each
# block's second FFN kernel alone (the parameter $W^{2,l}$ that Xiong et al. analyse) and the
# size (root mean square) of the residual stream entering each block and leaving the last:

# %%
report_pre = block_gradient_report(pre, x, y)
report_post = block_gradient_report(post, x, y)
print("same numbers as the tape:", np.allclose(report_pre.layer_grad_norms, block_norms(pre, x, y)))
for r in (report_pre, report_post):
    print(f"{r.norm_position:>4}-LN  second FFN kernel:", r.ffn_grad_norms.round(3),
          "  stream rms:", r.stream_rms.round(3))

# %% [markdown]
# With Keras's defaults the pre-LN gradients *fall* from the first block to the last (block 6
# gets 0.40× what block 1 gets), and the post-LN ones are flat apart from block 1, whose
# attention biases get a large gradient. Both are the opposite of the picture usually drawn
# from Xiong et al. (2020). Their abstract says that at initialization "for the
# original-designed Post-LN Transformer ... the expected gradients of the parameters near the
# output layer are large", and that for Pre-LN "the gradients are well-behaved". Summaries of
# their analysis quote it as a bound on the *last* block's second FFN kernel: $O(d\sqrt{\ln d})$
# for post-LN, $O(d\sqrt{\ln d / L})$ for pre-LN with $L$ blocks. (We could read the abstract
# and those summaries, not the paper's experiments; the conditions below are measured
# here.)
#
# The stream column explains pre-LN. Every pre-LN block adds its branch to an un-normalized
# residual stream, so the stream grows from 0.041 (Keras's U(−0.05, 0.05) embedding) to 2.4
# after six blocks. A LayerNorm divides the gradient by the scale of its input, so each block's
# LayerNorm divides by a larger number than the one before it. In post-LN every block output
# is normalized to 1 and nothing accumulates.

# %% [markdown]
# ## Which conditions give Xiong et al.'s picture · 什么条件下出现论文中的图景
#
# To try many conditions quickly, `gl.engines.transformer.TransformerGradientEngine` writes the same
# forward pass once more in plain TensorFlow, as one `tf.function` whose depth, norm position,
# embedding and batch are inputs, so nothing retraces. Check it against the Keras model first:

# %%
engine = TransformerGradientEngine(max_layers=24)
same = engine.report(6, "post", data=(x, y))
print("agrees with the tape to 1e-5:", np.allclose(same.layer_grad_norms, report_post.layer_grad_norms, rtol=1e-5))

# %% [markdown]
# **Condition 1: the scale of the residual stream (pre-LN).** The embedding sets where the
# stream starts. Keras's default U(−0.05, 0.05) starts it at 0.041; the same embedding times
# $\sqrt{d_{model}} = 8$ (Vaswani et al. 2017, section 3.4) at 0.23; Glorot ("Xavier
# everywhere") at 0.13; N(0, 1), PyTorch's `nn.Embedding` default, at 1; N(0, 1) times
# $\sqrt{d_{model}}$ at 8. Twelve pre-LN blocks:

# %%
EMBEDDINGS = {"Keras default": ("uniform", False), "uniform ×√d": ("uniform", True),
              "Glorot": ("glorot_uniform", False), "N(0, 1)": ("normal", False),
              "N(0, 1) ×√d": ("normal", True)}
flat = {}
for name, (init, scale) in EMBEDDINGS.items():
    r = engine.report(12, "pre", embedding_initializer=init, scale_embedding=scale, data=(x, y))
    flat[name] = r
    print(f"{gl.i18n.pad(name, 14, '>')}: stream {r.stream_rms[0]:6.3f} → {r.stream_rms[-1]:5.2f}   block 1 {r.layer_grad_norms[0]:.3g}"
          f"   last/first block {r.ratio:.2f}   second FFN kernel {r.ffn_grad_norms[-1] / r.ffn_grad_norms[0]:.2f}")

# %% [markdown]
# Only when the embedding is large compared with what the blocks add does the stream stay at
# one scale, and only then are the pre-LN gradients flat. That is a property of the embedding,
# not of the LayerNorm's position: with a stream of 8, every block's LayerNorm divides by about
# 8, and the gradients are flat but also smaller (look at block 1).

# %% [markdown]
# **Condition 2: depth, and the expected gradient (post-LN).** One model's norms vary a lot
# from one random initialization to the next. The paper's statement is about the *expected*
# gradient, the mean over initializations; `engine.mean_report` averages each block's norm over
# eight of them (seeds 0 to 7, the same batch). The second FFN kernel, at 6 and 12 blocks:

# %%
SEEDS = range(8)
rows = {}
for depth in (6, 12):
    for position in ("post", "pre"):
        singles = [engine.report(depth, position, data=(x, y), seed=s).ffn_grad_norms for s in SEEDS]
        rows[position, depth] = engine.mean_report(depth, position, data=(x, y), seeds=SEEDS)
        w2 = rows[position, depth].ffn_grad_norms
        print(f"{position:>4}-LN, {depth:>2} blocks: mean last/first {w2[-1] / w2[0]:.2f}; one seed at a time:",
              np.round([v[-1] / v[0] for v in singles], 2))

# %% [markdown]
# On average over the initializations the post-LN gradient near the output is about as large
# as at the input in 6 blocks and larger (1.2×) in 12, while pre-LN's falls for every seed.
# Single post-LN models at 12 blocks range from about half to almost three times: six of
# these eight grow towards the output and two fall, so one measurement of one model can show
# either picture, and the paper's statement is about the average.

# %% [markdown]
# Eight initializations are few for a quantity that varies this much. The same measurement
# over 40 of them (seeds 0 to 39, post-LN, 12 blocks), from the same fast engine, under a
# second per seed:

# %%
from gradlab.progress import Progress  # noqa: E402

SEEDS_40 = range(40)
singles_40 = []
with Progress(len(SEEDS_40), "post-LN, 12 blocks") as bar:
    for s in SEEDS_40:
        singles_40.append(engine.report(12, "post", data=(x, y), seed=s).ffn_grad_norms)
        bar.update()
mean_40 = np.mean(singles_40, axis=0)  # what engine.mean_report(12, "post", seeds=SEEDS_40) averages
ratios_40 = np.array([v[-1] / v[0] for v in singles_40])
print(f"post-LN, 12 blocks, 40 seeds: mean last/first {mean_40[-1] / mean_40[0]:.2f}; "
      f"single models whose gradient grows towards the output: {np.mean(ratios_40 > 1):.1%}")

# %% [markdown]
# Over 40 initializations the mean grows towards the output by 1.4×, and about four single
# models in five show it: the paper's picture is the typical one, and a single model that
# shows the opposite is not rare.

# %%
both = {"post-LN, 12 blocks": rows["post", 12], "post-LN, 6 blocks": rows["post", 6],
        "pre-LN, 12 blocks": rows["pre", 12],
        "pre-LN, 12 blocks, N(0,1)×√d": engine.mean_report(12, "pre", data=(x, y), seeds=SEEDS,
                                                           embedding_initializer="normal", scale_embedding=True)}
tplots.plot_block_norms(both, which="both", title="mean over 8 initializations")

# %% [markdown]
# **Condition 3: which parameters.** Xiong et al. analyse $W^{2,l}$, one kernel per block.
# The norm over *all* of a block's variables tells a different story in post-LN block 1,
# where the first LayerNorm divides by the tiny embedding: the attention's value and output
# biases, which add a constant to a signal of size 0.04, get most of the gradient. (The key
# bias gets none at all: it adds the same number to a query's score with every key, and the
# softmax does not change when all its inputs move together.)

# %%
with tf.GradientTape() as tape:
    loss = loss_fn(y, post(x))
grads = tape.gradient(loss, post.trainable_variables)
for v, g in zip(post.trainable_variables, grads):
    if v.path.startswith("block_0/attention/") or v.path == "block_0/ffn_2/kernel":
        norm = gl.true_norm(g)
        print(f"{v.path:<42}", f"{norm:.3g}" if norm > 1e-6 else "< 1e-6 (zero up to float rounding)")

# %% [markdown]
# **Condition 4: the number of blocks (the paper's bound).** The bound concerns the last block
# and the number of blocks $L$: constant for post-LN, falling like $1/\sqrt{L}$ for pre-LN. The
# last block's second FFN kernel for 3 to 24 blocks, mean over the eight initializations:

# %%
depths = (3, 6, 12, 24)
last = {p: np.array([engine.mean_report(n, p, data=(x, y), seeds=SEEDS).ffn_grad_norms[-1] for n in depths])
        for p in ("post", "pre")}
for p in ("post", "pre"):
    print(f"{p:>4}-LN, last block at L = 3, 6, 12, 24:", last[p].round(3), " ÷ L=3:", (last[p] / last[p][0]).round(2))
print("1/sqrt(L/3):                         ", np.round(1 / np.sqrt(np.array(depths) / 3), 2))

# %% [markdown]
# Pre-LN's last block falls about as $1/\sqrt{L}$; post-LN's does not shrink (it grows a
# little). So the part of the paper that concerns depth shows with Keras's defaults too:
# relative to pre-LN, the post-LN gradients near the output are large, and more so the deeper
# the stack.
#
# **Random or real targets.** With uniform random labels (nothing to learn) instead of the
# chain's next tokens, the same measurement (12 blocks, eight initializations):

# %%
noise = (x, gl.markov_tokens(batch_size=8, seq_len=32, vocab_size=64, targets="random")[1])
for position in ("post", "pre"):
    w2 = engine.mean_report(12, position, data=noise, seeds=SEEDS).ffn_grad_norms
    real = rows[position, 12].ffn_grad_norms
    print(f"{position:>4}-LN, 12 blocks, random targets: last/first {w2[-1] / w2[0]:.2f}"
          f"   (next-token targets: {real[-1] / real[0]:.2f})")

# %% [markdown]
# The targets change the post-LN ratio a little and the pre-LN one hardly at all: at
# initialization the model does not know them yet, and the gradient's shape across blocks
# comes from the architecture and the input scale.
#
# In short: with a small embedding the pre-LN gradient falls towards the output because the
# residual stream grows; with a large embedding it is flat. The post-LN gradient, averaged
# over initializations, grows towards the output once the stack is deep; one model at a time
# can look flat or even falling. And at every depth the post-LN gradient near the output is
# larger than pre-LN's. Which of these matters for training is what the rest of the chapter
# measures.

# %% [markdown]
# ## The TransformerExplorer · 交互探索
#
# The explorer shows each block's gradient at initialization (left) for the depth and norm
# position you pick, computed by the engine above, and, on demand, the first training steps
# with and without warmup at the learning rate, warmup and clipping you pick (right). The
# runs are cached per setting, so moving back to a setting shows its curves at once.
#
# The runs train the same model (`warmup.TrainingRuns`: the Keras model's weights and forward
# pass, in variables that Keras's `Adam` updates) for 100 steps on batches of 16 fresh
# sequences, the same batches for every run. One batch of the pre-LN stream is corrupted on
# purpose: at step 60 its targets are random tokens (the loss spike below).

# %%
trainers = {(6, "post"): warmup.TrainingRuns(6, "post", steps=100),
            (6, "pre"): warmup.TrainingRuns(6, "pre", steps=100, outliers=(60,))}
ex = TransformerExplorer(num_layers=6, norm_position="post", learning_rate=3e-3, warmup_steps=25,
                         steps=100, engine=engine, runs=trainers)
ex

# %% [markdown]
# Its report is what the left panel shows, and what an independent tape on `ex.model` and
# `ex.data` gives:

# %%
print(ex.status_text)
x0, y0 = ex.data
print("tape on ex.model:", block_norms(ex.model, x0, y0))

# %% [markdown]
# ## Adam's first steps and warmup · Adam 的最初几步与学习率预热
#
# Adam divides each parameter's step by the square root of a running mean of its squared
# gradients. At step 1 that mean has seen one gradient, so the step is $\eta \cdot
# g/\sqrt{g^2} = \eta \cdot \operatorname{sign}(g)$: every parameter moves by the full learning
# rate, whatever the size of its gradient. Only tiny gradients move less: Keras adds
# $\epsilon = 10^{-7}$ to $\sqrt{v}$, and at step 1 that weighs as much as
# $\epsilon/\sqrt{1-\beta_2} \approx 3 \cdot 10^{-6}$ added to $|g|$. Check it on the post-LN
# model's kernels:

# %%
opt = keras.optimizers.Adam(1e-3)
before = [tf.identity(v) for v in post.trainable_variables]
with tf.GradientTape() as tape:
    loss = loss_fn(y, post(x))
grads = tape.gradient(loss, post.trainable_variables)
opt.apply_gradients(zip(grads, post.trainable_variables))
kernels = [(v, b, g) for v, b, g in zip(post.trainable_variables, before, grads) if v.path.endswith("kernel")]
ratio = np.concatenate([np.abs((v - b).numpy()).ravel() / 1e-3 for v, b, g in kernels])
size = np.concatenate([np.abs(g.numpy()).ravel() for v, b, g in kernels])
print(f"{ratio.size} kernel entries: |step| / learning rate has median {np.median(ratio):.2f}; "
      f"{np.mean(ratio > 0.9):.0%} of them moved by more than 0.9 × the learning rate")
print(f"every entry that moved less has a gradient below {size[ratio <= 0.9].max():.1g} in size")
for v, b in zip(post.trainable_variables, before):
    v.assign(b)                                             # put the model back

# %% [markdown]
# Liu et al. (2020, "On the Variance of the Adaptive Learning Rate and Beyond") trace warmup to
# this: the adaptive learning rate "has problematically large variance in the early stage",
# and warmup works as variance reduction. Their RAdam measures how many gradients the second
# moment has effectively averaged, $\rho_t = \rho_\infty - 2t\beta_2^t/(1-\beta_2^t)$ with
# $\rho_\infty = 2/(1-\beta_2) - 1$, and uses the adaptive step only once $\rho_t > 4$, where its
# variance is finite:

# %%
beta2 = 0.999
t = np.arange(1, 9)
rho_inf = 2 / (1 - beta2) - 1
rho = rho_inf - 2 * t * beta2**t / (1 - beta2**t)
print("t:    ", t)
print("rho_t:", rho.round(2), f"  (rho_inf = {rho_inf:.0f})")

# %% [markdown]
# For Keras's default $\beta_2 = 0.999$ the first four steps have $\rho_t \le 4$. Keras 3 has
# no RAdam; its warmup is a learning-rate schedule. `CosineDecay` with `warmup_target` and
# `warmup_steps` ramps linearly from `initial_learning_rate` to `warmup_target`, then decays;
# with `alpha=1.0` it stays at the target, which is the Tuning Playbook's warmup protocol.
# `gl.train.warmup.warmup_schedule` is exactly this:

# %%
schedule = keras.optimizers.schedules.CosineDecay(0.0, decay_steps=75, alpha=1.0,
                                                  warmup_target=3e-3, warmup_steps=25)
print("steps 0, 5, 10, 25, 90:", [f"{float(schedule(s)):.1e}" for s in (0, 5, 10, 25, 90)])
print("the same as gl.train.warmup.warmup_schedule:",
      all(float(schedule(s)) == float(warmup.warmup_schedule(3e-3, 25, 100)(s)) for s in range(100)))

# %% [markdown]
# Step 0 has learning rate 0: the first update leaves the weights unchanged (Adam's moments
# still take in that gradient). Now train both stacks at a learning rate of 3e-3, with 25
# warmup steps and without. A run *learns* when its loss ends below 2.7, well on its way from
# 4.16 to the chain's floor of 1.33, and *stalls* when it ends above 3.8, near 3.98, the loss
# of a model that knows only how often each token occurs:

# %%
def outcome(curve):
    """A summary of a short run that float rounding cannot flip."""
    final = curve.final_loss
    if not np.isfinite(final):
        return "diverges"
    return "learns" if final < 2.7 else "stalls" if final > 3.8 else "in between"


y_all = gl.markov_tokens(batch_size=4096, seq_len=32, vocab_size=64, seed=1)[1]
freq = np.bincount(y_all.ravel(), minlength=64) / y_all.size
print(f"loss of the token frequencies alone: {-(freq[freq > 0] * np.log(freq[freq > 0])).sum():.2f}")
curves = {}
for position in ("post", "pre"):
    for w in (25, 0):
        curves[position, w] = trainers[6, position].run(3e-3, warmup_steps=w)
        print(f"{position:>4}-LN, lr 3e-3, {w:>2} warmup steps: {outcome(curves[position, w])}")

# %%
tplots.plot_training_curves([curves["post", 25], curves["post", 0], curves["pre", 25], curves["pre", 0]])

# %% [markdown]
# Without warmup the post-LN stack stalls: within its first ten steps it settles where it
# predicts only the token frequencies, and its gradient norm falls and stays low. With 25
# warmup steps the same model, at the same peak rate, learns. The pre-LN stack
# learns with and without warmup, as Xiong et al. report for their Pre-LN models. The explorer
# shows the same runs (they are cached); move its learning rate or warmup and press the button
# to run others:

# %%
lab = ex.copy(norm_position="post")
lab.run_steps()
lab.snapshot()

# %% [markdown]
# ## Where training breaks: the Tuning Playbook's recipe · 找到训练崩溃的边界
#
# Google's Deep Learning Tuning Playbook (Godbole et al. 2023, "How can optimization failures
# be debugged and mitigated?") starts from a learning-rate sweep: "Any workload will become
# unstable if the learning rate is too large. Instability is only an issue when it forces us
# to use a learning rate that's too small." Sweep both stacks, with and without warmup:

# %%
rates = {"post": (1e-3, 3e-3, 1e-2), "pre": (3e-3, 3e-2)}
sweep = {}
for position in ("post", "pre"):
    for w in (0, 25):
        label = f"{position}-LN, " + ("25 warmup steps" if w else "no warmup")
        sweep[label] = trainers[6, position].sweep(rates[position], w)
        print(f"{gl.i18n.pad(label, 26, '>')}:", " · ".join(f"lr {lr:g} {outcome(c)}" for lr, c in sweep[label].items()))
tplots.plot_lr_sweep(sweep, title="6 blocks, loss after 100 steps")

# %% [markdown]
# Post-LN without warmup breaks between 1e-3 and 3e-3; warmup moves that edge up, past 3e-3
# (at 1e-2 it stalls with warmup too). Pre-LN learns at 3e-3 without warmup, where post-LN
# stalls; at 3e-2 it learns only partly without warmup and fully with it. This is the
# Playbook's picture: the best learning rate sits near the edge of instability, and warmup
# lets a higher one train.
#
# **Clipping.** The Playbook's advice: log the unclipped gradient norm, and "choose a gradient
# clipping threshold based on the 90th percentile of gradient norms"; "we would usually
# consider having >50% of the updates getting clipped somehow as 'extremely aggressive'", a
# strange way of lowering the learning rate. Take the post-LN run that stalls, draw its norms,
# and clip at their 90th percentile:

# %%
edge = trainers[6, "post"].run(3e-3, 0, progress=False)  # the sweep's stalled run (cached: not trained again)
threshold = warmup.clip_threshold(edge.grad_norms, 90)
clipped = trainers[6, "post"].run(3e-3, 0, clip=threshold)
low = np.percentile(edge.grad_norms, 25)
print(f"clipped at the 90th percentile: {round(clipped.clipped_fraction, 1):.0%} of the steps clipped; "
      f"the run {outcome(clipped)}")
print(f"a threshold at the 25th percentile would clip {np.mean(edge.grad_norms > low):.0%} of this run's steps "
      "(more than half: 'extremely aggressive')")
tplots.plot_grad_norm_distribution(edge, clip_norm=threshold)

# %% [markdown]
# Clipping at the 90th percentile does not rescue this run: the damage is done in the first
# few steps, by Adam steps of full size, and clipping the gradient does not shorten an Adam
# step much: it rescales only the steps above the threshold, and Adam's step hardly depends on
# the scale of its gradient. The Playbook says as much:
# "Sometimes longer warmup periods can correct instabilities that clipping does not."
#
# One trap when you clip a model with embeddings yourself. Their gradients are
# `tf.IndexedSlices`, one row per token of the batch, and `tf.linalg.global_norm` squares those
# rows as they are, while the dense gradient first adds the rows of a token that occurs twice.
# Exercise 3's check knows this mistake: a logged norm equal to `tf.linalg.global_norm`'s is
# named as such. `tf.clip_by_global_norm` and Keras's `global_clipnorm` measure with that same
# norm, so with repeated tokens they leave a gradient longer than the threshold. Here is one row
# of a table looked up twice, with the gradient [0.6, 0.8] each time, clipped to 1. Convert
# such gradients first (`tf.convert_to_tensor` adds the rows), or clip with
# `gl.clip_gradients`, which does that for you and which the runs above use:

# %%
table = tf.Variable(tf.zeros([3, 2]))
with tf.GradientTape() as tape:
    looked_up = tf.gather(table, [1, 1])  # row 1, twice: one token that occurs twice in a batch
    loss = tf.reduce_sum(looked_up * tf.constant([[0.6, 0.8], [0.6, 0.8]]))
grad = tape.gradient(loss, table)
print(type(grad).__name__, "with indices", grad.indices.numpy(),
      "· dense norm", f"{float(tf.norm(tf.convert_to_tensor(grad))):.3g}")  # 2: the two rows added, [1.2, 1.6]
print("tf.linalg.global_norm:", f"{float(tf.linalg.global_norm([grad])):.3g}")  # 1.41: each row squared alone
clipped_slices, _norm = tf.clip_by_global_norm([grad], 1.0)
print("dense norm after tf.clip_by_global_norm(grads, 1.0):",
      f"{float(tf.norm(tf.convert_to_tensor(clipped_slices[0]))):.3g}")  # 1.41, not 1
keras.optimizers.SGD(learning_rate=1.0, global_clipnorm=1.0).apply_gradients([(grad, table)])
print("length of a Keras SGD(1.0) step with global_clipnorm=1.0:", f"{float(tf.norm(table)):.3g}")  # 1.41
print("dense norm after gl.clip_gradients(grads, 1.0):",
      f"{gl.true_global_norm(gl.clip_gradients([grad], 1.0)):.3g}")  # 1

# %% [markdown]
# ## A loss spike · 损失尖峰
#
# A spike is a step where the loss jumps up. Every pre-LN run above met the corrupted batch at
# step 60 (random targets). Around it, the loss and the gradient norm of the run at 3e-3
# without warmup:

# %%
hot = curves["pre", 0]
before, at, after = hot.losses[58:61]                       # steps 59, 60, 61
norms_before = hot.grad_norms[:59]
print(f"loss at step 60 above ln 64 = {np.log(64):.2f}, the loss of guessing:", at > np.log(64))
print("loss at step 61 back within 10% of the loss at step 59:", abs(after - before) < 0.1 * before)
print("gradient norm at step 60 above the 90th percentile of steps 1-59:",
      hot.grad_norms[59] > np.percentile(norms_before, 90),
      "· below the largest of steps 1-3:", hot.grad_norms[59] < hot.grad_norms[:3].max())
tplots.plot_spike(hot, at=60, window=20)

# %% [markdown]
# The loss on the bad batch jumps far above the loss of guessing ($\ln 64 = 4.16$: the model
# is confident, and wrong about almost every target); one step later it is back where it was.
# A spike like this one is in the data, not in the model. The loss points at the batch; the
# gradient norm confirms it (above the 90th percentile of the steps before, though below the
# largest norms of the first steps, so a norm curve alone would not single it out). When
# the loss does *not* come back after a spike, lower the learning rate or clip at the 90th
# percentile, and look at the batch.

# %% [markdown]
# ## Watch a run in TensorBoard · 用 TensorBoard 观察训练
#
# TensorBoard draws curves and histograms from event files that `tf.summary` writes. Since
# TensorFlow 2.21 does not install it, `tensorboard==2.21.0` is in this workbook's
# requirements; without it `tf.summary.scalar` raises `TBNotInstalledError` (TensorFlow's
# `tensorflow/python/summary/tb_summary.py` imports the implementation from the `tensorboard`
# package). `gl.GradNormLogger(log_dir=...)` writes, at every entry, each layer's gradient norm
# as the scalar `grad_norm/<layer>` and its gradient values as the histogram
# `gradients/<layer>`. During `fit`:

# %%
import shutil  # noqa: E402

log_dir = "logs/ch09"  # beside this notebook; a fresh log each time the cell runs
shutil.rmtree(log_dir, ignore_errors=True)
model = gl.build_transformer(2, norm_position="post")
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss_fn)
xs, ys = gl.markov_tokens(batch_size=64, seq_len=32, vocab_size=64, seed=3)
logger = gl.GradNormLogger(probe=(xs[:16], ys[:16]), every="batch", log_dir=log_dir + "/fit")
bar = gl.train.fit.FitProgress()  # batches done, no timings or losses (verbose=1 prints both)
model.fit(xs, ys, batch_size=16, epochs=2, verbose=0, callbacks=[logger, bar])
print("logged at batches", logger.steps, "for layers", list(logger.history))
print("TensorBoard log directory:", log_dir)
print("to see it, run in a terminal in this folder:  tensorboard --logdir", log_dir)

# %% [markdown]
# What `probe=(x, y)` measures: after each batch, one tape on that fixed probe batch (here the
# first 16 sequences), in inference mode (`training=False`: no dropout, BatchNorm's moving
# statistics), with the weights as they stand. Its curve shows how the gradient on one fixed
# batch changes as the model trains, not the gradient `fit` applied to each training batch
# (for that, train with `gl.GradNormTrainStep`). The last logged entry is exactly such a tape:

# %%
with tf.GradientTape() as tape:
    probe_loss = loss_fn(ys[:16], model(xs[:16], training=False))
probe_grads = tape.gradient(probe_loss, model.trainable_variables)
probe_block_1 = np.sqrt(sum(float(tf.reduce_sum(tf.square(tf.cast(g, tf.float64))))
                            for v, g in zip(model.trainable_variables, probe_grads) if v.path.startswith("block_1/")))
print(f"last logged block_1 norm {logger.history['block_1'][-1]:.5g}; tape on the probe batch, training=False: "
      f"{probe_block_1:.5g}")

# %% [markdown]
# From a custom loop, call `logger.log_gradients(model, grads, step)` with the gradients your
# tape gave:

# %%
loop_logger = gl.GradNormLogger(log_dir=log_dir + "/loop")
sgd = keras.optimizers.SGD(0.1)
for step in range(3):
    with tf.GradientTape() as tape:
        loss = loss_fn(ys[:16], model(xs[:16], training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    norms = loop_logger.log_gradients(model, grads, step)
    sgd.apply_gradients(zip(grads, model.trainable_variables))
loop_logger.close()
print("logged steps", loop_logger.steps, "for", sorted(norms))

# %% [markdown]
# TensorBoard's own reader finds them. TF2 summaries are stored as tensors tagged with the
# plugin that draws them (`scalars`, `histograms`):

# %%
from tensorboard.backend.event_processing import event_accumulator  # noqa: E402

acc = event_accumulator.EventAccumulator(log_dir + "/fit", size_guidance={event_accumulator.TENSORS: 0})
acc.Reload()
for tag in ("grad_norm/block_1", "gradients/block_1"):
    events = acc.Tensors(tag)
    print(f"{tag:<18} plugin {acc.SummaryMetadata(tag).plugin_data.plugin_name:<10} "
          f"{len(events)} steps, last value shape {tf.make_ndarray(events[-1].tensor_proto).shape}")
print("same norms as the logger:", np.allclose(
    [float(tf.make_ndarray(e.tensor_proto)) for e in acc.Tensors("grad_norm/block_1")], logger.history["block_1"]))

# %% [markdown]
# To look at them, start TensorBoard on the directory, in a terminal (then open
# http://127.0.0.1:6006):
#
# ```bash
# tensorboard --logdir /tmp/gradlab-ch09-... --host 127.0.0.1
# ```
#
# or inside JupyterLab:
#
# ```python
# %load_ext tensorboard
# %tensorboard --logdir /tmp/gradlab-ch09-...
# ```
#
# The *Scalars* tab then shows one curve per layer's `grad_norm/<layer>` and the *Histograms*
# tab how each layer's gradient values spread over the steps. The browser tier of this
# workbook's tests starts a real TensorBoard over such a log and checks both tabs.

# %% [markdown]
# ## Summary · 总结
#
# - Per-block gradients at initialization depend on more than the LayerNorm's position. With
#   Keras's small default embedding, pre-LN gradients fall towards the output because the
#   residual stream grows; with an embedding large enough to dominate the stream they are
#   flat. Post-LN gradients, averaged over initializations, grow towards the output in a
#   12-block stack; a single model can show almost anything.
# - What Xiong et al.'s bound says about depth holds with Keras's defaults: the last pre-LN
#   block's gradient shrinks like $1/\sqrt{L}$, the last post-LN block's does not.
# - Adam's first step moves every parameter by the full learning rate; warmup ramps the rate
#   from 0. In Keras 3: `CosineDecay(0.0, ..., warmup_target=lr, warmup_steps=n, alpha=1.0)`.
# - A post-LN stack that stalls without warmup learns with it at the same peak rate; a learning-rate
#   sweep with and without warmup finds the edge of stability, and warmup moves it. Pre-LN learns
#   without warmup where post-LN stalls.
# - The Playbook's clipping threshold is the 90th percentile of the logged norms; more than
#   half the steps clipped means the threshold is too low, and the clipping is a disguised
#   lower learning rate.
# - `gl.GradNormLogger(log_dir=...)` puts per-layer norms and histograms in TensorBoard, from
#   `fit` or (with `log_gradients`) from a custom loop.

# %% [markdown]
# ## Exercises
#
# Each exercise has a cell to fill in and one check. As shipped, the cells hold placeholders,
# so the checks show ❌ with their feedback; worked answers are in [Solutions](#Solutions),
# collapsed.
#
# **1. Per-block norms.** Write `per_block(model, x, y)` that returns each block's gradient
# norm (all of its variables, float64), earliest block first, for the loss
# `loss_fn(y, model(x))`. The check tries it on a 3-block post-LN model.

# %%
def per_block(model, x, y):
    return None  # your code here


ch09.check_block_norms(per_block)

# %% [markdown]
# **2. A warmup in Keras.** Build a `keras.optimizers.schedules.CosineDecay` that ramps
# linearly from 0 to 3e-3 over 20 steps and then stays at 3e-3 for the rest of a 200-step run
# (with `alpha=1.0` the value of `decay_steps` does not matter).

# %%
my_schedule = None  # your schedule here
ch09.check_warmup_schedule(my_schedule)

# %% [markdown]
# **3. A clip threshold for a run you log.** The Playbook's recipe starts from the *unclipped*
# gradient norm of every step, which you log yourself. `ch09.clip_exercise()` gives a fresh
# 2-block post-LN model and the 40 batches of its run. Train it with
# `keras.optimizers.Adam(1e-2)`, one step per batch in order, without clipping, and log each
# step's global gradient norm (all trainable variables, before the update; the embeddings'
# gradients are `tf.IndexedSlices`, chapter 00). Then pick the Playbook's starting clip
# threshold for this run. The check compares your norms with its own run of the same model
# (40 small steps: a few seconds).

# %%
clip_model, clip_batches = ch09.clip_exercise()
my_norms = None      # your loop here: one norm per step, 40 in all
my_threshold = None  # your answer: a number
ch09.check_clip_threshold(my_norms, my_threshold)

# %% [markdown]
# **4. Flat pre-LN gradients, on average and deeper.** Condition 1 measured one
# initialization of a 12-block stack. Does the flat setting stay flat for the *expected*
# gradient (condition 2) of a deeper stack (condition 4)? For each setting in
# `ch09.FLAT_SETTINGS`, take the per-block gradient norms (`layer_grad_norms`) of a **24-block**
# pre-LN stack for the initializations `seed=0` to `7`
# (`engine.report(24, "pre", seed=s, **setting)`), average each block's norm over the eight,
# and divide the last block's mean by the first block's. Answer with a dict `{key: ratio}`;
# which setting is still flat?

# %%
print(ch09.FLAT_SETTINGS)
my_ratios = None  # your answer: a dict, one ratio for each of "a", "b", "c", "d"
ch09.check_flat_pre_ln(my_ratios)

# %% [markdown]
# ## Solutions
#
# **1.** Group the gradients by the path prefix `block_<i>/`:

# %% tags=["solution"]
def per_block(model, x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x))
    grads = tape.gradient(loss, model.trainable_variables)
    blocks = sorted({v.path.split("/")[0] for v in model.trainable_variables if v.path.startswith("block_")},
                    key=lambda name: int(name.split("_")[1]))
    out = []
    for block in blocks:
        squares = [tf.reduce_sum(tf.square(tf.cast(g, tf.float64)))
                   for v, g in zip(model.trainable_variables, grads) if v.path.startswith(block + "/")]
        out.append(float(tf.sqrt(tf.add_n(squares))))
    return out


ch09.check_block_norms(per_block)

# %% [markdown]
# **2.** Start at 0, reach the target at step 20, and keep it there (`alpha=1.0`):

# %% tags=["solution"]
my_schedule = keras.optimizers.schedules.CosineDecay(0.0, decay_steps=180, alpha=1.0,
                                                     warmup_target=3e-3, warmup_steps=20)
ch09.check_warmup_schedule(my_schedule)

# %% [markdown]
# **3.** Log the norm inside the loop, before `apply_gradients`, then take the 90th percentile
# of what you logged:

# %% tags=["solution"]
clip_model, clip_batches = ch09.clip_exercise()
clip_opt = keras.optimizers.Adam(1e-2)
my_norms = []
with gl.progress.Progress(len(clip_batches), "your steps") as bar:  # a bar: 40 eager steps take seconds
    for x_b, y_b in clip_batches:
        with tf.GradientTape() as tape:
            loss = loss_fn(y_b, clip_model(x_b))
        grads = tape.gradient(loss, clip_model.trainable_variables)
        my_norms.append(gl.true_global_norm(grads))      # unclipped, before the update
        clip_opt.apply_gradients(zip(grads, clip_model.trainable_variables))
        bar.update()
my_threshold = np.percentile(my_norms, 90)
ch09.check_clip_threshold(my_norms, my_threshold)

# %% [markdown]
# **4.** Stack each setting's reports as (seeds, blocks), average over the seeds (axis 0:
# one expected norm per block), then divide the last block by the first:

# %% tags=["solution"]
my_ratios = {}
for key, setting in ch09.FLAT_SETTINGS.items():
    norms_4 = np.array([engine.report(24, "pre", seed=s, **setting).layer_grad_norms for s in range(8)])
    expected = norms_4.mean(axis=0)                  # (24,): each block's norm, averaged over the seeds
    my_ratios[key] = float(expected[-1] / expected[0])
print("last/first, 24 blocks, mean over 8 seeds:", {k: round(r, 3) for k, r in my_ratios.items()})
ch09.check_flat_pre_ln(my_ratios)
