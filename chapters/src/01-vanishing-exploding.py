# %% [markdown]
# # Vanishing and exploding gradients · 梯度消失与梯度爆炸的检测与处理

# %% [markdown]
# **What you will learn**
#
# - why back-propagation multiplies one factor per layer, starting from a chain of plain
#   numbers and ending with the matrix chain rule;
# - to *measure* it: a `tf.GradientTape` that watches every layer's pre-activation, which
#   you can add to your own model; then gradlab's packaged version and its verdict rule;
# - to *see* it: the live **GradientExplorer** re-plots every layer's gradient as you move
#   sliders for depth, activation, initializer and clipping;
# - to *detect* it: `assert_all_finite`, `check_numerics`, `enable_check_numerics` and
#   per-layer monitoring during training, and what each one can and cannot catch;
# - to *handle* it: clipping (and what it does with Adam and with vanishing gradients),
#   Glorot/He/LeCun initialization and the choice of activation, each with a cell that
#   measures what it really does.
#
# The core path ends with the summary and the exercises right after it: plan on about 80
# minutes (about 4,000 words of prose, 20 minutes at 200 words a minute; 38 code cells to run
# and read, about 30; three exercises, about 25; the explorer's experiments, about 5). The
# optional part after them goes deeper (subnormal numbers, layers that are not square, Adam's
# second moment); the exercises' solutions close the chapter.

# %% [markdown]
# ## Setup

# %%
import gradlab as gl
import keras
import numpy as np
import tensorflow as tf
from gradlab.exercises import ch01

gl.setup(seed=0)

# %% [markdown]
# ## Why gradients shrink or grow · 定义与原因
#
# The source text defines the two problems:
#
# > • 梯度消失 (vanishing): gradients become tiny during back-propagation, so weights update
# > slowly; common in deep networks with sigmoid or tanh. Causes: many layers, saturating
# > activation derivatives.
# > • 梯度爆炸 (exploding): gradients become very large, giving numerical instability or NaN;
# > common with bad weight initialization or very deep networks.
#
# Both follow from the chain rule. Start with plain numbers.
#
# ### A chain of numbers
#
# Feed a number through five sigmoids, $h_1 = \sigma(h_0)$, $h_2 = \sigma(h_1)$, ... The chain
# rule says $dh_5/dh_0$ is the product of the five local derivatives $\sigma'(h_{k-1})$, and
# $\sigma'(z) = \sigma(z)(1-\sigma(z))$ is at most $0.25$. Ask the tape, then multiply by hand:

# %%
h0 = tf.constant(0.0)
with tf.GradientTape() as tape:
    tape.watch(h0)                     # h0 is a constant, not a variable: watch it explicitly
    hs = [h0]
    for _ in range(5):
        hs.append(tf.sigmoid(hs[-1]))
local = [float(tf.sigmoid(h) * (1 - tf.sigmoid(h))) for h in hs[:-1]]
print("local derivatives:", np.round(local, 4))
print("their product    :", f"{np.prod(local):.4g}")
print("the tape says    :", f"{float(tape.gradient(hs[-1], h0)):.4g}")  # the same number
print("0.25 ** 5        :", f"{0.25**5:.4g}")  # an upper bound

# %% [markdown]
# Every link can only shrink the derivative, by a factor 4 or more. Compounded over depth:

# %%
for depth in (5, 10, 20, 50):
    print(f"0.25 ** {depth:2d} = {0.25**depth:.3g}")

# %% [markdown]
# ### The same with matrices
#
# A network does the same with vectors. We write the **depth** (the number of hidden layers)
# as $D$ and the **loss** as $\mathcal{L}$. Hidden layer $l$ computes
#
# $$z_l = h_{l-1} W_l + b_l, \qquad h_l = f(z_l),$$
#
# a matrix product plus a shift, then the activation $f$ on every element; $h_0$ is the input
# batch, one example per row. $W_l$ has shape $(\text{fan\_in}, \text{fan\_out})$: the inputs
# each unit receives and the units the layer feeds (here both are 64).
#
# Call $\delta_l = \partial\mathcal{L}/\partial z_l$, the gradient of the loss with respect to
# layer $l$'s pre-activation, the layer's **signal**. The chain rule passes it backwards:
#
# $$\delta_{l} = \big(\delta_{l+1}\, W_{l+1}^{\top}\big) \odot f'(z_l).$$
#
# $W^{\top}$ is the **transpose** of $W$ (`tf.transpose(W)`), $\odot$ the **element-wise
# product** (`*` in TensorFlow). So each layer multiplies the signal by a weight matrix and by
# the activation's derivative: one factor per layer, as in the chain of numbers. The weight gradient follows from the signal,
# $\partial\mathcal{L}/\partial W_l = h_{l-1}^{\top}\,\delta_l$: forward activation times backward signal.
#
# ### Measure the signal of every layer with a tape
#
# $z_l$ is an intermediate tensor, not a variable, so Keras does not hand you its gradient.
# Run the layers by hand inside the tape and `watch` each $z_l$:

# %%
def layer_signals(model, x, y):
    """dLoss/dz for every hidden Dense layer of `model`, input side first."""
    with tf.GradientTape() as tape:
        h, zs = x, []
        for layer in model.layers[:-1]:          # the hidden Dense layers
            z = h @ layer.kernel + layer.bias    # the pre-activation z_l
            tape.watch(z)                        # an intermediate tensor: watch it
            zs.append(z)
            h = layer.activation(z)
        loss = tf.reduce_mean(tf.square(model.layers[-1](h) - y))   # mean squared error
    return zs, tape.gradient(loss, zs)

# %% [markdown]
# Run it on a 6-layer sigmoid network from `gl.models.mlp.build_mlp` (Dense layers of width 64, Glorot
# initialization, one output unit) and a batch of 128 random examples:

# %%
mlp6 = gl.models.mlp.build_mlp(6, activation="sigmoid", initializer="glorot_uniform")
x, y = gl.models.mlp.make_data(batch_size=128, input_dim=64, seed=0)
zs, signals = layer_signals(mlp6, x, y)
signal_norms = [float(tf.norm(tf.cast(s, tf.float64))) for s in signals]
print("signal norms, layer 1..6:", [f"{v:.3g}" for v in signal_norms])

# %% [markdown]
# The norm is taken **in float64**: `tf.norm` squares the elements in their own dtype, a
# float32 square below about $10^{-38}$ becomes 0, and a tiny gradient would get a norm of
# exactly 0 (the underflow section shows it). Copy this cell into your own training loop to
# monitor any stack of `Dense` layers.

# %% [markdown]
# ### The packaged version: `gl.gradient_report`
#
# `gl.gradient_report(model, x, y)` runs this tape over any stack of `Dense` layers, in
# float64, and adds the weight-gradient norms, the forward spread and a verdict:

# %%
report = gl.gradient_report(mlp6, x, y)
print(report)
print("largest relative difference from the hand-made tape:",
      f"{np.max(np.abs(report.signal_norms - signal_norms) / signal_norms):.1e}")

# %% [markdown]
# The signal shrinks towards the input side. The per-layer factors
# $\lVert\delta_l\rVert / \lVert\delta_{l+1}\rVert$ multiply to the **ratio** between the first
# and the last layer, and their geometric mean is the **gain**, the average factor per layer:

# %%
factors = report.signal_norms[:-1] / report.signal_norms[1:]
print("per-layer factors:", np.round(factors, 3))
print("their product    :", f"{np.prod(factors):.4g}", "= ratio", f"{report.ratio:.4g}")
print("geometric mean   :", f"{np.prod(factors) ** (1 / len(factors)):.4g}", "= gain", f"{report.gain:.4g}")

# %% [markdown]
# ### The verdict rule
#
# `gl.diagnose(signal_norms)` turns the norms into one word. With $r$ the ratio (layer 1 over
# layer $D$) and $g = r^{1/(D-1)}$ the gain:
#
# | verdict | when |
# |---|---|
# | *non-finite* | any norm is NaN or inf |
# | *vanishing* | $r < 10^{-3}$, **or** $g < 0.95$ and $r < 0.1$ |
# | *exploding* | $r > 10^{3}$, **or** $g > 1/0.95$ and $r > 10$ |
# | *healthy* | otherwise |
#
# In words: $r$ is what reaches the first layer, as a fraction of what the last layer gets, so
# $r < 1$ means the signal shrank on its way back to the input. Each verdict has two conditions
# joined by **or**, and one of them is enough: the first catches a large total change (more
# than 1000×), the second a steady shrinking (or growth) layer after layer once it adds up to
# 10×. A worked example, the 3-layer sigmoid network below: $r = 0.057$, so
# $g = 0.057^{1/2} = 0.24$. The first condition fails ($0.057$ is not below $10^{-3}$), the
# second holds ($0.24 < 0.95$ and $0.057 < 0.1$): vanishing. At depth 2, $r = 0.21$: $g$ is
# below 0.95 but $r$ is not below 0.1, so neither holds: healthy.
#
# From here on the chapter also uses `engine.report(depth, activation, initializer)`, the
# explorer's fast engine. **When to use which:** `gl.gradient_report(model, x, y)` takes any
# stack of `Dense` layers you built and any batch: use it on your own model. The engine knows
# only the chapter's `gl.models.mlp.build_mlp` networks (width 64) on the batch of 128 made
# above, and builds and runs them itself, fast enough to sweep 100 depths: use it to sweep.
# On the same network and batch their numbers agree to float32's rounding:

# %%
engine = gl.engines.mlp.MLPGradientEngine()   # fast reports for gl.models.mlp.build_mlp networks (width 64, batch 128)
for depth in (6, 50):
    built = gl.models.mlp.build_mlp(depth, activation="sigmoid", initializer="glorot_uniform")
    a, b = gl.gradient_report(built, x, y), engine.report(depth, "sigmoid", "glorot_uniform")
    print(f"depth {depth}: ratio {a.ratio:.3g} (gradient_report) and {b.ratio:.3g} (engine) · every layer within 1e-6:",
          bool(np.allclose(a.signal_norms, b.signal_norms, rtol=1e-6, atol=0)), "· verdicts",
          gl.reports.verdict.status_word(a.status), gl.reports.verdict.status_word(b.status))

# %% [markdown]
# They differ only in rounding: the engine sums each matrix product in float64 before
# rounding it to float32 (the optional part says why), so its last digits are the same on
# every CPU; we measured at most $10^{-7}$ apart at depths 3 to 50. Right at the underflow
# edge, where a layer keeps only a few non-zero elements, that rounding can decide more (8 %
# on one layer at depth 60). On this machine `gl.gradient_report` took 0.6 s at depth 6 and
# 4 s at depth 50, building the model included; `engine.report` takes 0.1 to 0.3 s after a
# first call that builds its graphs. The borderline cases:

# %%
cases = [(2, "sigmoid", "glorot_uniform"), (3, "sigmoid", "glorot_uniform"), (5, "sigmoid", "glorot_uniform"),
         (3, "relu", "glorot_uniform"), (5, "tanh", "glorot_uniform"), (50, "tanh", "glorot_uniform"),
         (50, "sigmoid", "large_normal"), (50, "relu", "he_normal")]
for depth, act, init in cases:
    r = engine.report(depth, act, init)
    print(f"depth {depth:2d} {act:8s} {init:15s} gain {r.gain:.3f}  ratio {r.ratio:<6.2g} → {gl.reports.verdict.status_word(r.status)}")

# %% [markdown]
# Sigmoid at depth 2 loses a factor of about 5 once: healthy. At depth 3 the loss has
# compounded past 10× with a gain near 0.24: vanishing, by the per-layer rule. tanh at depth
# 50 loses only 6 % per layer, yet about 20× in total: vanishing too. The thresholds are a
# convention, not a law: a factor of 10 overall is roughly where early layers start learning
# visibly slower than late ones.
#
# ### The activation's derivative
#
# Part of each factor is $f'(z)$. Here are four activations and their derivatives; the
# derivatives are not typed in by hand, they come from `tf.GradientTape`:

# %%
z, curves = gl.models.mlp.activation_curves(["sigmoid", "tanh", "relu", "leaky_relu"])
for name, (f, df) in curves.items():
    print(f"{name:10s} max f'(z) = {df.max():.3f}   f'(-3) = {df[np.argmin(abs(z + 3))]:.3f}")
gl.plots.plot_activations(z, curves)

# %% [markdown]
# Sigmoid's derivative is at most 0.25, and much smaller once $|z|$ grows (the unit
# **saturates**): with well-scaled weights each sigmoid layer shrinks the signal 4× or more.
# tanh's derivative reaches 1 at $z = 0$; ReLU's is exactly 1 for positive inputs.

# %% [markdown]
# ## Tiny is not zero: float32 underflow
#
# At depth 50 the product of sigmoid factors is about $10^{-31}$. float32 can hold such a
# number (its smallest *normal* number is $2^{-126} \approx 1.2\times10^{-38}$), but not its
# square, and a norm squares the elements. Below the smallest normal number lie the
# **subnormal** numbers, down to about $1.4\times10^{-45}$ with fewer and fewer significant
# bits; TensorFlow's CPU kernels **flush** them to 0 (the optional part shows how).

# %% [markdown]
# The depth-50 sigmoid network, with the tape from above. Its layer-1 signal is tiny but
# **not zero**. Its float32 norm is zero, because every squared element flushes to 0:

# %%
deep = gl.models.mlp.build_mlp(50, activation="sigmoid", initializer="glorot_uniform")
_, deep_signals = layer_signals(deep, x, y)
d1 = deep_signals[0]
nonzero = int(tf.math.count_nonzero(d1)) / d1.shape.num_elements()  # the last few depend on the CPU
print("layer 1: non-zero elements", f"{nonzero:.1%}", "of", d1.shape.num_elements(),
      "· largest", f"{float(tf.reduce_max(tf.abs(d1))):.3g}")
print("float32 norm:", float(tf.norm(d1)))                              # 0.0: an artifact
print("float64 norm:", f"{float(tf.norm(tf.cast(d1, tf.float64))):.3g}")  # the true size

# %% [markdown]
# So at depth 50 the early layers do receive a gradient, about $10^{-31}$ times the last
# layer's: useless for learning, but not zero. Every norm in gradlab is taken in float64.
# (How float32 represents numbers this small, and where TensorFlow starts to flush them to 0,
# is in the [optional part](#Going-further-·-深入（选读）) after the summary.)

# %% [markdown]
# Deeper still, the gradient **tensor** itself becomes exactly zero. The explorer's fast
# engine computes the same report as `gl.gradient_report`, in float32 too, with one
# difference: it sums each matrix product in float64 before rounding it to float32, so its
# numbers are the same on every CPU (a float32 matmul's last bit depends on the CPU's vector
# instructions, and a network that amplifies its signal amplifies that bit too). Sweep the
# depth and count the layers whose signal is exactly 0:

# %%
for depth in (50, 54, 56, 57, 58, 60, 70, 80):
    r = engine.report(depth, "sigmoid", "glorot_uniform")
    print(f"depth {depth}: {int(np.sum(r.signal_norms == 0)):2d} layers exactly 0 · layer-1 signal {r.signal_norms[0]:.3g}")

# %% [markdown]
# From depth 57 on, the first layers receive **exactly zero**, and no amount of training can
# move them. Below that depth the gradient is tiny but real.
#
# Two different zeros, then. At depth 50 the float32 **norm** of layer 1 is 0 while its
# elements, about $10^{-34}$, are there: only their squares (about $10^{-68}$) are below
# float32's range, and a float64 norm finds them. From depth 57 the **elements** themselves
# are 0: the backward pass flushed them, so no norm in any precision finds anything, and
# gradlab counts such a layer as exactly 0. The same tape at both depths:

# %%
for depth in (50, 57):
    _, deep_signals = layer_signals(gl.models.mlp.build_mlp(depth, activation="sigmoid", initializer="glorot_uniform"), x, y)
    d1 = deep_signals[0]
    print(f"depth {depth}: layer-1 elements all exactly 0: {not bool(tf.reduce_any(d1 != 0))} · "
          f"float32 norm {float(tf.norm(d1)):.3g} · float64 norm {float(tf.norm(tf.cast(d1, tf.float64))):.3g}")
# depth 50: False · 0 · 6.13e-33 (a norm's zero); depth 57: True · 0 · 0 (a tensor's zero)

# %% [markdown]
# ## See it: the GradientExplorer · 交互探索
#
# The explorer builds the same network as `gl.models.mlp.build_mlp` (width 64, batch 128) and plots, for
# every hidden layer, input side on the left, on a **logarithmic** y-axis (each grid step is a
# factor of 10):
#
# - **blue**: the signal $\lVert\delta_l\rVert = \lVert\partial\mathcal{L}/\partial z_l\rVert$,
#   the thing that vanishes or explodes; **dashed blue**, where the explorer draws it, is the
#   signal that the variance argument further below predicts;
# - **orange**: the weight-gradient norm $\lVert\partial\mathcal{L}/\partial W_l\rVert$, what the
#   optimizer actually uses;
# - **green line**: the weight gradient after clipping, when clipping is on;
# - **grey dotted**: the standard deviation of each layer's output (the forward signal);
# - **green band**: where layer 1's *signal* must lie for the total-ratio rule ($10^{-3}$ to
#   $10^{3}$ times the last layer's signal); the per-layer rule can still flag a network whose
#   layer 1 is inside it;
# - **red triangles** on the bottom edge: layers whose signal tensor is exactly 0 (float32
#   underflow, or no gradient at all).
#
# Move the sliders. Each move recomputes the forward and backward pass and redraws.

