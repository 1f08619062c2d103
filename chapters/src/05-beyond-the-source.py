# %% [markdown]
# # Beyond the source: residual connections, normalization and mixed precision · 超越原文：残差连接、规范化与混合精度

# %% [markdown]
# **What you will learn**
#
# - why a skip connection keeps the per-layer gain of the gradient near 1, and why a deep
#   residual stack with He initialization still blows up without normalization;
# - what batch normalization and layer normalization do to the gradient, how batch norm differs
#   between training and inference, and how it depends on the batch size;
# - where float16 training loses gradients (real underflow, not a norm artifact), how loss
#   scaling in Keras 3 brings them back, and why bfloat16 needs no scaling;
# - how the mean-field variance recursion predicts the per-layer signal, and where it does not;
# - to reproduce published numbers (He, Glorot & Bengio, Saxe, Pennington, Klambauer,
#   He/Balduzzi, Micikevicius) in the explorer, each beside the paper's claim.
#
# The source text stops at clipping, initialization and the choice of activation. This chapter
# goes on to what keeps 100-layer networks trainable today. It uses the same network family as
# chapter 01: width 64, a batch of 128 standard normal inputs, a regression loss, and hidden
# layers $z = hW$, $a = f(\mathrm{norm}(z))$, with $h \leftarrow h + a$ when a layer is residual.

# %% [markdown]
# ## Setup

# %%
import gradlab as gl  # noqa: I001  (first: it imports TensorFlow quietly)
import keras
import numpy as np
import tensorflow as tf
from gradlab.engines import presets
from gradlab.exercises import ch05

gl.setup(seed=0)
np.set_printoptions(precision=3)
engine = gl.engines.mlp.MLPGradientEngine()  # one engine for every cell and the explorer: each mode traces once

# %% [markdown]
# ## Skip connections keep the gain near 1 · 残差连接
#
# In a plain stack the signal $\delta_l = \partial \mathcal{L}/\partial z_l$ of layer $l$ is the next
# layer's signal times one factor per layer: $\delta_l = (\delta_{l+1} W_{l+1}^\top) \odot f'(z_l)$.
# A product of $D$ factors below 1 (for a depth $D$) vanishes. A residual block computes
# $h_l = h_{l-1} + f(h_{l-1} W_l)$, so its Jacobian is $I + J_l$, where $J_l$ is the Jacobian of
# the branch $f(h_{l-1} W_l)$: the identity is *added* to each factor. Going back, the gradient
# of the loss $\mathcal{L}$ with respect to $h_l$ keeps an untouched copy of the one at $h_D$,
# plus corrections (He et al. 2016, *Identity mappings in deep residual networks*).
#
# First in plain TensorFlow: a 50-layer sigmoid stack with Glorot weights, the tape watching
# every pre-activation $z_l$, with and without the skip.

# %%
def signal_norms(residual: bool, depth: int = 50):
    """Per-layer ||dLoss/dz|| of a sigmoid stack, measured with one tape (float64 norms)."""
    x, y = engine.x, engine.y
    kernels = engine.kernels("glorot_uniform")[:depth]
    with tf.GradientTape() as tape:
        h, zs = x, []
        for w in kernels:
            z = h @ w
            tape.watch(z)
            zs.append(z)
            a = tf.sigmoid(z)
            h = h + a if residual else a
        loss = tf.reduce_mean(tf.square(h @ engine.out_kernel - y))
    return np.array([gl.true_norm(g) for g in tape.gradient(loss, zs)])


plain, skip = signal_norms(False), signal_norms(True)
print(f"plain   : layer 1 {plain[0]:.3g}, layer 50 {plain[-1]:.3g}, ratio {plain[0] / plain[-1]:.3g}")
print(f"residual: layer 1 {skip[0]:.3g}, layer 50 {skip[-1]:.3g}, ratio {skip[0] / skip[-1]:.3g}")

# %% [markdown]
# The same numbers from the explorer's engine, which packages this measurement (and `gl.models.mlp.build_mlp(...,
# residual=True)` builds the same network as a Keras model):

# %%
for residual in (False, True):
    r = engine.report(50, "sigmoid", "glorot_uniform", residual=residual)
    print(f"residual={residual!s:5}: {r.summary()}")

# %% [markdown]
# ## A residual stack with He initialization still explodes · 为什么还需要规范化
#
# The skip fixes the backward product, but the forward pass now *adds* every block's output to
# $h$. With ReLU and He initialization each branch has about the variance of its input, so the
# variance of $h$ at least doubles per block. After 100 blocks the activations' std is about
# $10^{22}$: their squares, and the loss, are beyond float32's maximum of $3.4\times10^{38}$.

# %%
blowup = engine.report(100, "relu", "he_normal", residual=True)
stds = blowup.activation_stds
print("forward std of h at layers 1, 10, 50, 100:", [f"{stds[i]:.3g}" for i in (0, 9, 49, 99)])
print(f"std² at layer 100: {stds[-1] ** 2:.3g}  (float32 max {float(np.finfo(np.float32).max):.3g})")
print(f"loss: {blowup.loss}; {gl.reports.verdict.status_word(blowup.status)}: "
      f"{int(np.sum(~np.isfinite(blowup.signal_norms)))} layers with a NaN/inf signal")
