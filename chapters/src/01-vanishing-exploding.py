# %% [markdown]
# # Vanishing and exploding gradients · 梯度消失与梯度爆炸的检测与处理

# %% [markdown]
# **What you will learn**
#
# - why back-propagation multiplies one factor per layer, and why that product shrinks or
#   grows exponentially with depth;
# - to *see* it: the live **GradientExplorer** re-plots every layer's gradient as you move
#   sliders for depth, activation, initializer and clipping;
# - to *detect* it: `assert_all_finite`, `check_numerics`, `enable_check_numerics`, and
#   per-layer monitoring during training, and what each one can and cannot catch;
# - to *handle* it: the three clipping functions and the three Keras optimizer options,
#   He/Glorot/LeCun/orthogonal initialization, and the choice of activation, each with a
#   cell that measures what it really does.

# %% [markdown]
# ## Setup

# %%
import gradlab as gl
import keras
import numpy as np
import tensorflow as tf

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
# Both follow from the chain rule. Write a hidden layer as $z_l = h_{l-1} W_l + b_l$,
# $h_l = f(z_l)$. The gradient of the loss with respect to the pre-activation $z_l$, which
# we call the layer's **signal**, is passed backwards one layer at a time:
#
# $$\frac{\partial L}{\partial z_{l}} = \Big(\frac{\partial L}{\partial z_{l+1}} W_{l+1}^{\top}\Big) \odot f'(z_l).$$
#
# Each step multiplies by a weight matrix and by the activation's derivative. After $L$
# layers the signal at layer 1 is a product of $L-1$ such factors. If a typical factor is
# below 1, the product vanishes exponentially; above 1, it explodes. The weight gradient is
# $\partial L / \partial W_l = h_{l-1}^{\top}\,\partial L/\partial z_l$: forward activation times
# backward signal.
#
# `gl.gradient_report` measures exactly these quantities for any stack of `Dense` layers.
# Its verdict comes from `gl.diagnose(signal_norms)`: if the signal at layer 1 is less than
# $10^{-3}$ times the signal at the last layer it says *vanishing*, more than $10^{3}$ times
# *exploding*, NaN or inf anywhere *non-finite*, otherwise *healthy*. Build a 6-layer sigmoid
# network and a batch of synthetic data:

# %%
model = gl.build_mlp(6, activation="sigmoid", initializer="glorot_uniform")
x, y = gl.make_data(batch_size=128, input_dim=64, seed=0)
report = gl.gradient_report(model, x, y)
print(report)

# %% [markdown]
# The signal shrinks towards the input side. The per-layer factors
# $\lVert\partial L/\partial z_l\rVert / \lVert\partial L/\partial z_{l+1}\rVert$ multiply
# to the ratio between the first and the last layer:

# %%
factors = report.signal_norms[:-1] / report.signal_norms[1:]
print("per-layer factors:", np.round(factors, 3))
print("their product    :", f"{np.prod(factors):.4g}")
print("signal ratio     :", f"{report.ratio:.4g}")  # the same number

# %% [markdown]
# ### The activation's derivative
#
# Part of each factor is $f'(z)$. Here are four activations and their derivatives; the
# derivatives are not typed in by hand, they come from `tf.GradientTape`:

# %%
z, curves = gl.activation_curves(["sigmoid", "tanh", "relu", "leaky_relu"])
for name, (f, df) in curves.items():
    print(f"{name:10s} max f'(z) = {df.max():.3f}   f'(-3) = {df[np.argmin(abs(z + 3))]:.3f}")
gl.plot_activations(z, curves)

# %% [markdown]
# Sigmoid's derivative $\sigma(z)(1-\sigma(z))$ is **at most 0.25**, at $z = 0$, and much
# smaller once $|z|$ grows (saturation). With well-scaled weights (Glorot, next) the weight
# part of each factor is about 1, so each sigmoid layer shrinks the signal by about a
# factor 4 or more. Compounded over depth:

# %%
for depth in (5, 10, 20, 50):
    print(f"0.25 ** {depth:2d} = {0.25**depth:.3g}")