# %%
ex = gl.GradientExplorer(depth=20, activation="sigmoid", initializer="glorot_uniform", engine=engine)
ex

# %% [markdown]
# ### Experiment 1: make it vanish
#
# Drag `depth` to 50 with sigmoid. The same can be done from code: every control is a
# public attribute, and `.report` is updated before the assignment returns. The experiments
# below run on a copy, `lab = ex.copy()` (same settings, same engine), so the explorer above
# keeps the settings of its cell and stays yours to move; `lab.snapshot()` stores a picture
# of each new state, so the saved notebook shows it too.

# %%
lab = ex.copy()
lab.depth.value = 50
print(f"gain {lab.report.gain:.3f} · ratio {lab.report.ratio:.2g}")
print("layer 1..3 signal:", [f"{v:.3g}" for v in lab.report.signal_norms[:3]])  # tiny, not 0
lab.snapshot()

# %% [markdown]
# The blue line falls by about a factor 4 per layer, 31 orders of magnitude in all, and no
# layer is exactly zero. Push the slider to 100 and red triangles appear (exercise 3).
#
# ### Experiment 2: make it explode
#
# Weights that are too large make every factor bigger than one. Pick `large normal (σ=1)`
# with `tanh`: $\sigma\sqrt{64} = 8$ times larger than Glorot's scale.

# %%
lab.set(depth=20, activation="tanh", initializer="large_normal")
print(f"gain {lab.report.gain:.3f} · ratio {lab.report.ratio:.3g} → {gl.reports.verdict.status_word(lab.report.status)}")
lab.snapshot()

# %% [markdown]
# ### Experiment 3: fix it
#
# ReLU passes a derivative of exactly 1 for positive inputs, and He initialization scales
# the weights for it (why, below). Together they stay healthy even at depth 100:

# %%
lab.set(depth=100, activation="relu", initializer="he_normal")
print(f"gain {lab.report.gain:.3f} · ratio {lab.report.ratio:.3g} → {gl.reports.verdict.status_word(lab.report.status)}")
lab.snapshot()

# %% [markdown]
# Now try your own combinations in the explorer.
#
# ### Theory against measurement: the variance argument
#
# A layer with random weights of variance $\operatorname{Var}(W)$ multiplies the forward
# spread by about $\sqrt{\text{fan\_in}\cdot\operatorname{Var}(W)}$ (each unit sums fan_in
# inputs) and the backward signal by about
#
# $$g = \sqrt{\text{fan\_out}\cdot \operatorname{Var}(W)\cdot \mathbb{E}[f'(z)^2]}.$$
#
# For a linear unit a steady forward pass needs $\operatorname{Var}(W) = 1/\text{fan\_in}$, a
# steady backward pass $1/\text{fan\_out}$; Glorot's $2/(\text{fan\_in}+\text{fan\_out})$ is a
# **compromise**, exact for square layers (the
# [optional part](#Going-further-·-深入（选读）) measures others). He et al. (2015)
# take $2/\text{fan\_in}$ for ReLU, because ReLU zeroes half the units: $\mathbb{E}[f'(z)^2] = 1/2$.
#
# `gl.engines.mlp.predicted_gain` evaluates the backward formula with the sampled weights and the
# measured $\mathbb{E}[f'(z)^2]$, and compares with the measured gain:

# %%
print(gl.i18n.pad("activation", 10), gl.i18n.pad("initializer", 15), gl.i18n.pad("predicted", 9, ">"),
      gl.i18n.pad("measured", 9, ">") + "  status at depth 30")
for act, init in [("sigmoid", "glorot_uniform"), ("tanh", "glorot_uniform"), ("relu", "glorot_uniform"),
                  ("relu", "he_normal"), ("selu", "lecun_normal"), ("linear", "orthogonal"),
                  ("tanh", "large_normal")]:
    r = engine.report(30, act, init)
    predicted, measured = gl.engines.mlp.predicted_gain(r, engine, act, init)
    print(f"{act:10s} {init:15s} {predicted:9.3f} {measured:9.3f}  {gl.reports.verdict.status_word(r.status)}")

# %% [markdown]
# The formula predicts the measured gain within a few percent: vanishing and exploding are
# $g^{D}$ with $g$ a little off 1.

# %% [markdown]
# ## Detect it · 检测方法
#
# The source suggests `tf.debugging.assert_all_finite` on the gradients. Here is its code,
# exactly as written:

# %%
import tensorflow as tf

# 示例代码：检测梯度爆炸
model = tf.keras.Sequential([tf.keras.layers.Dense(10, activation='relu')])
optimizer = tf.keras.optimizers.Adam()

inputs = tf.random.normal([32, 784])
labels = tf.random.normal([32, 10])

with tf.GradientTape() as tape:
    predictions = model(inputs)
    loss = tf.reduce_mean(tf.square(labels - predictions))
gradients = tape.gradient(loss, model.trainable_variables)

# 添加断言检测
for grad in gradients:
    tf.debugging.assert_all_finite(grad, "梯度中包含非有限值，可能存在梯度爆炸")

# %% [markdown]
# It runs and prints nothing: every gradient is finite. Two things to know about it:
#
# 1. The comment calls it a check for *exploding* gradients, but `assert_all_finite` only
#    looks for NaN and inf. A gradient with entries of $10^{15}$ is finite and passes:

# %%
huge = tf.constant([1e15, -3e15])
tf.debugging.assert_all_finite(huge, "never raised")
print("a gradient of norm", f"{float(tf.norm(huge)):.3g}", "passes assert_all_finite")

# %% [markdown]
# So it catches an explosion only once it has **overflowed**. To catch growth before that,
# watch the norms (below).
#
# 2. When something is not finite, the check raises an `InvalidArgumentError` with your
#    message. A realistic way to get there: the gradient of a
# Euclidean norm $\sqrt{\sum w^2}$ at $w = 0$ is $0/0$:

# %% tags=["raises-exception"]
w = tf.Variable([0.0, 0.0])
with tf.GradientTape() as tape:
    norm = tf.sqrt(tf.reduce_sum(w**2))
grad = tape.gradient(norm, w)
print("gradient:", grad.numpy())
tf.debugging.assert_all_finite(grad, "gradient of the norm is not finite")

# %% [markdown]
# The error names the op that raised it, `CheckNumerics`: `assert_all_finite` wraps
# `tf.debugging.check_numerics(t, message)`, which returns `t` unchanged when it is finite.

# %% [markdown]
# Both tell you *that* something went wrong, not *where*. `tf.debugging.enable_check_numerics()`
# instruments every op and raises at the **first** op whose output is not finite, naming it
# (we print the first lines of its long message):

# %%
tf.debugging.enable_check_numerics()
try:
    a = tf.constant([1.0, 1000.0])
    b = tf.exp(a)                     # the first op with an inf output
    c = b / tf.reduce_sum(b)          # inf / inf = NaN, but we never get here
except tf.errors.InvalidArgumentError as err:
    for line in err.message.splitlines():
        if line.startswith("!!!") or "# of" in line:
            print(line.strip())
finally:
    tf.debugging.disable_check_numerics()

# %% [markdown]
# The message names the op type `Exp`, and that one of its outputs was `+Inf`. Turn it off
# again afterwards: it slows every op down.
#
# ### Clipping does not cure NaN
#
# Clipping cannot help when the loss turns NaN: the norm of a tensor with a NaN is NaN, so
# `clip_by_norm` and `clip_by_global_norm` turn *every* entry into NaN, and `clip_by_value`
# leaves the NaN in place:

# %%
g = tf.constant([np.nan, 1.0, 2.0])
print("clip_by_value      :", tf.clip_by_value(g, -1.0, 1.0).numpy())
print("clip_by_norm       :", tf.clip_by_norm(g, 1.0).numpy())
print("clip_by_global_norm:", [t.numpy() for t in tf.clip_by_global_norm([g, tf.ones(2)], 1.0)[0]])

# %% [markdown]
# Detect first, then fix the cause (the initialization, the learning rate, an unsafe op like
# the norm above, where a small `eps` under the square root is the usual fix).

# %% [markdown]
# ### Monitor every layer during training
#
# The most useful detector is the cheapest one: record each layer's gradient norm while
# training. `gl.train.steps.train_mlp` does that for a stack of Dense layers, with the same tape as
# `layer_signals` above. Train a 12-layer sigmoid
# network for 40 steps and look at all layers at once:

# %%
xs, ys = gl.models.mlp.make_data(batch_size=256, input_dim=16, seed=1)
ys = tf.reduce_sum(xs[:, :4], axis=1, keepdims=True)  # a target the network can learn
deep_sigmoid = gl.models.mlp.build_mlp(12, width=32, activation="sigmoid", input_dim=16, seed=0)
hist = gl.train.steps.train_mlp(deep_sigmoid, xs, ys, optimizer=keras.optimizers.SGD(0.1), steps=40)
print("status at the first and last step:", gl.reports.verdict.status_word(hist.statuses[0]), "→", gl.reports.verdict.status_word(hist.statuses[-1]))
print("loss first → last:", f"{hist.losses[0]:.3f} → {hist.losses[-1]:.3f}",
      "· variance of the target:", f"{float(tf.math.reduce_variance(ys)):.3f}")
print("layer-1 signal / layer-12 signal at the last step:",
      f"{hist.signal_norms[-1][0] / hist.signal_norms[-1][-1]:.2g}")
gl.plots.plot_signal_history(hist)

# %% [markdown]
# Each row is a layer, each column a step; colour is $\log_{10}$ of the signal norm. The
# input-side rows are orders of magnitude darker for the whole run: those layers barely learn,
# and the loss stalls at about the variance of the target, what predicting a constant
# achieves. Chapter 03 builds a Keras callback that logs these norms during `fit`.

# %% [markdown]
# ## Handle it · 处理方法
#
# The source lists three remedies: gradient clipping, weight initialization and the choice
# of activation. Each one below with what it really does.
#
# ### 1. Gradient clipping · 梯度裁剪
#
# The source's clipping code, as written, continuing from its detection example above:

# %%
# 梯度裁剪示例
clipped_gradients = [tf.clip_by_norm(g, clip_norm=1.0) for g in gradients]
optimizer.apply_gradients(zip(clipped_gradients, model.trainable_variables))
print("norms before:", [f"{gl.true_norm(g):.3g}" for g in gradients])
print("norms after :", [f"{gl.true_norm(g):.3g}" for g in clipped_gradients])  # each ≤ 1

# %% [markdown]
# It runs, with three subtleties. **First, the source pairs clipping with Adam**, which
# divides each gradient element by a running estimate of its own size: a constant rescaling
# barely changes Adam's steps, but clipping still protects it from one huge spike (the
# [optional part](#Going-further-·-深入（选读）) measures both).
#
# **Second, `clip_by_norm` clips each tensor separately.** In the source's code the kernel's
# gradient was shrunk, the bias's was not, so the update no longer points along the gradient.
# TensorFlow has three functions; on a 2-D gradient the difference is visible:

# %%
g2d = tf.constant([3.0, 0.5])
threshold = 1.0
clipped = {mode: gl.clip_gradients([g2d], (mode, threshold))[0].numpy() for mode in gl.core.CLIP_MODES}
for mode, v in clipped.items():
    print(f"clip_by_{mode:12s} → {np.round(v, 3)}   norm {np.linalg.norm(v):.3f}")
gl.plots.plot_clipping_2d(g2d.numpy(), clipped, threshold=threshold)

# %% [markdown]
# - `tf.clip_by_value(g, -t, t)` clips each **element** into $[-t, t]$: the direction changes,
#   the norm can still be $t\sqrt{n}$.
# - `tf.clip_by_norm(g, t)` rescales a tensor whose norm exceeds $t$: direction kept.
# - `tf.clip_by_global_norm(list, t)` rescales **all** tensors together by one factor: the
#   direction of the whole update is kept, and with it the ratio between any two layers'
#   gradients. For one tensor it equals `clip_by_norm` (the optional part compares the two on
#   a pair of tensors).

# %% [markdown]
# Keras optimizers do the same through arguments, one at a time: `clipvalue` (each element),
# `clipnorm` (each gradient tensor separately), `global_clipnorm` (all together); the
# optional part checks that they take the same steps.

# %% [markdown]
# **Third, the modes differ in the explorer too, and global-norm clipping does nothing for
# vanishing gradients.** A 10-layer sigmoid network: its last layer has a weight gradient of
# about 2, its first about $10^{-6}$. Clip the global norm to 0.1:

# %%
lab.set(depth=10, activation="sigmoid", initializer="glorot_uniform", clip_mode="global_norm", clip_norm=0.1)
r = lab.report
for layer in (1, 10):
    print(f"layer {layer:2d} weight gradient {r.weight_norms[layer - 1]:.3g} → after clipping "
          f"{r.clipped_weight_norms[layer - 1]:.3g}")
lab.snapshot()

# %% [markdown]
# The green line runs parallel to the orange one, 60 times lower: one factor for all layers
# keeps every layer-to-layer ratio, so the gradient vanishes exactly as much as before, and the
# tiny layer-1 gradient shrinks from about $10^{-6}$ to about $2\times10^{-8}$. With SGD, whose
# step is proportional to the gradient, the early layers' steps shrink with it. (Adam mostly
# undoes a global factor, but not for gradients as tiny as layer 1's: see the
# [optional part](#Going-further-·-深入（选读）).) Per-tensor clipping (`norm`)
# flattens only the layers above the threshold:

# %%
lab.set(clip_mode="norm")
r = lab.report
print("layer 1 after clip_by_norm:", f"{r.clipped_weight_norms[0]:.3g}", "· layers at the threshold:",
      int(np.sum(np.isclose(r.clipped_weight_norms, 0.1))))
lab.snapshot()

# %% [markdown]
# Clipping limits **exploding** updates. It cannot help vanishing ones, and it cannot
# repair NaN. Even for an exploding network it bounds the step, not the cause:

# %%
lab.set(depth=30, activation="tanh", initializer="large_normal", clip_mode="global_norm", clip_norm=1.0)
r = lab.report
print(f"gain {r.gain:.3g} → {gl.reports.verdict.status_word(r.status)}")
print("largest weight-gradient norm before / after clipping:",
      f"{r.weight_norms.max():.3g} / {r.clipped_weight_norms.max():.3g}")
lab.snapshot()

# %% [markdown]
# Still *exploding*: clipping does not change the network.
#
# #### Clipping in training: NaN without it, progress with it
#
# A ReLU network with He initialization and a learning rate that is too large, trained
# without clipping (the run stops when the loss is no longer finite) and with the global
# gradient norm clipped to 1:

# %%
def fresh_model():
    return gl.models.mlp.build_mlp(8, width=32, activation="relu", initializer="he_normal", input_dim=16, seed=0)


hist_plain = gl.train.steps.train_mlp(fresh_model(), xs, ys, optimizer=keras.optimizers.SGD(0.2), steps=80)
hist_clip = gl.train.steps.train_mlp(fresh_model(), xs, ys, optimizer=keras.optimizers.SGD(0.2), steps=80,
                         clip=("global_norm", 1.0))

# %%
losses = np.array(hist_clip.losses)
print("without clipping: stopped at step", hist_plain.stopped_at, "· gradient norms",
      [f"{v:.3g}" for v in hist_plain.global_norms])
print("with clipping   : loss", f"{losses[0]:.3f} → {losses[-1]:.3f}", "· largest gradient norm",
      f"{max(hist_clip.global_norms):.3g}")
print("                  smallest gradient norm", f"{min(hist_clip.global_norms):.3g}",
      "· the loss rose on", int(np.sum(np.diff(losses) > 0)), "of", len(losses) - 1, "steps")
gl.plots.plot_losses({"no clipping": hist_plain.losses, "global_norm ≤ 1": hist_clip.losses})

# %% [markdown]
# Without clipping, each large step makes the next gradient larger still, until the numbers
# overflow. With clipping every step has length at most $0.2 \times 1$: the run stays finite
# and the loss falls from 3.9 to 0.54, but zigzags (it rises on 29 of the 79 steps), because
# the gradient norm never drops to 1 and every step is clipped to the same length, however
# close the minimum is. Chapter 11 watches such runs step by step and layer by layer, in a
# live explorer: [11 · a ReLU network that diverges](11-watch-training.ipynb#A-ReLU-network-that-diverges-·-发散的-ReLU-网络).
#
# ### 2. Weight initialization · 权重初始化
#
# The source recommends He initialization for ReLU and Xavier (Glorot) otherwise. The
# variance argument above says why (the optional part checks the standard deviations Keras
# actually samples). The effect, for a depth-50 network with each activation and
# initializer:

# %%
inits = ["small_normal", "glorot_uniform", "he_normal", "lecun_normal", "orthogonal", "large_normal"]
print(f"{'':10s}" + "".join(f"{i:>15s}" for i in inits))
for act in ["sigmoid", "tanh", "relu", "selu"]:
    row = [f"{gl.reports.verdict.status_word(r.status)} {r.gain:.2f}" for r in (engine.report(50, act, init) for init in inits)]
    print(f"{act:10s}" + "".join(gl.i18n.pad(s, 15, ">") for s in row))

# %% [markdown]
# Each entry is the verdict and the gain per layer. The two `nan` gains are not failed
# computations. ReLU with `small_normal`: the signal is exactly 0 in every layer, so the
# ratio is $0/0$ (vanishing). ReLU with `large_normal`: the signal grows by about 2 per layer
# towards the input, passes float32's largest number ($3.4\times10^{38}$) and becomes inf,
# then NaN (non-finite):