sig = blowup.signal_norms
bad = np.flatnonzero(~np.isfinite(sig)) + 1
print(f"signal ||dL/dz|| at layer 100: {sig[-1]:.3g}, at layer 18: {sig[17]:.3g}; non-finite layers {bad.min()}..{bad.max()}")

# %% [markdown]
# The loss is inf, but its gradient at the output, $2(\hat y - y)/N$, is finite: the signal
# starts near $10^{22}$ at layer 100. Going back, the residual signal grows further; at layer
# 17 its elements pass float32's maximum (the layer-18 norm, taken in float64 over 8192
# elements, is already above it while each element is not), and sums of $+\infty$ and $-\infty$ in the next
# matmuls make it NaN in every layer below.
#
# Three fixes. **Normalize** the pre-activation, so every branch starts from unit scale
# (below), or **scale the branch**: multiply its output by a small factor such as
# $1/\sqrt{D}$, or by a learnable factor that starts at zero, so that each block starts as
# the identity (SkipInit's scalar α; Fixup zero-initializes the last layer of each branch,
# and ResNets often zero-initialize the last BatchNorm γ of each block, to the same end). In
# plain TensorFlow, the forward std after 100 blocks:

# %%
def forward_std(branch_scale: float, depth: int = 100) -> float:
    h = engine.x
    for w in engine.kernels("he_normal")[:depth]:
        h = h + branch_scale * tf.nn.relu(h @ w)
    return float(tf.math.reduce_std(tf.cast(h, tf.float64)))


for scale, label in [(1.0, "1 (plain)"), (0.1, "1/sqrt(100)"), (0.0, "0 (zero-initialized)")]:
    print(f"branch scale {label:<22}: std of h after 100 blocks = {forward_std(scale):.3g}")

# %% [markdown]
# A fixed $1/\sqrt{D} = 0.1$ does not keep the spread near 1: 38.1 after 100 blocks. The
# variance argument for $1/\sqrt{D}$ assumes branches of mean 0: then each block multiplies
# the second moment of $h$ by about $1 + 0.1^2$, and 100 blocks give
# $1.01^{100} \approx e$, a spread of about $\sqrt{e} \approx 1.65$. A ReLU branch has a
# positive mean, $E[\mathrm{relu}(z)] = \sigma_z/\sqrt{2\pi}$. The skip carries that
# offset along, the next matmul turns it into a large offset of each feature (the same for
# every example), and the offsets grow block after block. Measured: the features' offsets
# against their spread over the batch, and the same stack with each branch centred (its batch
# mean subtracted):

# %%
def branch_stats(branch_scale: float, centred: bool, depth: int = 100):
    h = engine.x
    for w in engine.kernels("he_normal")[:depth]:
        a = tf.nn.relu(h @ w)
        if centred:
            a = a - tf.reduce_mean(a, axis=0, keepdims=True)  # a branch of mean 0
        h = h + branch_scale * a
    h = tf.cast(h, tf.float64)
    offsets = tf.reduce_mean(h, axis=0)  # each feature's mean over the batch
    return float(tf.sqrt(tf.reduce_mean(offsets**2))), float(tf.reduce_mean(tf.math.reduce_std(h, axis=0)))


for centred in (False, True):
    offset, spread = branch_stats(0.1, centred)
    print(f"scale 0.1, {'centred' if centred else 'ReLU   '} branch: rms feature offset {offset:.3g}, "
          f"mean spread over the batch {spread:.3g}")
print(f"zero-mean prediction for the spread: sqrt(1.01**100) = {np.sqrt(1.01**100):.3g}")

# %% [markdown]
# With mean-0 branches the spread stays near the prediction; with ReLU branches the offsets
# dominate. A branch scale that starts at exactly 0 avoids the question at initialization.
# A zero branch makes each block the identity at the start: the gradient reaches the input
# unchanged. A *fixed* factor 0 would also block every weight gradient, though, so the factor
# must be learnable (SkipInit's α, one per block): its gradient is not 0, and once α moves,
# the branch weights get gradients too.

# %%
alphas = tf.Variable(tf.zeros([100]))  # SkipInit: one learnable branch scale per block, at 0
kernels = engine.kernels("he_normal")[:100]
with tf.GradientTape() as tape:
    tape.watch([engine.x, kernels])
    h = engine.x
    for i in range(100):
        h = h + alphas[i] * tf.nn.relu(h @ kernels[i])
    h_out = tf.identity(h)  # the last block's output, h_100
    loss = tf.reduce_mean(tf.square(h_out @ engine.out_kernel - engine.y))