# %% [markdown]
# In `float32`, the dtype networks use, such a product does not even stay positive. The
# smallest normal `float32` number is about $1.18\times10^{-38}$, and TensorFlow's CPU
# kernels *flush* smaller (subnormal) results to zero, so below that the signal
# **underflows to exactly zero**. Then no amount of training can move the early layers.

# %%
print("smallest normal float32:", np.finfo(np.float32).tiny)
quarter = tf.constant(0.25, dtype=tf.float32)
for depth in (60, 70, 80):
    print(f"float32 0.25 ** {depth} =", (quarter**depth).numpy())  # 70 and 80 give 0.0

# %% [markdown]
# NumPy keeps subnormal numbers, TensorFlow's CPU kernels do not:

# %%
print("NumPy     : 1e-20 * 1e-19 =", np.float32(1e-20) * np.float32(1e-19))  # subnormal 1e-39
print("TensorFlow: 1e-20 * 1e-19 =", (tf.constant(1e-20) * tf.constant(1e-19)).numpy())  # flushed to 0

# %% [markdown]
# ## See it: the GradientExplorer · 交互探索
#
# The explorer builds the same network as `gl.build_mlp` (width 64, batch 128) and plots,
# for every hidden layer, input side on the left:
#
# - **blue**: the back-propagated signal $\lVert\partial L/\partial z_l\rVert$, the thing that
#   vanishes or explodes;
# - **orange**: the weight-gradient norm $\lVert\partial L/\partial W_l\rVert$, what the
#   optimizer actually uses;
# - **green**: the weight gradient after clipping, when clipping is on;
# - **grey dotted**: the standard deviation of each layer's output (the forward signal);
# - **shaded band**: where layer 1's signal must lie to be called healthy (between $10^{-3}$
#   and $10^{3}$ times the last layer's);
# - **red triangles** on the bottom edge: layers whose signal underflowed to exactly 0.
#
# Move the sliders. Each move recomputes the forward and backward pass and redraws.

# %%
ex = gl.GradientExplorer(depth=20, activation="sigmoid", initializer="glorot_uniform")
ex

# %% [markdown]
# ### Experiment 1: make it vanish
#
# Drag `depth` to 50 with sigmoid. The same can be done from code: every control is a
# public attribute, and `ex.report` is updated before the assignment returns.

# %%
ex.depth.value = 50
print(ex.status_text)
print("layer 1..5 signal:", ex.report.signal_norms[:5])  # exact zeros: underflow

# %% [markdown]
# ### Experiment 2: make it explode
#
# Weights that are too large make every factor bigger than one. Pick `large normal (σ=1)`
# with `tanh`: $\sigma\sqrt{64} = 8$ times larger than Glorot's scale.

# %%
ex.set(depth=20, activation="tanh", initializer="large_normal")
print(ex.status_text)

# %% [markdown]
# ### Experiment 3: fix it
#
# ReLU passes a derivative of exactly 1 for positive inputs, and He initialization scales
# the weights so that each layer keeps the signal's size (shown below). Together they stay
# healthy even at depth 100:

# %%
ex.set(depth=100, activation="relu", initializer="he_normal")
print(ex.status_text)

# %% [markdown]
# Now try your own combinations in the explorer above. Good ones to look at: `selu` with
# `lecun_normal` (the pairing SELU was designed for), `linear` with `orthogonal` (the
# signal is preserved exactly), `relu` with `zeros` (nothing at all flows back), and
# `linear` with `large normal` at depth 60 (the numbers overflow to NaN).

# %% [markdown]
# ### Weight gradients can look fine while the signal vanishes
#
# Why does `gl.diagnose` judge the **signal** and not the weight gradients you feed the
# optimizer? Because $\partial L/\partial W_l = h_{l-1}^{\top}\,\partial L/\partial z_l$: when
# the forward activations grow as the backward signal shrinks, the two effects cancel in
# the weight gradient. Glorot & Bengio (2010) observed this: weight gradients can stay
# roughly the same size across layers while the back-propagated gradients shrink. Here is
# such a case, ReLU with Glorot initialization at depth 50:

# %%
engine = gl.MLPGradientEngine()
r = engine.report(50, "relu", "glorot_uniform")
print("weight-gradient ratio, layer 1 / layer 50:", f"{r.weight_norms[0] / r.weight_norms[-1]:.3g}")  # ~1: looks fine
print("signal ratio,          layer 1 / layer 50:", f"{r.ratio:.3g}")  # ~1e-8: vanishing
print("forward std, layer 1 / layer 50    :", f"{r.activation_stds[0] / r.activation_stds[-1]:.3g}")  # ~1e8
print("diagnosis:", r.status)
gl.plot_report(r, title="relu + glorot_uniform, depth 50")

# %% [markdown]
# Going deeper, the forward activations shrink by about the same factor per layer as the
# backward signal grows, so their product, the weight gradient, stays about constant: the
# orange line is flat while the blue one falls by eight orders of magnitude. A rule based on
# weight gradients would call this network healthy. The signal ratio flags it, and the
# forward std shows the same sickness from the other side: by layer 50 the activations are
# about $10^{8}$ times smaller than at layer 1, so the output hardly depends on the input.

# %% [markdown]
# ### Theory against measurement: the variance argument
#
# Going back through one layer multiplies the signal's size by about
#
# $$g = \sqrt{\text{fan\_out}\cdot \operatorname{Var}(W)\cdot \mathbb{E}[f'(z)^2]}.$$
#
# Glorot chose $\operatorname{Var}(W) = 2/(\text{fan\_in}+\text{fan\_out})$ so that $g = 1$
# for a linear unit; He chose $2/\text{fan\_in}$ because ReLU zeroes half the units, so
# $\mathbb{E}[f'(z)^2] = 1/2$. `gl.predicted_gain` evaluates the formula with the sampled
# weights and the measured $\mathbb{E}[f'(z)^2]$, and compares with the measured per-layer
# gain (the geometric mean of the factors):

# %%
print(f"{'activation':10s} {'initializer':15s} {'predicted':>9s} {'measured':>9s}  status at depth 30")
for act, init in [("sigmoid", "glorot_uniform"), ("tanh", "glorot_uniform"), ("relu", "glorot_uniform"),
                  ("relu", "he_normal"), ("selu", "lecun_normal"), ("linear", "orthogonal"),
                  ("tanh", "large_normal")]:
    r = engine.report(30, act, init)
    predicted, measured = gl.predicted_gain(r, engine, act, init)
    print(f"{act:10s} {init:15s} {predicted:9.3f} {measured:9.3f}  {r.status}")

# %% [markdown]
# The formula predicts the measured gain to within a few percent: vanishing and exploding
# are not mysterious, they are $g^{L}$ with $g$ a little off 1. Note tanh with large weights:
# the formula says about 2 per layer even though tanh saturates, because the few units near
# zero still pass a derivative near 1 while the weights are 8 times too large.

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
#    looks for NaN and inf. A gradient of $10^{30}$ is finite and passes:

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
# The error names the op that raised it, `CheckNumerics`: `assert_all_finite` is a thin
# wrapper around `tf.debugging.check_numerics(t, message)`. Both take one tensor, return it
# unchanged (so the check can sit inside an expression) and say whether it held NaN or inf.
# A softmax written by hand is a classic source:

# %% tags=["raises-exception"]
logits = tf.constant([1.0, 1000.0])
probs = tf.exp(logits) / tf.reduce_sum(tf.exp(logits))  # exp(1000) = inf, and inf / inf = NaN
tf.debugging.check_numerics(probs, "softmax by hand")

# %% [markdown]
# Both checks tell you *that* something went wrong, not *where*. In a large model the NaN
# appears far from its cause. `tf.debugging.enable_check_numerics()` instruments every op
# and raises at the **first** op whose output is not finite, naming it. The error message
# is long (it includes the stack where the op was created); here we print its first lines:

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
# The message names the op type `Exp`, and that one of its outputs was `+Inf`. Turn it off again
# afterwards: it slows every op down.
#
# ### Clipping does not cure NaN
#
# A common reflex is to clip gradients when the loss turns NaN. Clipping cannot help: the
# norm of a tensor with a NaN is NaN, so `clip_by_norm` and `clip_by_global_norm` turn
# *every* entry into NaN, and `clip_by_value` leaves the NaN in place:

# %%
g = tf.constant([np.nan, 1.0, 2.0])
print("clip_by_value      :", tf.clip_by_value(g, -1.0, 1.0).numpy())
print("clip_by_norm       :", tf.clip_by_norm(g, 1.0).numpy())
print("clip_by_global_norm:", [t.numpy() for t in tf.clip_by_global_norm([g, tf.ones(2)], 1.0)[0]])

# %% [markdown]
# Detect first, then fix the cause (the initialization, the learning rate, an unsafe op
# like the norm above, for which `tf.norm` has the same problem and `tf.sqrt(x + eps)` is
# the usual fix).
#
# ### Monitor every layer during training
#
# The most useful detector is the cheapest one: record each layer's gradient norm while
# training. `gl.train_mlp` does that for a stack of Dense layers. Train a 12-layer sigmoid
# network for 40 steps and look at all layers at once:

# %%
xs, ys = gl.make_data(batch_size=256, input_dim=16, seed=1)
ys = tf.reduce_sum(xs[:, :4], axis=1, keepdims=True)  # a target the network can learn
deep_sigmoid = gl.build_mlp(12, width=32, activation="sigmoid", input_dim=16, seed=0)
hist = gl.train_mlp(deep_sigmoid, xs, ys, optimizer=keras.optimizers.SGD(0.1), steps=40)

# %%
print("status at the first and last step:", hist.statuses[0], "→", hist.statuses[-1])
print("loss first → last:", f"{hist.losses[0]:.3f} → {hist.losses[-1]:.3f}",
      "· variance of the target:", f"{float(tf.math.reduce_variance(ys)):.3f}")
print("layer-1 signal / layer-12 signal at the last step:",
      f"{hist.signal_norms[-1][0] / hist.signal_norms[-1][-1]:.2g}")
gl.plot_signal_history(hist)

# %% [markdown]
# Each row is a layer, each column a step; colour is $\log_{10}$ of the signal. The bottom
# rows (input side) are orders of magnitude darker for the whole run: those layers barely
# learn. The loss stalls at about the variance of the target, which is what predicting a
# constant achieves: the network has learned almost nothing about the inputs. Print or log these numbers
# in your own training loop; chapter 03 builds a Keras callback that does it during `fit`.

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
print("norms before:", [f"{float(tf.norm(g)):.3g}" for g in gradients])
print("norms after :", [f"{float(tf.norm(g)):.3g}" for g in clipped_gradients])  # each ≤ 1

# %% [markdown]
# It runs, with two subtleties.
#
# First, the source pairs clipping with **Adam**. Adam divides each gradient element by a
# running estimate of its own size, so rescaling a gradient barely changes Adam's step: its
# first step is about `learning_rate` times the sign of each element, whatever the scale.
# Clipping matters most for optimizers whose step is proportional to the gradient, like SGD:

# %%
for name, make_opt in [("Adam", lambda: keras.optimizers.Adam()), ("SGD(0.1)", lambda: keras.optimizers.SGD(0.1))]:
    for scale in (1.0, 0.01):
        v = tf.Variable([0.0, 0.0])
        make_opt().apply_gradients([(scale * tf.constant([3.0, 0.5]), v)])
        print(f"{name:8s} gradient × {scale:<4}: first step {np.round(-v.numpy(), 4)}")

# %% [markdown]
# Second, `clip_by_norm` clips **each tensor separately**. The kernel's gradient was
# shrunk, the bias's was not, so the update no longer points along the gradient.
# TensorFlow has three functions; on a 2-D gradient the difference is visible:

# %%
g2d = tf.constant([3.0, 0.5])
threshold = 1.0
clipped = {mode: gl.clip_gradients([g2d], (mode, threshold))[0].numpy() for mode in gl.CLIP_MODES}
for mode, v in clipped.items():
    print(f"clip_by_{mode:12s} → {np.round(v, 3)}   norm {np.linalg.norm(v):.3f}")
gl.plot_clipping_2d(g2d.numpy(), clipped, threshold=threshold)

# %% [markdown]
# - `tf.clip_by_value(g, -t, t)` clips each **element** into $[-t, t]$: the direction changes
#   (here from mostly-horizontal towards the diagonal), the norm can still be $t\sqrt{n}$.
# - `tf.clip_by_norm(g, t)` rescales a tensor whose norm exceeds $t$: direction kept.
# - `tf.clip_by_global_norm(list, t)` rescales **all** tensors together by one factor: the
#   direction of the whole update is kept. For one tensor it equals `clip_by_norm`; for
#   several it differs:

# %%
pair = [tf.constant([3.0, 4.0]), tf.constant([0.3, 0.4])]
per_tensor = gl.clip_gradients(pair, ("norm", 1.0))
global_ = gl.clip_gradients(pair, ("global_norm", 1.0))
def fmt(tensors):
    return [[f"{v:.3g}" for v in t.numpy()] for t in tensors]


print("clip_by_norm       :", fmt(per_tensor))  # norms 5 and 0.5 become 1 and 0.5
print("clip_by_global_norm:", fmt(global_))     # both scaled by 1/5.02: ratio kept 10:1

# %% [markdown]
# Keras optimizers do the same through arguments: `clipvalue` (each element),
# `clipnorm` (each gradient tensor separately), `global_clipnorm` (all together). Applying
# the same two gradients with `SGD(learning_rate=1.0)` shows the step each one takes:

# %%
for kwargs in [dict(clipvalue=1.0), dict(clipnorm=1.0), dict(global_clipnorm=1.0)]:
    v1, v2 = tf.Variable([0.0, 0.0]), tf.Variable([0.0, 0.0])
    opt = keras.optimizers.SGD(learning_rate=1.0, **kwargs)
    opt.apply_gradients(zip(pair, [v1, v2]))
    print(f"{str(kwargs):26s} step 1: {np.round(-v1.numpy(), 3)}  step 2: {np.round(-v2.numpy(), 3)}")

# %% [markdown]
# Only one of the three may be set; asking for two is an error:

# %% tags=["raises-exception"]
keras.optimizers.SGD(clipnorm=1.0, global_clipnorm=1.0)

# %% [markdown]
# In the explorer, set `clip` to `global_norm` and move the threshold: the green line
# moves down in parallel with the orange one (one factor for all layers), while `norm`
# flattens only the layers above the threshold.
#
# Clipping limits **exploding** updates. It does nothing for vanishing ones (nothing is
# above the threshold), and, as shown above, nothing for NaN.

# %%
ex.set(depth=30, activation="tanh", initializer="large_normal", clip_mode="global_norm", clip_norm=1.0)
r = ex.report
print(ex.status_text)
print("largest weight-gradient norm before / after clipping:",
      f"{r.weight_norms.max():.3g} / {r.clipped_weight_norms.max():.3g}")

# %% [markdown]
# The status still says *exploding*: clipping bounds the **step**, it does not change the
# network, whose signal still grows by a factor of about 2 per layer.
#
# #### Clipping in training: NaN without it, steady progress with it
#
# A ReLU network with He initialization and a learning rate that is too large. The first
# run has no clipping; it stops when the loss is no longer finite:

# %%
def fresh_model():
    return gl.build_mlp(8, width=32, activation="relu", initializer="he_normal", input_dim=16, seed=0)


hist_plain = gl.train_mlp(fresh_model(), xs, ys, optimizer=keras.optimizers.SGD(0.2), steps=80)

# %% [markdown]
# The same model, data and learning rate, with the global gradient norm clipped to 1:

# %%
hist_clip = gl.train_mlp(fresh_model(), xs, ys, optimizer=keras.optimizers.SGD(0.2), steps=80,
                         clip=("global_norm", 1.0))

# %%
print("without clipping: stopped at step", hist_plain.stopped_at, "· gradient norms",
      [f"{v:.3g}" for v in hist_plain.global_norms])
print("with clipping   : final loss", f"{hist_clip.losses[-1]:.3f}", "· largest gradient norm",
      f"{max(hist_clip.global_norms):.3g}")
gl.plot_losses({"no clipping": hist_plain.losses, "global_norm ≤ 1": hist_clip.losses})

# %% [markdown]
# Without clipping, each large step makes the next gradient larger still, and within a
# few steps the numbers overflow. With clipping every step has length at most
# $0.2 \times 1$, and the loss falls steadily.
#
# ### 2. Weight initialization · 权重初始化
#
# The source recommends He initialization for ReLU and Xavier (Glorot) otherwise. The
# variance argument above says why; here are the standard deviations the Keras initializers
# actually sample for a $64 \times 64$ kernel, against their formulas:

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
    kernel = gl.make_initializer(name, seed=0)((fan_in, fan_out))
    print(f"{name:15s} sampled std {float(tf.math.reduce_std(kernel)):.4f}   formula {expected:.4f}")