# %%
for init in ("small_normal", "large_normal"):
    r = engine.report(50, "relu", init)
    print(f"relu + {init:12s}: {int(np.sum(r.signal_norms == 0)):2d} layers exactly 0, "
          f"{int(np.sum(~np.isfinite(r.signal_norms))):2d} not finite, largest finite signal "
          f"{np.max(r.signal_norms[np.isfinite(r.signal_norms)]):.3g} → gain {r.gain}, {gl.reports.verdict.status_word(r.status)}")

# %% [markdown]
# No initializer saves sigmoid at depth 50:
# its derivative is at most 0.25 (gains of 0.23 to 0.31; even the 8× too large weights of
# `large_normal` reach only 0.89). For ReLU the initializer decides everything: Glorot's,
# LeCun's and orthogonal's variance is half of what ReLU needs (a gain of about 0.7,
# vanishing), He's is right. tanh sits at the 0.95 threshold with every
# variance-$1/\text{fan\_in}$ initializer. SELU is healthy with LeCun, its design partner,
# and explodes with He's doubled variance. Too small vanishes everywhere; too large explodes
# or overflows, except with sigmoid, whose saturated units nearly cancel the large weights.
#
# ### 3. Activation choice · 激活函数选择
#
# The source says to prefer ReLU and Leaky ReLU *"because their derivative is not zero"*
# (因其导数不为零). For Leaky ReLU that is true. For ReLU it is not: its derivative is
# exactly **0 for every negative input**. Measured with a tape:

# %%
zs = tf.constant([-2.0, -0.5, 0.0, 0.5, 2.0])
for name, act in [("relu", tf.nn.relu), ("LeakyReLU(negative_slope=0.1)", keras.layers.LeakyReLU(negative_slope=0.1))]:
    with tf.GradientTape() as tape:
        tape.watch(zs)
        out = act(zs)
    print(f"{name:30s} f'(z) at {zs.numpy()} = {tape.gradient(out, zs).numpy()}")

# %% [markdown]
# (TensorFlow also uses 0 at exactly $z = 0$.) What ReLU avoids is *saturation*: for positive
# inputs its derivative is 1. A unit whose input is negative for every example passes no
# gradient at all, a "dead" unit. Leaky ReLU keeps a small slope there, `negative_slope` (its default
# differs between the layer, 0.3, and the `"leaky_relu"` activation string, 0.2).

# %% [markdown]
# Dead units are easy to make. Shift every pre-activation down with a bias of -1.5, then
# count the units of the last hidden layer that are positive for at least one example
# (only those pass a ReLU gradient), and measure the signal that reaches layer 1:

# %%
def shifted_network(activation):
    m = gl.models.mlp.build_mlp(10, activation=activation, initializer="he_normal")
    for layer in m.layers[:-1]:
        layer.bias.assign(tf.fill(layer.bias.shape, -1.5))   # push units into the negative side
    return m


for act in ["relu", "leaky_relu"]:
    m = shifted_network(act)
    h = x
    for layer in m.layers[:-1]:
        h = layer(h)
    alive = int(np.sum(np.any(h.numpy() > 0, axis=0)))
    r = gl.gradient_report(m, x, y)
    print(f"{act:10s} last-layer units ever positive: {alive}/64   signal at layer 1: {r.signal_norms[0]:.3g}")

# %% [markdown]
# With ReLU no unit of the last hidden layer is ever positive: the signal at layer 1 is
# exactly 0, and training can never revive these units. Leaky ReLU's slope of 0.2 still
# passes a (small) gradient.
#
# ReLU is not a cure on its own either: with the wrong initializer it vanishes (the table
# above), and at depth 100 even with He initialization the signal drifts (experiment 3),
# because at width 64 the per-layer factors scatter around 1 and compound. Residual
# connections and normalization ([chapter 05](05-beyond-the-source.ipynb)) are the next step.

# %% [markdown]
# ## Summary
#
# - Back-propagation multiplies one factor per layer, about
#   $\sqrt{\text{fan\_out}\,\operatorname{Var}(W)\,\mathbb{E}[f'(z)^2]}$. A factor a little off 1,
#   raised to the depth, vanishes or explodes.
# - Measure the **signal** $\partial\mathcal{L}/\partial z_l$ of every layer with a tape that
#   watches the pre-activations, and take norms in float64: a float32 norm reports tiny
#   gradients as 0. The gradient tensor itself underflows to exactly 0 only much deeper (from
#   depth 57 for sigmoid with Glorot), because TensorFlow flushes subnormal numbers.
# - `gl.diagnose` flags a total ratio beyond $10^{\pm3}$, or a per-layer gain below 0.95
#   (above 1/0.95) once the total change passes 10×. Weight gradients can look flat while
#   the signal vanishes.
# - `assert_all_finite` and `check_numerics` catch NaN/inf, not large finite gradients;
#   `enable_check_numerics` finds the first op that produced them. Clipping cannot repair NaN.
# - `clip_by_value` changes the direction, `clip_by_norm` clips tensors one by one,
#   `clip_by_global_norm` keeps the update's direction. In Keras: `clipvalue`, `clipnorm`,
#   `global_clipnorm`, only one at a time. Clipping bounds exploding steps. A global rescale
#   keeps every layer-to-layer ratio, so it never cures vanishing; with SGD it shortens the
#   already tiny early-layer steps too.
# - Match the initializer to the activation: He for ReLU-like, Glorot for tanh/sigmoid,
#   LeCun for SELU. Glorot's variance is a compromise between the forward (fan_in) and
#   backward (fan_out) conditions. ReLU's derivative **is** zero for negative inputs; Leaky
#   ReLU's is not.
#
# **Next:** the [exercises](#Exercises) right below (they need only the core path), then, if
# you want more, the [optional part](#Going-further-·-深入（选读）) after them.

# %% [markdown]
# ## Exercises
#
# Each exercise has a cell to fill in and one check that says what is still wrong. As
# shipped, the cells hold placeholders, so the checks show ❌ with their feedback; the
# worked answers are in [Solutions](#Solutions) at the end of the chapter, after the optional
# part, collapsed.
#
# **1. When does ReLU with Glorot start to vanish?** The verdict table above called ReLU with
# `glorot_uniform` healthy at depth 3, and the initialization table of section 2 found it
# vanishing at depth 50. Find the **smallest** depth at which `gl.diagnose` calls it vanishing (use the
# explorer's depth slider, or `engine.report(depth, "relu", "glorot_uniform")`). Before you
# run the check, decide which of the two rules fires there; the check's ✅ message tells you.

# %%
first_vanishing_depth = None  # your answer: an int
ch01.check_vanishing_depth(first_vanishing_depth)

# %% [markdown]
# **2. Global-norm clipping by hand.** Write `my_clip_by_global_norm(grads, t)` without
# calling `tf.clip_by_global_norm`: compute the global norm $\sqrt{\sum_i \lVert g_i\rVert^2}$
# over all tensors and, if it exceeds `t`, multiply every gradient by `t / global_norm`;
# otherwise return the gradients unchanged. Return a list with one tensor per gradient. The
# check calls it on `ch01.CLIP_TEST_GRADS` (global norm 5.83) with a threshold below the
# global norm (2) and one above it (10), then on two gradient sets it does not show you, so
# compute the norm from the gradients you are given.

# %%
def my_clip_by_global_norm(grads, t):
    return None  # your code here


ch01.check_clip_by_global_norm(my_clip_by_global_norm)

# %% [markdown]
# **3. Where does the gradient underflow?** In the depth-100 sigmoid network with Glorot
# initialization, the first layers receive a signal that is exactly 0. Find the number of the
# **last** such layer, counting from 1 on the input side.

# %%
sig100 = engine.report(100, "sigmoid", "glorot_uniform").signal_norms
last_zero_layer = None  # your code here
ch01.check_last_zero_layer(last_zero_layer)

# %% [markdown]
# ## Going further · 深入（选读）
#
# This part is optional. The core path ended with the summary and the exercises above. These
# sections go deeper into points it only touched; skip them on a first read. The exercises'
# solutions follow at the end of the chapter, after this part.

# %% [markdown]
# ### One step of the chain rule by hand
#
# Layer 5's signal from layer 6's, $\delta_5 = (\delta_6 W_6^{\top}) \odot \sigma'(z_5)$, for
# the 6-layer sigmoid network of the core path, against the tape:

# %%
six = gl.models.mlp.build_mlp(6, activation="sigmoid", initializer="glorot_uniform")
zs6, signals6 = layer_signals(six, x, y)
s5 = tf.sigmoid(zs6[4])
by_hand = (signals6[5] @ tf.transpose(six.layers[5].kernel)) * s5 * (1 - s5)   # (δ6 W6ᵀ) ⊙ σ'(z5)
rel_err = float(tf.norm(by_hand - signals6[4]) / tf.norm(signals6[4]))
print("shape of δ5:", by_hand.shape, "· relative difference from the tape:",
      "< 1e-6" if rel_err < 1e-6 else f"{rel_err:.1e}")  # float32 rounding: digits differ between CPUs

# %% [markdown]
# ### Weight gradients can look fine while the signal vanishes
#
# Why does `gl.diagnose` judge the **signal** and not the weight gradients you feed the
# optimizer? Because $\partial\mathcal{L}/\partial W_l = h_{l-1}^{\top}\,\delta_l$: when the
# forward activations grow as the backward signal shrinks, the two effects cancel in the
# weight gradient. Glorot & Bengio (2010) observed this: weight gradients can stay roughly the
# same size across layers while the back-propagated gradients shrink. Here is such a case,
# ReLU with Glorot initialization at depth 50:

# %%
r = engine.report(50, "relu", "glorot_uniform")
print("weight-gradient ratio, layer 1 / layer 50:", f"{r.weight_norms[0] / r.weight_norms[-1]:.3g}")  # ~1: looks fine
print("signal ratio,          layer 1 / layer 50:", f"{r.ratio:.3g}")  # ~1e-8: vanishing
print("forward std, layer 1 / layer 50    :", f"{r.activation_stds[0] / r.activation_stds[-1]:.3g}")  # ~1e8
print("diagnosis:", gl.reports.verdict.status_word(r.status))
gl.plots.plot_report(r, title="relu + glorot_uniform, depth 50")

# %% [markdown]
# Going deeper, the forward activations shrink by about the same factor per layer as the
# backward signal grows, so their product, the weight gradient, stays about constant: the
# orange line is flat while the blue one falls by eight orders of magnitude. A rule based on
# weight gradients would call this network healthy. The signal flags it, and the forward std
# shows the same sickness from the other side: by layer 50 the activations are about
# $10^{8}$ times smaller than at layer 1, so the output hardly depends on the input.

# %% [markdown]
# ### A softmax by hand, and `check_numerics`
#
# A softmax written by hand is a classic source:

# %% tags=["raises-exception"]
logits = tf.constant([1.0, 1000.0])
probs = tf.exp(logits) / tf.reduce_sum(tf.exp(logits))  # exp(1000) = inf, and inf / inf = NaN
tf.debugging.check_numerics(probs, "softmax by hand")

# %% [markdown]
# ### A NaN-free norm
#
# `tf.norm` has the NaN gradient of the core path's hand-written norm at 0, and a small `eps`
# under the square root is the usual fix:

# %%
w = tf.Variable([0.0, 0.0])
with tf.GradientTape(persistent=True) as tape:
    plain = tf.norm(w)
    safe = tf.sqrt(tf.reduce_sum(w**2) + 1e-12)
print("gradient of tf.norm at 0           :", tape.gradient(plain, w).numpy())  # [nan nan]
print("gradient of sqrt(sum w² + eps) at 0:", tape.gradient(safe, w).numpy())  # [0. 0.]
del tape

# %% [markdown]
# ### Per-tensor against global-norm clipping
#
# `clip_by_global_norm` rescales all tensors by one factor; `clip_by_norm` clips each alone. On
# two tensors of norms 5 and 0.5:

# %%
pair = [tf.constant([3.0, 4.0]), tf.constant([0.3, 0.4])]
per_tensor = gl.clip_gradients(pair, ("norm", 1.0))
global_ = gl.clip_gradients(pair, ("global_norm", 1.0))
def fmt(tensors):
    return [[f"{v:.3g}" for v in t.numpy()] for t in tensors]


print("clip_by_norm       :", fmt(per_tensor))  # norms 5 and 0.5 become 1 and 0.5
print("clip_by_global_norm:", fmt(global_))     # both scaled by 1/5.02: ratio kept 10:1

# %% [markdown]
# ### Keras's clipping arguments
#
# Keras optimizers clip through arguments, one at a time: `clipvalue` (each element),
# `clipnorm` (each gradient tensor separately), `global_clipnorm` (all together). Applying
# the same two gradients with `SGD(learning_rate=1.0)` shows the step each one takes:

# %%
for kwargs in [dict(clipvalue=1.0), dict(clipnorm=1.0), dict(global_clipnorm=1.0)]:
    v1, v2 = tf.Variable([0.0, 0.0]), tf.Variable([0.0, 0.0])
    opt = keras.optimizers.SGD(learning_rate=1.0, **kwargs)
    opt.apply_gradients(zip(pair, [v1, v2]))
    print(f"{str(kwargs):26s} step 1: {str(np.round(-v1.numpy(), 3)):14s} step 2: {np.round(-v2.numpy(), 3)}")

# %% [markdown]
# ### Only one clipping argument at a time
#
# Keras optimizers take one of `clipvalue`, `clipnorm` and `global_clipnorm`. Only one of the three may be set; asking for two is an error:

# %% tags=["raises-exception"]
keras.optimizers.SGD(clipnorm=1.0, global_clipnorm=1.0)

# %% [markdown]
# ### What the Keras initializers sample
#
# The standard deviations the Keras initializers actually sample for a $64 \times 64$ kernel, against their formulas:

# %%
fan_in = fan_out = 64
formulas = {
    "glorot_uniform": np.sqrt(2 / (fan_in + fan_out)),
    "glorot_normal": np.sqrt(2 / (fan_in + fan_out)),
    "he_normal": np.sqrt(2 / fan_in),
    "he_uniform": np.sqrt(2 / fan_in),
    "lecun_normal": np.sqrt(1 / fan_in),
    "orthogonal": np.sqrt(1 / fan_in),
}
for name, expected in formulas.items():
    kernel = gl.models.mlp.make_initializer(name, seed=0)((fan_in, fan_out))
    print(f"{name:15s} sampled std {float(tf.math.reduce_std(kernel)):.4f}   formula {expected:.4f}")

# %% [markdown]
# The `_normal` variants draw from a **truncated normal**: a normal distribution whose values
# beyond two standard deviations are drawn again, so no weight is extreme; Keras widens it so
# the std still matches the formula.

# %% [markdown]
# ### Leaky ReLU's default slope
#
# Leaky ReLU's `negative_slope` default differs between the layer and the activation string:

# %%
print("keras.layers.LeakyReLU() negative_slope:", keras.layers.LeakyReLU().negative_slope)  # 0.3
print('"leaky_relu" activation at z = -1     :', f'{float(keras.activations.get("leaky_relu")(tf.constant(-1.0))):.3g}')  # -0.2

# %% [markdown]
# ### Subnormal numbers, and where TensorFlow flushes them
#
# The core path said that a float32 norm of the depth-50 signal reads 0 and that the tensor
# itself becomes exactly 0 only much deeper. Why? The smallest *normal* float32 is $2^{-126} \approx
# 1.18\times10^{-38}$. Below it lie the **subnormal** numbers (down to about $1.4\times10^{-45}$,
# with fewer and fewer significant bits), and TensorFlow's CPU kernels **flush** subnormal
# results to 0 for speed. NumPy keeps them:

# %%
print("smallest normal float32:", np.finfo(np.float32).tiny)
print("NumPy     : 1e-20 * 1e-19 =", np.float32(1e-20) * np.float32(1e-19))  # subnormal, about 1e-39
print("TensorFlow: 1e-20 * 1e-19 =", (tf.constant(1e-20) * tf.constant(1e-19)).numpy())  # flushed to 0


@tf.function
def times(a, b):
    return a * b


print("TensorFlow in a tf.function:", times(tf.constant(1e-20), tf.constant(1e-19)).numpy())  # 0 too

# %% [markdown]
# In the depth-50 network of the core path, 99.8% of the 8192 layer-1 elements are non-zero (how many of the few smallest round to 0 depends on the CPU's summation order), the largest about $4\times10^{-34}$: normal
# float32 numbers. Their squares, below $2\times10^{-67}$, are not, so the float32 norm sums zeros. A float32 norm
# misreports every layer whose elements are all below about $10^{-19}$, and underestimates
# those near that boundary:

# %%
f32 = np.array([float(tf.norm(s)) for s in deep_signals])
f64 = np.array([float(tf.norm(tf.cast(s, tf.float64))) for s in deep_signals])
zero_tensors = sum(int(tf.math.count_nonzero(s)) == 0 for s in deep_signals)
print("layers whose float32 norm is 0:", int(np.sum(f32 == 0)), "of 50")
print("layers whose gradient tensor is all zeros:", zero_tensors)  # none
k = int(np.argmax(f32 > 0))   # the first layer with a non-zero float32 norm
print(f"layer {k + 1}: float32 norm {f32[k]:.3g}, float64 norm {f64[k]:.3g}")