d_x, d_out, d_alpha, d_w = tape.gradient(loss, [engine.x, h_out, alphas, kernels])
print(f"max |dL/dx - dL/dh_100|: {float(tf.reduce_max(tf.abs(d_x - d_out))):.3g}")  # 0: unchanged
print(f"||dL/dalpha||: {gl.true_norm(d_alpha):.3g}, ||dL/dW||: {gl.true_norm(d_w):.3g}")  # W waits for α

# %% [markdown]
# With normalization instead:

# %%
for norm, label in (("layer", "layer norm"), ("batch", "batch norm")):
    r = engine.report(100, "relu", "he_normal", residual=True, norm=norm)
    print(f"residual + {label}: {r.summary()}")

# %% [markdown]
# ## Batch norm and layer norm · 批量规范化与层规范化
#
# Both subtract a mean and divide by a standard deviation, then apply a learned scale γ and
# shift β (γ = 1 and β = 0 as Keras initializes them). **Batch norm** takes the statistics of
# each feature over the *batch*; **layer norm** takes those of each example over its *features*.
# The gradient flows through the statistics too: the engine differentiates through them, as a
# training step does.
#
# Without a skip, the plain sigmoid stack of depth 50 that lost 31 orders of magnitude:

# %%
for norm in ("none", "batch", "layer"):
    r = engine.report(50, "sigmoid", "glorot_uniform", norm=norm)
    print(f"norm={norm:<5}: ratio {r.ratio:.3g}, gain {r.gain:.3g} per layer → {gl.reports.verdict.status_word(r.status)}")
s = engine.report(50, "sigmoid", "glorot_uniform", norm="batch").signal_norms
print(f"batch norm signal: layer 1 {s[0]:.3g}, layer 2 {s[1]:.3g}, layer 50 {s[-1]:.3g}")

# %% [markdown]
# Batch norm rescues it, layer norm does not. Batch norm's ratio of 1.1 mixes two effects,
# though: layer 1 sits about 5× below layer 2 (its input $x$ has variance 1, where every later
# layer's input has the sigmoid's variance of about 0.04, so the batch spread it divides by is
# about 5× larger), and from layer 2 on the signal *grows* about 5.6× towards the input.
# Nothing vanishes; the growth comes back below. Why the two norms differ: a sigmoid's output has mean 0.5, so every
# pre-activation $z_j = \sum_k h_k W_{kj}$ carries a large offset $0.5\sum_k W_{kj}$ that is the
# same for every example. Batch norm subtracts it per feature and divides by the *spread over
# the batch* (about $\sqrt{\mathrm{Var} f}$), which cancels the small sigmoid slope: the per-layer
# gain is about $\sqrt{E[f'^2]/\mathrm{Var} f} \approx 1$. Layer norm divides by the example's
# spread over features, which includes that offset: the gain stays about
# $\sqrt{E[f'^2]/E[f^2]} \approx 0.39$.

# %%
ef, vf, d2 = gl.engines.mlp.gaussian_moments("sigmoid", 1.0)  # E f, Var f, E f'² for z ~ N(0, 1)
print(f"sigmoid: E f = {ef:.3f}, Var f = {vf:.4f}, E f'^2 = {d2:.4f}")
print(f"batch-norm gain sqrt(E f'^2 / Var f) = {np.sqrt(d2 / vf):.3f}")
print(f"layer-norm gain sqrt(E f'^2 / E f^2) = {np.sqrt(d2 / (vf + ef**2)):.3f}")
ef_t, vf_t, d2_t = gl.engines.mlp.gaussian_moments("tanh", 1.0)
print(f"tanh: layer-norm gain sqrt(E f'^2 / E f^2) = {np.sqrt(d2_t / (vf_t + ef_t**2)):.3f}")

# %% [markdown]
# Normalization is not a cure-all at initialization, though. With tanh, whose output has mean
# 0, both norms make the signal *grow* towards the input, because they divide by a spread smaller
# than the slope they multiply by (layer norm's gain $\sqrt{E[f'^2]/E[f^2]} \approx 1.08$ for
# tanh). Yang et al. (2019, *A mean field theory of batch normalization*) show that batch norm
# makes gradients explode with depth at initialization, whatever the initialization or the
# activation; the batch-size cell below shows it, and how much worse it gets with a small batch.

# %% [markdown]
# ### Training versus inference
#
# In training (`training=True`, as in `fit` or a custom step) a `BatchNormalization` layer uses
# the current batch's statistics and updates its moving averages. In inference it uses the
# moving averages, which start at mean 0 and variance 1 and follow the data only slowly
# (`momentum=0.99`):

# %%
bn = keras.layers.BatchNormalization()
batch = 5.0 + 2.0 * tf.random.stateless_normal([128, 4], seed=[0, 3])
train_out, infer_out = bn(batch, training=True), bn(batch, training=False)
print(f"training : output mean {float(tf.reduce_mean(train_out)):.3f}, std {float(tf.math.reduce_std(train_out)):.3f}")
print(f"inference: output mean {float(tf.reduce_mean(infer_out)):.3f}, std {float(tf.math.reduce_std(infer_out)):.3f}")
print("moving mean after one training call:", np.round(bn.moving_mean.numpy(), 3))  # 0.01 of the way to 5