# %% [markdown]
# (The normal variants are truncated normals, rescaled so their std still matches.) And
# the effect, for a depth-50 network with each activation and initializer:

# %%
inits = ["small_normal", "glorot_uniform", "he_normal", "lecun_normal", "orthogonal", "large_normal"]
print(f"{'':10s}" + "".join(f"{i:>15s}" for i in inits))
for act in ["sigmoid", "tanh", "relu", "selu"]:
    row = [engine.report(50, act, init).status for init in inits]
    print(f"{act:10s}" + "".join(f"{s:>15s}" for s in row))

# %% [markdown]
# No standard initializer (Glorot, He, LeCun, orthogonal) saves sigmoid at depth 50: its
# derivative caps each factor at 0.25. For ReLU the initializer decides everything: Glorot's variance is half of what ReLU needs,
# so the signal shrinks by about $1/\sqrt{2}$ per layer and vanishes; He's is just right.
# Too small (`small_normal`) vanishes for every activation. Too large (`large_normal`)
# explodes or overflows to NaN, with one exception: sigmoid comes out "healthy", because its
# saturated derivatives and the 8× weights happen to cancel. The variance formula agrees:
#
# %%
r = engine.report(50, "sigmoid", "large_normal")
print("sigmoid + large_normal, predicted / measured gain per layer:",
      " / ".join(f"{v:.3f}" for v in gl.predicted_gain(r, engine, "sigmoid", "large_normal")))

# %% [markdown]
# A gain near 1 describes the gradient *flow* only; with most units saturated, such a
# network still trains badly. The ratio is a diagnosis, not a guarantee.
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
# (TensorFlow also uses 0 as ReLU's derivative at exactly $z = 0$.) What ReLU does avoid is
# *saturation*: for positive inputs the derivative is 1, not a value that shrinks towards 0
# as for sigmoid. A unit whose input is negative for every example passes no gradient at
# all, a "dead" unit. Leaky ReLU keeps a small slope there (`negative_slope`; the layer's
# default is 0.3, the `"leaky_relu"` activation string's is 0.2).
#
# Dead units are easy to make. Shift every pre-activation down with a bias of -1.5, then
# count the units of the last hidden layer that are positive for at least one example
# (only those pass a ReLU gradient), and measure the signal that reaches layer 1:

# %%
def shifted_network(activation):
    m = gl.build_mlp(10, activation=activation, initializer="he_normal")
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
# With ReLU no unit of the last hidden layer is ever positive, so no gradient passes and the
# signal at layer 1 is exactly 0: training can never revive these units. Leaky ReLU's units
# are just as negative, yet its slope of 0.2 still passes a (small) gradient.
#
# ReLU is also not a cure on its own: with the wrong initializer it vanishes (the table
# above), and at great depth even with He initialization the signal drifts, because
# $\mathbb{E}[f'(z)^2]$ is $1/2$ only on average. Residual connections and normalization
# layers, beyond this workbook's source, are the next step.

# %% [markdown]
# ## Summary
#
# - Back-propagation multiplies one factor per layer, about
#   $\sqrt{\text{fan\_out}\,\operatorname{Var}(W)\,\mathbb{E}[f'(z)^2]}$. A factor a little off 1,
#   raised to the depth, vanishes or explodes; in float32 it can underflow to exactly 0.
# - Judge the **back-propagated signal**, layer by layer. Weight gradients can look flat
#   while the signal vanishes.
# - `assert_all_finite` and `check_numerics` catch NaN/inf, not large finite gradients;
#   `enable_check_numerics` finds the first op that produced them. Clipping cannot repair
#   NaN.
# - `clip_by_value` changes the direction, `clip_by_norm` clips tensors one by one,
#   `clip_by_global_norm` keeps the update's direction. In Keras: `clipvalue`, `clipnorm`,
#   `global_clipnorm`, only one at a time. Clipping bounds exploding steps and does nothing
#   for vanishing gradients.
# - Match the initializer to the activation: He for ReLU-like, Glorot for tanh/sigmoid,
#   LeCun for SELU. ReLU's derivative **is** zero for negative inputs; Leaky ReLU's is not.