# %% [markdown]
# **Where real underflow begins.** A product of factors of at most 0.25 stays a normal
# float32 number up to $0.25^{63} = 2^{-126}$, exactly the smallest normal; one more factor
# gives a subnormal, and TensorFlow flushes it:

# %%
quarter = tf.constant(0.25, dtype=tf.float32)
for depth in (62, 63, 64, 65):
    print(f"float32 0.25 ** {depth} =", (quarter**depth).numpy())  # 64 and 65 give 0.0

# %% [markdown]
# In the network the factors are smaller than 0.25 (about 0.23) and the signal is spread over
# 8192 elements, so the gradient tensor becomes exactly zero a little earlier than
# $0.25^{64}$ suggests: from depth 57 on (the sweep in the core path).

# %% [markdown]
# ### Three extreme settings
#
# Three extremes at depth 60, measured with the explorer's engine:

# %%
for act, init, what in [("linear", "orthogonal", "an orthogonal matrix keeps every vector's length"),
                        ("relu", "zeros", "all-zero weights: z = 0, and relu'(0) = 0 in TensorFlow"),
                        ("linear", "large_normal", "a factor of about 8 per layer: 8**60 overflows")]:
    r = engine.report(60, act, init)
    print(f"{act:6s} + {init:12s} gain {r.gain:<5.4g} layer-1 signal {r.signal_norms[0]:<6.3g} → {gl.i18n.pad(gl.reports.verdict.status_word(r.status), 10)} ({what})")

# %% [markdown]
# `linear` with `orthogonal` preserves the signal exactly (gain 1): a linear network
# with orthogonal weights is a rotation (or a reflection). `relu` with `zeros` passes nothing
# back at all: every zero $W^{\top}$ stops the signal below it, and because $z = 0$ everywhere
# and TensorFlow takes relu'(0) = 0, even the last hidden layer's signal is 0. And
# `linear` with large weights overflows float32 (largest value about $3.4\times10^{38}$) to inf
# and NaN. Another pairing to try: `selu` with `lecun_normal`. SELU (scaled exponential linear
# unit) is an activation designed so that, with LeCun's initialization (variance
# $1/\text{fan\_in}$), the activations keep mean 0 and variance 1 from layer to layer.

# %% [markdown]
# ### The variance argument when layers are not square
#
# The core path's variance argument: a linear layer keeps the forward pass steady with
# $\operatorname{Var}(W) = 1/\text{fan\_in}$ and the backward pass with $1/\text{fan\_out}$;
# Glorot's variance is a compromise, He et al. take $2/\text{fan\_in}$ for ReLU, because ReLU zeroes half the units, so $\mathbb{E}[f'(z)^2] =
# 1/2$ (`he_normal` uses fan_in; `VarianceScaling(2.0, mode="fan_out")` is the backward
# version). Measured on one linear layer, square and not:

# %%
variants = {"glorot_uniform": keras.initializers.GlorotUniform(seed=0),
            "He, fan_in": keras.initializers.HeNormal(seed=0),
            "He, fan_out": keras.initializers.VarianceScaling(2.0, mode="fan_out", seed=0)}
for fan_in, fan_out in [(64, 64), (256, 64)]:
    xin = tf.random.stateless_normal([1024, fan_in], seed=[1, 2])   # forward input
    gout = tf.random.stateless_normal([1024, fan_out], seed=[3, 4])  # backward signal
    for name, init in variants.items():
        W = init((fan_in, fan_out))
        fwd = float(tf.math.reduce_std(xin @ W))                      # input std is 1
        bwd = float(tf.math.reduce_std(gout @ tf.transpose(W)))
        print(f"{fan_in:3d}→{fan_out:<3d} {gl.i18n.pad(name, 17)} forward ×{fwd:.2f}   backward ×{bwd:.2f}")

# %% [markdown]
# For the square layer Glorot keeps both at 1 and He gives $\sqrt2 \approx 1.41$ both ways
# (which ReLU's halving brings back to 1). For the 256→64 layer Glorot gives 1.27 forward and
# 0.64 backward: neither is 1. He et al. point out that either choice works in a deep stack:
# the forward and backward factors of a layer differ by $\sqrt{\text{fan\_in}/\text{fan\_out}}$,
# and over a stack these ratios multiply to $\sqrt{\text{first width}/\text{last width}}$, a
# constant that does not grow with depth. Check it on 20 ReLU layers whose widths alternate
# between 256 and 64, so that every layer is far from square:

# %%
widths = [256, 64] * 10
for mode in ("fan_in", "fan_out"):
    stack = keras.Sequential([keras.Input((64,))] + [
        keras.layers.Dense(w, activation="relu",
                           kernel_initializer=keras.initializers.VarianceScaling(2.0, mode=mode, seed=i))
        for i, w in enumerate(widths)] + [keras.layers.Dense(1, kernel_initializer=gl.models.mlp.make_initializer("glorot_uniform", 99))])
    r = gl.gradient_report(stack, x, y)
    rms = r.signal_norms / np.sqrt(128 * np.array(widths))   # per element: comparable across widths
    print(f"He with {mode:7s}: forward std layer 20 / layer 1 {r.activation_stds[-1] / r.activation_stds[0]:.2f}"
          f"   backward signal layer 1 / layer 20 {rms[0] / rms[-1]:.2f}")

# %% [markdown]
# Each layer is off by a factor of 2 or 1/2 in one direction, but the factors alternate and
# cancel instead of compounding (ten factors of 2 in a row would be about 1000): with either
# choice, forward and backward stay within a factor of about 2.5 of 1 over 20 layers. (The
# drift that remains comes from the random weights.)

# %% [markdown]
# ### `enable_check_numerics` inside a `tf.function`
#
# Eagerly, the message names the op type, `Exp`. Inside a
# `tf.function` the same check names the *graph* op and adds the Python stack where the op
# was created, which is what points you to the line in a large model:

# %%
@tf.function
def softmax_by_hand(a):
    b = tf.exp(a)
    return b / tf.reduce_sum(b)


tf.debugging.enable_check_numerics()
try:
    softmax_by_hand(tf.constant([1.0, 1000.0]))
except tf.errors.InvalidArgumentError as err:
    lines = err.message.splitlines()
    print(next(line.strip() for line in lines if line.startswith("!!!")))
    print("includes the stack of the op's creation:", any("Stack trace of op's creation" in line for line in lines))
finally:
    tf.debugging.disable_check_numerics()

# %% [markdown]
# ### Adam, clipping and tiny gradients
#
# The source pairs clipping with Adam. Adam divides each gradient element by a
# running estimate of its own size (the square root of an average of its squares, the
# *second moment*). Rescaling every gradient by the same constant therefore barely changes
# Adam's step: its first step is about `learning_rate` times the sign of each element,
# whatever the scale. SGD's step is proportional to the gradient:

# %%
for name, make_opt in [("Adam", lambda: keras.optimizers.Adam()), ("SGD(0.1)", lambda: keras.optimizers.SGD(0.1))]:
    for scale in (1.0, 0.01):
        v = tf.Variable([0.0, 0.0])
        make_opt().apply_gradients([(scale * tf.constant([3.0, 0.5]), v)])
        print(f"{name:8s} gradient × {scale:<4}: first step {np.round(-v.numpy(), 4)}")

# %% [markdown]
# That does not make clipping useless with Adam. A **single** spike changes the second
# moment $v \leftarrow \beta_2 v + (1-\beta_2) g^2$ at once and for a long time: it forgets
# with a time constant of $1/(1-\beta_2)$ steps (1000 for Keras's default $\beta_2 = 0.999$).
# Until then every step is divided by an inflated $\sqrt{v}$. Feed Adam a gradient of 1 at
# every step but one, where it is 100, with and without `global_clipnorm=1.0`. We use
# $\beta_2 = 0.99$ (time constant 100 steps) so the run stays short:

# %%
def adam_step_sizes(grads, **clip):
    v, opt = tf.Variable(0.0), keras.optimizers.Adam(learning_rate=1e-3, beta_2=0.99, **clip)
    sizes = []
    for g in grads:
        before = float(v.numpy())
        opt.apply_gradients([(tf.constant(g), v)])
        sizes.append(abs(float(v.numpy()) - before))
    return np.array(sizes)


grads = np.ones(300, dtype=np.float32)
grads[50] = 100.0                                    # one spike at step 51
plain, with_clip = adam_step_sizes(grads), adam_step_sizes(grads, global_clipnorm=1.0)

# %%
for k in (49, 50, 51, 60, 100, 150, 200, 299):
    print(f"step {k + 1:3d}: Adam {plain[k]:.2e}   Adam + global_clipnorm=1 {with_clip[k]:.2e}")
gl.plots.plot_losses({"Adam": plain, "Adam + global_clipnorm=1": with_clip}, ylabel="step size |Δw|")