# %% [markdown]
# A model evaluated right after a few training steps therefore sees a very different network
# from the one its gradients were computed for. Batch norm also depends on the batch size: the
# statistics of a small batch are noisy, and with 2 examples every normalized feature is about
# ±1 (exactly ±1 but for the ε = 0.001 added to the variance), whatever the data.
# Layer norm does not look at the other examples at all (its numbers change only because the
# data does). tanh with Glorot weights, depth 50:

# %%
two = tf.random.stateless_normal([2, 6], seed=[1, 2])
print("batch of 2, normalized:\n", np.round(keras.layers.BatchNormalization()(two, training=True).numpy(), 3))
def shown(ratio):  # above a million only the power of ten: batch 2's digits depend on the CPU
    return f"{ratio:.3g}" if ratio < 1e6 else f"~1e{int(np.floor(np.log10(ratio)))}"


for batch_size in (2, 8, 128):
    small = gl.engines.mlp.MLPGradientEngine(batch_size=batch_size, max_depth=50)
    cells = []
    for norm, label in (("batch", "batch norm"), ("layer", "layer norm")):
        r = small.report(50, "tanh", "glorot_uniform", norm=norm)
        cells.append(f"{label}: ratio {shown(r.ratio)} ({gl.reports.verdict.status_word(r.status)})")
    print(f"batch {batch_size:>3}: " + "; ".join(cells))

# %% [markdown]
# At batch 128 the two norms grow about equally, and about as the per-unit gain predicts
# ($1.085^{49} \approx 55$). Batch norm's own explosion appears as the batch shrinks. At batch 2
# it is chaotic: dividing by the spread of two numbers amplifies the last bit of every sum, so
# the same code printed 4.70e+18 on an AMD EPYC and 3.67e+18 on an Intel Xeon. The cell prints
# only its power of ten.

# %% [markdown]
# ## Mixed precision · 混合精度
#
# float16 has 5 exponent bits: its largest value is 65504, its smallest normal number
# $2^{-14} \approx 6.1\times10^{-5}$, its smallest subnormal $2^{-24} \approx 6\times10^{-8}$.
# Values at or below half of that, $2^{-25} \approx 3\times10^{-8}$, round to 0 ($2^{-25}$ itself lies
# halfway between 0 and $2^{-24}$ and rounds to the even one, 0), and values near it keep only
# a bit or two (1e-7 becomes $2\cdot2^{-24}$). bfloat16 keeps float32's 8 exponent bits
# (same range) and has only 8 significant bits (7 stored), 2 to 3 decimal digits.

# %%
for dt in (np.float16, np.float32):
    fi = np.finfo(dt)
    print(f"{fi.dtype}: max {float(fi.max):.4g}, smallest normal {float(fi.tiny):.3g}, "
          f"smallest subnormal {float(fi.smallest_subnormal):.3g}")
tiny = tf.constant([1e-8, 1e-7, 1e-30, 1 / 3])
print("1e-8, 1e-7, 1e-30, 1/3 as float16 :", tf.cast(tf.cast(tiny, tf.float16), tf.float32).numpy())
print("1e-8, 1e-7, 1e-30, 1/3 as bfloat16:", tf.cast(tf.cast(tiny, tf.bfloat16), tf.float32).numpy())
edge = tf.constant([2.0**-25, np.nextafter(np.float32(2.0**-25), np.float32(1))])  # 2^-25 and the next float32 up
print("2^-25 and the next float32 above it, as float16:",
      tf.cast(tf.cast(edge, tf.float16), tf.float32).numpy())  # [0, 2^-24 = 5.96e-08]: the tie rounds to even, 0

# %% [markdown]
# A gradient of a sigmoid stack shrinks by about 4 per layer, so in float16 its early layers
# fall below $2^{-24}$. Here the engine computes the forward and backward pass in float16 with
# float32 variables, as Keras's `mixed_float16` policy does; the signal tensors themselves are
# exactly 0, not just their norms:

# %%
for dtype, scale in [("float32", 1), ("float16", 1), ("float16", 2**15), ("bfloat16", 1)]:
    r = engine.report(14, "sigmoid", "glorot_uniform", dtype=dtype, loss_scale=scale)
    zeros = np.flatnonzero(r.signal_norms == 0) + 1
    print(f"{dtype:<8} loss scale {scale:>5}: layer 1 signal {r.signal_norms[0]:.3g}, "
          f"exactly-zero layers {zeros.tolist()}")

# %% [markdown]
# **Loss scaling** multiplies the loss by $S$ before the backward pass, so every gradient is
# $S$ times larger and stays inside float16's range; the float32 weight gradients are divided
# by $S$ afterwards. $2^{15}$ rescues 14 layers, but at depth 17 even that is not enough, and too
# large a scale overflows the last layer (65504 is float16's maximum); the inf then turns into
# NaN in every earlier layer ($\infty \cdot 0$ and $\infty - \infty$ in the backward pass):