# %% [markdown]
# ## Exercises
#
# Each exercise has a cell to fill in and a check that says what is still wrong. As
# shipped, the cells hold placeholders, so the checks show ❌ with their feedback; the
# worked answers are in [Solutions](#Solutions) at the end.
#
# **1. Healthy at depth 60.** Choose an activation and an initializer so that a depth-60
# network in the explorer is healthy. (Try it with the sliders first.)

# %%
my_choice = dict(activation="sigmoid", initializer="glorot_uniform")  # change these
print(gl.check_status("depth 60 with " + ", ".join(my_choice.values()),
                      engine.report(60, **my_choice).status, "healthy"))

# %% [markdown]
# **2. Global-norm clipping by hand.** Write `my_clip_by_global_norm(grads, t)` without
# calling `tf.clip_by_global_norm`: compute the global norm $\sqrt{\sum_i \lVert g_i\rVert^2}$
# and, if it exceeds `t`, multiply every gradient by `t / global_norm`; otherwise return the
# gradients unchanged. The check tries a threshold below the global norm and one above it.

# %%
def my_clip_by_global_norm(grads, t):
    return None  # your code here


test_grads = [tf.constant([3.0, 4.0]), tf.constant([[1.0, 2.0], [2.0, 0.0]])]  # global norm 5.83


def check_exercise_2(fn):
    for t in (2.0, 10.0):
        expected, _ = tf.clip_by_global_norm(test_grads, t)
        result = gl.check_arrays(f"my_clip_by_global_norm(t={t:g})", fn(test_grads, t), expected)
        if not result:
            return result
    return result


print(check_exercise_2(my_clip_by_global_norm))

# %% [markdown]
# **3. Where does it underflow?** For the sigmoid/Glorot network of depth 50, find the
# (1-based) index of the **last** layer, counting from the input side, whose signal is
# exactly zero.

# %%
sig50 = engine.report(50, "sigmoid", "glorot_uniform").signal_norms
last_zero_layer = None  # your code here


def check_exercise_3(answer):
    if isinstance(answer, bool) or not isinstance(answer, (int, np.integer)):
        return gl.check_true("last underflowed layer", False, f"expected a layer number (an int), got {answer!r}")
    return gl.check_true(
        "last underflowed layer",
        lambda: 1 <= answer < 50 and sig50[answer - 1] == 0 and sig50[answer] > 0,
        f"layer {answer} is not the last exact zero: look at np.nonzero(sig50 == 0)",
        f"layer {answer}",
    )


print(check_exercise_3(last_zero_layer))

# %% [markdown]
# ## Solutions
#
# **1.** Any activation with an initializer scaled for it: `relu` or `leaky_relu` with a He
# initializer, `selu` with `lecun_normal`, `tanh` with Glorot. For example:

# %% tags=["solution"]
my_choice = dict(activation="leaky_relu", initializer="he_uniform")
print(gl.check_status("depth 60 with " + ", ".join(my_choice.values()),
                      engine.report(60, **my_choice).status, "healthy"))

# %% [markdown]
# **2.** `tf.maximum(global_norm, t)` makes the scale exactly 1 when the norm is below the
# threshold:

# %% tags=["solution"]
def my_clip_by_global_norm(grads, t):
    global_norm = tf.sqrt(tf.add_n([tf.reduce_sum(tf.square(g)) for g in grads]))
    scale = t / tf.maximum(global_norm, t)
    return [g * scale for g in grads]


print(check_exercise_2(my_clip_by_global_norm))

# %% [markdown]
# A common mistake, clipping each tensor on its own, gets specific feedback:

# %% tags=["solution"]
print(check_exercise_2(lambda grads, t: [tf.clip_by_norm(g, t) for g in grads]))

# %% [markdown]
# **3.** The largest index where the signal is zero, plus one for 1-based counting:

# %% tags=["solution"]
last_zero_layer = int(np.nonzero(sig50 == 0)[0].max()) + 1
print(check_exercise_3(last_zero_layer))