# %% [markdown]
# Without clipping the spike step itself is no longer than usual (the second moment grows
# with it), but the steps after it collapse: 50 steps later they are about 9 times shorter,
# once the first moment (time constant $1/(1-\beta_1) = 10$ steps) has forgotten the spike
# and the second has not. They recover
# only slowly, because the inflated second moment decays by a factor $e$ per
# $1/(1-\beta_2) = 100$ steps and a spike of $100^2$ takes several such time constants to fade:
# 250 steps later they are still at a third. With `global_clipnorm=1.0` the spike arrives as a gradient of 1 and
# nothing changes. This is why Adam is commonly paired with `global_clipnorm`.

# %% [markdown]
# Does Adam then undo global-norm clipping, as the first cell suggests? Keras's Adam folds
# its bias correction into the learning rate, $\alpha_t = \alpha\sqrt{1-\beta_2^t}/(1-\beta_1^t)$,
# and adds $\epsilon$ to the uncorrected $\sqrt{v}$; in terms of the corrected moments its
# step is $\alpha\,\hat m/(\sqrt{\hat v} + \hat\epsilon)$ with
# $\hat\epsilon = \epsilon/\sqrt{1-\beta_2^t}$: $3.2\times10^{-6}$ at step 1, $7.1\times10^{-7}$
# at step 20, and $\epsilon$ itself only after thousands of steps. For gradients well above
# $\hat\epsilon$ Adam nearly undoes a rescale; below it the step is about
# $\alpha\,\hat m/\hat\epsilon$, proportional to the gradient, as for SGD. One Adam step on one
# weight, as a fraction of the learning rate, against $g/(g + \hat\epsilon)$ (eagerly and in
# `tf.function`):

# %%
def adam_step_fraction(g, steps, function):
    w, opt = tf.Variable([0.0]), keras.optimizers.Adam(1e-3)

    def step():
        opt.apply_gradients([(tf.constant([g]), w)])

    step = tf.function(step) if function else step
    for _ in range(steps):
        before = float(w[0])
        step()
    return (before - float(w[0])) / 1e-3


for t in (1, 20):
    eps_hat = 1e-7 / np.sqrt(1 - 0.999 ** t)
    print(f"step {t:2d}: ε/√(1−β₂ᵗ) = {eps_hat:.2g}")
    for g in (1e-8, 1e-7, eps_hat, 1e-4):
        print(f"    g {g:7.2g}: step / lr {adam_step_fraction(g, t, False):.4f} eager, "
              f"{adam_step_fraction(g, t, True):.4f} tf.function" + (f", g/(g + ε̂) {g / (g + eps_hat):.4f}" if t == 1 else ""))

# %% [markdown]
# At step 1 the fraction is exactly $g/(g+\hat\epsilon)$: half a full step at $g = \hat\epsilon$,
# 0.3 % at $10^{-8}$. The core path's 10-layer sigmoid network has layer-1 gradient elements of
# about $10^{-8}$, far *below* $\hat\epsilon$ in the first steps, where Adam behaves like SGD.
# Twenty steps with and without `tf.clip_by_global_norm(grads, 0.1)`, and how far each
# layer's kernel moved with clipping, as a fraction of how far it moved without:

# %%
def kernel_moves(optimizer, clip, steps=20):
    net = gl.models.mlp.build_mlp(10, activation="sigmoid", initializer="glorot_uniform")
    start = [k.numpy().copy() for k in net.trainable_variables]

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(net(x) - y))
        grads = tape.gradient(loss, net.trainable_variables)
        if clip is not None:
            grads, _ = tf.clip_by_global_norm(grads, clip)
        optimizer.apply_gradients(zip(grads, net.trainable_variables, strict=True))

    for _ in range(steps):
        step()
    return np.array([np.linalg.norm((v.numpy() - s0).astype(np.float64))
                     for v, s0 in zip(net.trainable_variables[0::2], start[0::2], strict=True)])  # the kernels


for name, make in [("SGD(0.1)", lambda: keras.optimizers.SGD(0.1)),
                   ("Adam(1e-3), epsilon 1e-7", lambda: keras.optimizers.Adam(1e-3)),
                   ("Adam(1e-3), epsilon 1e-12", lambda: keras.optimizers.Adam(1e-3, epsilon=1e-12))]:
    ratio = kernel_moves(make(), 0.1) / kernel_moves(make(), None)
    print(f"{name:26s} layers 1, 2, 5, 10: moved {np.round(ratio[[0, 1, 4, 9]], 3)} as far with clipping")

# %% [markdown]
# With SGD every layer moves far less with clipping: layers 2 to 10 0.3 % to 1 % as far,
# layer 1 8 %. Adam with the default $\epsilon$ also moves layer 1 far less (0.11): its
# gradient sits below $\hat\epsilon$, while layer 10, whose gradient is large, moves 0.88 as far. With $\epsilon = 10^{-12}$ Adam moves every
# layer about as far with clipping as without (0.9 to 1.1; not exactly 1, because the clip
# factor changes from step to step). So a global rescale never changes which layers learn
# slowly; it shortens the steps of SGD-like optimizers, and Adam's for gradients below its
# $\hat\epsilon = \epsilon/\sqrt{1-\beta_2^t}$.

# %% [markdown]
# ### Two more entries of the initialization table
#
# ReLU with `small_normal` shows `nan` as its gain in the table: its signal is
# exactly 0 in every layer, so the ratio is $0/0$:

# %%
r = engine.report(50, "relu", "small_normal")
print("relu + small_normal: layers whose signal is exactly 0:", int(np.sum(r.signal_norms == 0)), "of 50")

# %% [markdown]
# The variance formula agrees:

# %%
r = engine.report(50, "sigmoid", "large_normal")
print("sigmoid + large_normal, predicted / measured gain per layer:",
      " / ".join(f"{v:.3f}" for v in gl.engines.mlp.predicted_gain(r, engine, "sigmoid", "large_normal")))

# %% [markdown]
# sigmoid with large weights loses about 11 % per layer, far less than with Glorot (a gain of
# 0.23), yet still vanishing. And a gain near 1 describes the gradient *flow* only: with most
# units saturated, such a network still trains badly. The verdict is a diagnosis, not a guarantee.

# %% [markdown]
# ## Solutions
#
# **1.** Try the depths in order and stop at the first vanishing one:

# %% tags=["solution"]
relu_glorot = {d: engine.report(d, "relu", "glorot_uniform") for d in range(2, 31)}
first_vanishing_depth = min(d for d, r in relu_glorot.items() if r.status == "vanishing")
r = relu_glorot[first_vanishing_depth]
print(f"depth {first_vanishing_depth}: gain {r.gain:.3f}, ratio {r.ratio:.3f}")
print("first depth with ratio < 1e-3:", min(d for d, r in relu_glorot.items() if r.ratio < 1e-3))
ch01.check_vanishing_depth(first_vanishing_depth)

# %% [markdown]
# The per-layer rule fires: the gain has been about 0.7 (below 0.95) from the start, and at
# this depth the total ratio first drops below 0.1. The total-ratio rule alone would wait
# until the ratio falls below $10^{-3}$, more than twice as deep.
#
# **2.** `tf.maximum(global_norm, t)` makes the scale exactly 1 when the norm is below the
# threshold:

# %% tags=["solution"]
def my_clip_by_global_norm(grads, t):
    global_norm = tf.sqrt(tf.add_n([tf.reduce_sum(tf.square(g)) for g in grads]))
    scale = t / tf.maximum(global_norm, t)
    return [g * scale for g in grads]


ch01.check_clip_by_global_norm(my_clip_by_global_norm)

# %% [markdown]
# Common mistakes get specific feedback: clipping each tensor on its own, calling
# `tf.clip_by_global_norm` itself, returning the `(list, norm)` pair as it does, and scaling
# below the threshold too:

# %% tags=["solution"]
print(ch01.check_clip_by_global_norm(lambda grads, t: [tf.clip_by_norm(g, t) for g in grads]))
print(ch01.check_clip_by_global_norm(lambda grads, t: tf.clip_by_global_norm(grads, t)))
print(ch01.check_clip_by_global_norm(
    lambda grads, t: (my_clip_by_global_norm(grads, t), tf.linalg.global_norm(grads))))
print(ch01.check_clip_by_global_norm(
    lambda grads, t: [g * t / tf.linalg.global_norm(grads) for g in grads]))

# %% [markdown]
# **3.** The largest index where the signal is exactly zero, plus one for 1-based counting:

# %% tags=["solution"]
last_zero_layer = int(np.nonzero(sig100 == 0)[0].max()) + 1
print("layers exactly 0:", int(np.sum(sig100 == 0)), "· the next signal:", f"{sig100[last_zero_layer]:.3g}")
ch01.check_last_zero_layer(last_zero_layer)