# %%
for depth, scale in [(16, 2**15), (17, 2**15), (14, 2**24)]:
    r = engine.report(depth, "sigmoid", "glorot_uniform", dtype="float16", loss_scale=scale)
    s = r.signal_norms
    print(f"depth {depth}, scale 2^{int(np.log2(scale))}: zero layers {int(np.sum(s == 0))}, "
          f"inf layers {int(np.sum(np.isinf(s)))}, NaN layers {int(np.sum(np.isnan(s)))}, "
          f"status {gl.reports.verdict.status_word(r.status)}")

# %% [markdown]
# ### In Keras 3
#
# `keras.mixed_precision.set_global_policy("mixed_float16")` makes every new layer compute in
# float16 and keep float32 variables. Keep the output layer in float32 (`dtype="float32"`,
# which `gl.models.mlp.build_mlp` does under a mixed policy), so the loss is computed in float32.
# `compile` wraps the optimizer in a `LossScaleOptimizer` by itself when the model was built
# under `mixed_float16` (the model keeps the policy it was built with), and `fit` then scales the
# loss; in a custom loop, wrap the optimizer in a
# `LossScaleOptimizer`, multiply the loss with `optimizer.scale_loss(loss)` inside the tape, and
# pass the scaled gradients to `apply_gradients`, which divides them by the scale, skips a
# step whose gradients are not finite, and adjusts the scale (dynamic loss scaling; under a
# `MirroredStrategy` the check looks at one replica only, see chapter 08). Older (Keras 2)
# guides call `get_scaled_loss` and `get_unscaled_gradients`: they no longer exist.

# %%
keras.mixed_precision.set_global_policy("mixed_float16")
try:
    model = gl.models.mlp.build_mlp(14, activation="sigmoid")
    optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))
finally:
    keras.mixed_precision.set_global_policy("float32")  # every later layer is float32 again
print("hidden layer:", model.layers[0].compute_dtype, "compute,", model.layers[0].variable_dtype, "variables")
print("output layer:", model.layers[-1].compute_dtype)
print("scale_loss:", hasattr(optimizer, "scale_loss"), "· get_scaled_loss:", hasattr(optimizer, "get_scaled_loss"),
      "· get_unscaled_gradients:", hasattr(optimizer, "get_unscaled_gradients"))
print("initial loss scale:", optimizer.initial_scale)  # 2^15 = 32768
fit_model = gl.models.mlp.build_mlp(3, activation="sigmoid")  # built under float32: compile does not wrap
model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
fit_model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
print("compile under mixed_float16:", type(model.optimizer).__name__, "· under float32:", type(fit_model.optimizer).__name__)

# %%
x, y = engine.x, engine.y
with tf.GradientTape() as tape:
    loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
    scaled_loss = optimizer.scale_loss(loss)
grads = tape.gradient(scaled_loss, model.trainable_variables)
print(f"loss {float(loss):.4g}, scaled loss / loss = {float(scaled_loss / loss):.0f}")  # 2^15
print(f"layer-1 kernel gradient (still scaled): {gl.true_norm(grads[0]):.3g}")
_ = optimizer.apply_gradients(zip(grads, model.trainable_variables))  # unscales, then SGD

# %% [markdown]
# What `apply_gradients` does with a non-finite gradient, inside a `tf.function` as in `fit`
# (on one device; [chapter 08](08-distributed.ipynb#What-changes-at-larger-scale-·-更大规模时的变化) shows that
# under `MirroredStrategy` Keras 3.15 looks only at the first replica's gradients):

# %%
v = keras.Variable([1.0, 2.0])
demo = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(1.0))
apply = tf.function(lambda g: demo.apply_gradients([(g, v)]))
apply(tf.constant([np.inf, 1.0]))
print("after an inf gradient:", v.numpy(), "· steps", int(demo.iterations), "· scale", float(demo.dynamic_scale))
apply(tf.constant([16384.0, 16384.0]))  # 2^14 · the true gradient [1, 1]
print("after a finite one   :", v.numpy(), "· steps", int(demo.iterations), "· scale", float(demo.dynamic_scale))

# %% [markdown]
# bfloat16 (`mixed_bfloat16`, the policy recommended on TPUs) has float32's exponent range, so
# gradients do not underflow before float32's would (the bfloat16 row above keeps every
# layer), and it needs no loss scaling; what it gives up is precision (2 to 3 significant
# digits: 1/3 became 0.334).

# %% [markdown]
# ## The theory curve · 理论曲线
#
# The explorer draws a dashed line over the measured signal: the mean-field variance recursion.
# Treat the units of $h$ as independent with mean $m$ and variance $v$, and the weights as
# random with variance $\mathrm{Var}\,W$ and fan $n$. Then $z = hW$ has variance
# $q = n\,\mathrm{Var}W\,(m^2 + v)$; forward, $m, v \leftarrow E f(z), \mathrm{Var} f(z)$ (added to
# the old $m, v$ with a skip); backward, one layer multiplies the signal by
# $\sqrt{n\,\mathrm{Var}W\,E[f'(z)^2]}$, the per-layer gain $g$ of chapter 01. With normalization
# $z$ is divided by its batch (or example) spread. With a skip the gradient reaching $h_{l-1}$
# is the sum of the untouched copy and the branch's share, and the recursion adds their
# *variances*: $\lVert\partial L/\partial h_{l-1}\rVert^2 \approx (1 + g_l^2)\,\lVert\partial L/\partial h_l\rVert^2$,
# a factor $\sqrt{1 + g^2}$ per layer, not $1 + g$ (the two parts are uncorrelated at
# initialization). `gl.engines.mlp.predicted_signal` (with `gl.engines.mlp.gaussian_moments`) evaluates this with Gaussian quadrature, anchored at
# the measured last layer. It returns `None` in float16 and bfloat16 (the recursion is about real
# numbers; rounding and underflow are what those modes show) and when there is nothing finite
# to anchor to.

# %%
cases = [("sigmoid", "glorot_uniform", {}), ("relu", "glorot_uniform", {}),
         ("tanh", "orthogonal", {}), ("sigmoid", "glorot_uniform", {"residual": True}),
         ("relu", "he_normal", {"residual": True, "norm": "layer"}),
         ("sigmoid", "glorot_uniform", {"norm": "batch"}),
         ("sigmoid", "glorot_uniform", {"dtype": "float16"})]
for act, init, mode in cases:
    r = engine.report(50, act, init, **mode)
    p = r.predicted_signal
    pred = "None" if p is None else f"{p[0] / p[-1]:.3g}"
    print(f"{act:<8} {init:<15} {str(mode):<38} ratio measured {r.ratio:.3g}, predicted {pred}")

# %% [markdown]
# For the residual sigmoid stack, the plain stack's gain $g = 0.232$ gives $\sqrt{1+g^2}$ per
# layer; adding the factors ($1 + g$) would predict a ratio thousands of times larger than
# the one measured. The recursion itself uses each layer's own $g_l$ (in a residual stack the
# input of each sigmoid grows along the stack), which is why its prediction differs from
# $\sqrt{1+g^2}^{49}$:

# %%
g = engine.report(50, "sigmoid", "glorot_uniform").gain
res = engine.report(50, "sigmoid", "glorot_uniform", residual=True)
print(f"plain gain g = {g:.3g}; sqrt(1 + g^2) = {np.sqrt(1 + g**2):.4f} per layer, "
      f"^49 = {np.sqrt(1 + g**2) ** 49:.3g}; (1 + g)^49 = {(1 + g) ** 49:.3g}")
print(f"residual: measured ratio {res.ratio:.3g} (gain {res.gain:.4f} per layer), "
      f"recursion {res.predicted_signal[0] / res.predicted_signal[-1]:.3g}")

# %% [markdown]
# Within a factor of 2 in every float32 mode but one. Batch norm is the exception, and its
# printed ratio hides it:
# both curves have the small layer 1 seen above, but from layer 2 on the recursion predicts
# an almost flat signal while the measured one grows towards the input:

# %%
r = engine.report(50, "sigmoid", "glorot_uniform", norm="batch")
m, p = r.signal_norms, r.predicted_signal
print(f"batch norm, layer 2 / layer 50: measured {m[1] / m[-1]:.3g}, predicted {p[1] / p[-1]:.3g}")

# %% [markdown]
# The recursion follows one unit of one example at a time. Batch norm's backward pass couples
# the examples of the batch (every output depends on the batch mean and variance); Yang et al.
# (2019) keep the whole batch in their mean-field theory, and that coupling is what makes the
# gradient grow.

# %% [markdown]
# ## The explorer with the new controls · 交互探索
#
# `advanced=True` adds `residual`, `norm`, `dtype`, `loss scale` and `preset` to chapter 01's
# controls (settable as `ex.set(...)` and as constructor keywords; any of those keywords shows
# them too). The status line names every mode that is not the default, and exact zeros are
# red triangles at the bottom. The cells below run on a copy, `lab = ex.copy()`, so the
# explorer you move keeps the settings of its cell.

# %%
ex = gl.GradientExplorer(depth=50, activation="sigmoid", residual=True, advanced=True, engine=engine)
ex

# %%
lab = ex.copy()
lab.set(residual=False, norm="batch")
lab.snapshot()

# %%
lab.set(norm="none", depth=14, dtype="float16")
lab.snapshot()

# %%
lab.set(loss_scale=2**15)
lab.snapshot()

# %% [markdown]
# ## Paper presets · 论文复现
#
# Each preset sets the explorer to a published setting and shows the paper's number beside
# ours. Our network is not the papers' (width 64, a regression loss, random data), so expect
# the order of magnitude and the direction, not the digits. All presets at once:

# %%
titles = {key: gl.i18n._(p.title) for key, p in presets.PRESETS.items()}
quantities = {key: gl.i18n._(presets.QUANTITIES[p.quantity]) for key, p in presets.PRESETS.items()}
title_width, quantity_width = (max(map(gl.i18n.text_width, texts.values())) for texts in (titles, quantities))
for key in presets.PRESETS:
    _, res = presets.run_preset(key, engine)
    p = res.preset
    print(f"{gl.i18n.pad(titles[key], title_width)} {gl.i18n.pad(quantities[key], quantity_width)} paper {res.format(p.paper_value):>8}"
          f"  measured {res.format(res.measured):>8}")

# %% [markdown]
# **He et al. 2015.** A ReLU zeroes half its inputs, so with Xavier's $\mathrm{Var}W = 1/n$
# every layer halves the variance (the paper's derivation). Over 29 layers the signal then
# shrinks by $2^{-14.5}$: that number is derived from the paper's variance argument; the paper's
# own evidence is that a 30-layer ReLU network stalls with Xavier and trains with theirs. He
# initialization ($2/n$) keeps the signal within a factor of 2 here (measured 0.58: width 64 is
# not infinite).

# %%
lab.set(preset="he2015_xavier")
lab.snapshot()

# %%
lab.set(preset="he2015_he")
lab.snapshot()

# %% [markdown]
# **Glorot & Bengio 2010.** The "standard" $U[\pm 1/\sqrt{n}]$ has $n\,\mathrm{Var}W = 1/3$;
# their normalized initialization has 1 (both from the paper). The per-layer gains
# $1/\sqrt{3} \approx 0.577$ and 1 are derived from the paper's variance argument in the linear
# regime; the measured gains (0.489 and 0.737) are lower because $E[\tanh'(z)^2] < 1$ once $z$
# is not small.

# %%
lab.set(preset="glorot2010_standard")
lab.snapshot()

# %%
lab.set(preset="glorot2010_normalized")
lab.snapshot()

# %% [markdown]
# **Saxe et al. 2014** and **Pennington et al. 2017.** Orthogonal weights preserve the norm
# exactly in a linear network (measured ratio 1). With tanh the per-layer gain of the norm is
# 0.975. What a norm gain measures is $\chi$, the mean squared singular value of one layer's
# Jacobian ($\chi = n\,\mathrm{Var}W\,E[f'(z)^2] = g^2$ in the mean-field picture);
# $\chi = 1$ is *criticality*, the edge between vanishing and exploding (Poole et al. 2016,
# Schoenholz et al. 2017). Here $\chi \approx 0.95$: close to critical, yet over 99 layers
# the gradient still shrinks to 0.083. **Dynamical isometry**, Pennington's subject, asks
# more: that *all* singular values of the input-output Jacobian stay near 1, not only their
# mean square. A norm cannot see the spread; the Jacobian of one example through the 100
# tanh layers can (a 64 × 64 product of $W_l\,\mathrm{diag}(f'(z_l))$):

# %%
lab.set(preset="saxe2014")
lab.snapshot()

# %%
lab.set(preset="pennington2017")
lab.snapshot()

# %%
tanh_orth = engine.report(100, "tanh", "orthogonal")
print(f"per-layer gain {tanh_orth.gain:.4f}, chi = gain^2 = {tanh_orth.gain**2:.4f}, ratio {tanh_orth.ratio:.3g}")
h, jacobian = engine.x[:1], np.eye(64)
for w in engine.kernels("orthogonal")[:100]:
    z = h @ w
    jacobian = jacobian @ (w.numpy() * (1.0 - np.tanh(z.numpy()) ** 2))  # dh_out/dh_in, row-vector form
    h = tf.tanh(z)
sv = np.linalg.svd(jacobian.astype(np.float64), compute_uv=False)
print(f"singular values of the 100-layer Jacobian (one example): largest {sv.max():.2g}, smallest {sv.min():.2g}; "
      f"mean square {np.mean(sv**2):.2g} (chi^100 = {tanh_orth.gain ** 200:.2g})")

# %% [markdown]
# The singular values spread over four decades while their mean square follows $\chi^{100}$:
# near-critical, far from isometric. (Pennington et al. reach isometry with orthogonal
# weights *and* a tanh kept in its linear regime, tiny pre-activations; with the unit-scale
# inputs here the tanh is not linear.)
#
# **Klambauer et al. 2017.** SELU with LeCun normal weights drives the activations to mean 0
# and variance 1, at any depth (the grey dotted forward std). The same run's *gradient* is
# not held fixed: it grows by about 1.04 per layer towards the input, a factor of 40 over
# 100 layers. Mean field predicts it: at the fixed point (mean 0, variance 1) the per-layer
# gain is $\sqrt{E[\mathrm{selu}'(z)^2]}$ with $z \sim N(0, 1)$. The paper's statement that
# vanishing and exploding gradients are impossible needs that caveat: the forward statistics
# are fixed, the backward gain is slightly above 1.

# %%
selu_d2 = gl.engines.mlp.gaussian_moments("selu", 1.0)[2]  # E[f'(z)^2] for z ~ N(0, 1)
selu_run = engine.report(100, "selu", "lecun_normal")
print(f"E[selu'(z)^2] = {selu_d2:.4f}; predicted gain sqrt = {np.sqrt(selu_d2):.4f} per layer, "
      f"^99 = {np.sqrt(selu_d2) ** 99:.3g}")
print(f"measured: gain {selu_run.gain:.4f} per layer, ratio {selu_run.ratio:.3g}, "
      f"forward std at layer 100 {selu_run.activation_stds[-1]:.3g}")

# %%
lab.set(preset="klambauer2017")
lab.snapshot()

# %% [markdown]
# **He et al. 2016 / Balduzzi et al. 2017.** The skip's identity term carries the gradient to
# every layer (the plain network: ratio about 1e-31, above). The paper value 1 is that identity
# term alone, derived from He et al.'s equation; the branches add to it (measured 9.4).
# Balduzzi et al. make the related point that skips keep the gradients of nearby inputs
# correlated instead of "shattered".

# %%
lab.set(preset="he2016_residual")
lab.snapshot()

# %% [markdown]
# **Micikevicius et al. 2018.** float16 loses the early layers; a loss scale of $2^{15}$ (the
# default initial scale of Keras's `LossScaleOptimizer`, printed above, and the top of the
# 8 to 32K range the paper reports using) brings them back. The paper values 1 and 0 are
# our yes/no version of the paper's point, not numbers from it.

# %%
lab.set(preset="micikevicius2018_fp16")
lab.snapshot()

# %%
lab.set(preset="micikevicius2018_scaled")
lab.snapshot()

# %% [markdown]
# ## Summary · 总结
#
# - A skip connection adds the identity to each layer's backward factor: a residual sigmoid
#   stack of depth 50 keeps its gradient (ratio about 9) where the plain one loses 31 decades.
# - Without normalization a residual ReLU stack with He weights at least doubles its variance
#   per block (std $10^{22}$ at block 100) and overflows float32; layer norm or batch norm fix
#   it; a branch scaled by $1/\sqrt{D}$ keeps it finite but not near 1 (ReLU branches have a
#   positive mean: std 38 after 100 blocks), a learnable branch scale that starts at 0 makes
#   every block the identity at the start.
# - Near-critical is not isometric: tanh with orthogonal weights has $\chi \approx 0.95$ per
#   layer, and its 100-layer Jacobian's singular values spread over four decades. SELU fixes
#   the forward statistics, while its gradient grows about 1.04× per layer.
# - Batch norm uses the batch's statistics in training and moving averages in inference, and
#   it depends on the batch size; layer norm does neither. Normalization can rescue a vanishing
#   signal (sigmoid + batch norm) but also make it grow (tanh, small batches).
# - float16 gradients at or below $2^{-25}$ are exactly 0. Scale the loss (`LossScaleOptimizer`,
#   `scale_loss` in a custom loop), keep the output layer in float32, or use bfloat16.
# - The variance recursion predicts the signal within a factor of 2 in the plain and residual modes;
#   it misses batch norm's coupling of the examples and does not model float16 rounding.

# %% [markdown]
# ## Exercises
#
# **Exercise 1.** The 100-layer residual ReLU network with He initialization is non-finite.
# Keep `residual=True` and the 100 layers; change `norm`, `initializer` or `activation` so that
# it is finite and healthy. `ch05.EX1_BASE` holds the starting settings.

# %%
my_fix = {}  # e.g. {"norm": ...}
ch05.check_deep_fix(my_fix)

# %% [markdown]
# **Exercise 2.** In float16, the 14-layer sigmoid network with Glorot weights loses its first
# 5 layers. What is the smallest power-of-two loss scale with no exactly-zero layer? Use the
# engine (`engine.report(14, "sigmoid", "glorot_uniform", dtype="float16", loss_scale=...)`).

# %%
my_scale = 1
ch05.check_loss_scale(my_scale)

# %% [markdown]
# **Exercise 3.** Complete a custom training step for a `mixed_float16` model with a
# `LossScaleOptimizer` (Keras 3): one tape, the loss as the mean squared error (in float32), the
# loss scaled, the gradients applied.

# %%
def train_step(model, optimizer, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


ch05.check_scaled_step(train_step)

# %% [markdown]
# ## Solutions

# %% tags=["solution"]
# Exercise 1: normalize the pre-activation of every block (batch norm works too).
ch05.check_deep_fix({"norm": "layer"})

# %% tags=["solution"]
# Exercise 2: sweep the powers of two and keep the first without a zero layer.
for k in range(25):
    r = engine.report(14, "sigmoid", "glorot_uniform", dtype="float16", loss_scale=2**k)
    if np.all(r.signal_norms > 0):
        break
ch05.check_loss_scale(2**k)

# %% tags=["solution"]
# Exercise 3: scale inside the tape, differentiate the scaled loss; apply_gradients unscales.
def train_step(model, optimizer, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        scaled_loss = optimizer.scale_loss(loss)
    grads = tape.gradient(scaled_loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


ch05.check_scaled_step(train_step)
