# %% [markdown]
# # Summary · 总结

# %% [markdown]
# **What you will learn**
#
# - what the source text's summary claims, point by point, and where chapters 01 to 03 show
#   each point at work;
# - a troubleshooting guide: from a symptom (a `None` gradient, NaN, tiny or huge gradients, a
#   slow Jacobian, surprising retracing, a slow step) to its cause, the check that confirms it
#   and the fix;
# - `gl.inspect_training_step`: one call that runs a training step's forward and backward pass
#   and reports what is wrong, in plain words;
# - how momentum and Adam choose the length of a step;
# - to put it all to work in a capstone: repair a training setup that is broken four ways.

# %% [markdown]
# ## Setup

# %%
import gradlab as gl  # noqa: I001  (first: it imports TensorFlow quietly)
import keras
import numpy as np
import tensorflow as tf
from gradlab.exercises import ch04

gl.setup(seed=0)

# %% [markdown]
# ## What the workbook showed · 总结
#
# The source text ends with:
#
# > 本章节覆盖了TensorFlow梯度计算的核心问题：梯度消失与梯度爆炸的检测与处理策略、非标量求导的维度匹配方法，以及tf.GradientTape与tf.function的高效协同使用。通过实践这些技巧，新学者能更好地理解和解决实际开发中的梯度问题，提升模型训练效率。建议结合官方文档和示例代码进行深入学习。
# >
# > (This section covered the core problems of gradient computation in TensorFlow: detecting
# > and handling vanishing and exploding gradients, matching dimensions when differentiating
# > non-scalars, and using `tf.GradientTape` efficiently with `tf.function`. Practising these
# > techniques helps newcomers understand and solve gradient problems in real work and makes
# > training more efficient. Study the official documentation and examples for more.)
#
# Point by point, what running the code added, and where to see it:
#
# | The source's point | What the code showed | See |
# |---|---|---|
# | **Detect** vanishing and exploding gradients (检测) | One factor per layer, multiplied over the depth. Judge the back-propagated *signal* of each layer; `assert_all_finite` catches only NaN and inf. | [01 · why](01-vanishing-exploding.ipynb#Why-gradients-shrink-or-grow-·-定义与原因), [01 · measure](01-vanishing-exploding.ipynb#Measure-the-signal-of-every-layer-with-a-tape), [01 · detect](01-vanishing-exploding.ipynb#Detect-it-·-检测方法) |
# | **Handle** them (处理) | Clipping bounds a step. It does not cure NaN, and it does not help vanishing. Match the initializer to the activation; ReLU's slope is 0 for negative inputs. | [01 · clipping](01-vanishing-exploding.ipynb#1.-Gradient-clipping-·-梯度裁剪), [01 · initialization](01-vanishing-exploding.ipynb#2.-Weight-initialization-·-权重初始化), [01 · activations](01-vanishing-exploding.ipynb#3.-Activation-choice-·-激活函数选择) |
# | **Non-scalar targets** (非标量求导) | `gradient` of a vector is the gradient of its sum. The source's Jacobian loop gives `None` (slice inside the tape, or use `tape.jacobian`); `grad_ys` is called `output_gradients`. | [02 · vectors](02-jacobians.ipynb#Take-the-gradient-of-a-vector-·-非标量求导), [02 · Jacobians](02-jacobians.ipynb#Build-a-Jacobian-·-示例：计算Jacobian矩阵), [02 · None](02-jacobians.ipynb#Find-out-why-a-gradient-is-None) |
# | **Tape with `tf.function`** (协同使用) | The source's step learns from noise and traces twice. `print` runs only while tracing; values read at trace time are frozen. | [03 · the step](03-tape-and-function.ipynb#Run-the-source's-training-step-·-协同使用示例), [03 · tracing](03-tape-and-function.ipynb#Make-tracing-visible-·-注意事项：调试), [03 · traps](03-tape-and-function.ipynb#Avoid-the-traps) |
# | **More efficient** training (提升效率) | Whether a graph is faster depends on the machine and on the work per op: measured, not assumed. | [03 · timing](03-tape-and-function.ipynb#Time-eager,-graph-and-XLA-·-注意事项：图编译), [03 · a loop to keep](03-tape-and-function.ipynb#Put-it-together:-a-training-loop-to-keep) |
# | **Read the official docs** (官方文档) | Good advice. The guides behind these chapters: *Introduction to gradients and automatic differentiation*, *Advanced automatic differentiation*, *Better performance with tf.function*. | tensorflow.org/guide |

# %% [markdown]
# ## Troubleshoot a training problem · 常见问题排查
#
# Start from what you see. The first check confirms the cause before you change anything;
# `gl.inspect_training_step` (next section) runs most of these checks in one call, and
# `report` below means its result. Each symptom links to its details: the other causes, the
# fix, and where the workbook shows it.
#
# | Symptom | Most likely cause | First check |
# |---|---|---|
# | [A gradient is `None`](#A-gradient-is-None) | The loss does not depend on that variable through recorded ops | `report.none_gradients` |
# | [Loss or gradients are NaN or inf](#Loss-or-gradients-are-NaN-or-inf) | Overflow: too large weights or learning rate | `report.first_nonfinite_layer` |
# | [Tiny gradients in early layers](#Tiny-gradients-in-early-layers) | Vanishing: saturating activations over many layers | `report.status == "vanishing"` |
# | [Huge gradients](#Huge-gradients) | Exploding: too large initial weights or learning rate | `report.status == "exploding"` |
# | [A slow or memory-hungry Jacobian](#A-slow-or-memory-hungry-Jacobian) | A Python loop, or the full Jacobian of a batch | count its entries |
# | [`tf.function` retraces, or ignores a change](#tf.function-retraces,-or-ignores-a-change) | Python values as arguments; state read at trace time | `fn.experimental_get_tracing_count()` |
# | [A slow training step](#A-slow-training-step) | Eager overhead, retracing, or timing the first call | `gl.time_step` |
#
# ### Details per symptom
#
# #### A gradient is `None`
# - **Causes:** an integer dtype, a NumPy round-trip, `x = x + 1` on a variable (it becomes a
#   tensor), an unwatched tensor, work outside the tape, a layer that never uses its own
#   weight (a wrong return value).
# - **Check:** `report.none_gradients` names the variables; chapter 02 tests each cause.
# - **Fix:** compute inside the tape with TensorFlow ops, `tape.watch` tensors, `assign` to
#   variables, make the layer's output use the weight.
# - **See:** [02 · None gradients](02-jacobians.ipynb#Find-out-why-a-gradient-is-None).
#
# #### Loss or gradients are NaN or inf
# - **Causes:** overflow from too large weights or learning rate; an op whose slope is
#   infinite (`sqrt` or a norm at 0, `log` near 0); a corrupt input.
# - **Check:** `report.first_nonfinite_layer` names the first layer whose *output* overflows.
#   When the forward pass is finite (a `sqrt` at 0), `report.first_nonfinite_gradient_layer`
#   names where the *gradients* go bad. `tf.debugging.enable_check_numerics()` names the op.
# - **Fix:** a fresh model: fix the initializer. After some training steps: lower the learning
#   rate. For `sqrt` and `log`: add a small epsilon. Clipping does **not** repair NaN.
# - **See:** [01 · detect it](01-vanishing-exploding.ipynb#Detect-it-·-检测方法),
#   [01 · clipping does not cure NaN](01-vanishing-exploding.ipynb#Clipping-does-not-cure-NaN).
#
# #### Tiny gradients in early layers
# - **Causes:** vanishing: saturating activations (sigmoid, tanh) over many layers, too small
#   an initializer, dead ReLUs (units whose input is always negative, so their slope is 0).
# - **Check:** `report.status == "vanishing"` and the per-layer signal; try the network's shape
#   in the GradientExplorer.
# - **Fix:** ReLU or Leaky ReLU with He initialization, fewer layers, normalization layers or
#   residual connections (adding a block's input to its output). Clipping does not help:
#   global-norm clipping keeps every layer-to-layer ratio, and with SGD it shortens the
#   already tiny early-layer steps further (Adam mostly undoes a global factor, except for
#   gradients below its epsilon).
# - **See:** [01 · the GradientExplorer](01-vanishing-exploding.ipynb#See-it:-the-GradientExplorer-·-交互探索),
#   [01 · initialization](01-vanishing-exploding.ipynb#2.-Weight-initialization-·-权重初始化),
#   [11 · a first layer that never learns](11-watch-training.ipynb#A-first-layer-that-never-learns-·-第一层学不到东西)
#   (its update ratios over a run).
#
# #### Huge gradients
# - **Causes:** exploding: too large initial weights, a learning rate that makes each step
#   larger than the last, very deep networks.
# - **Check:** `report.status == "exploding"` or a large `report.global_norm` (the norm of all
#   gradients together, as one long vector); watch it over the steps.
# - **Fix:** an initializer matched to the activation; `tf.clip_by_global_norm` or the
#   optimizer's `global_clipnorm=`; a lower learning rate.
# - **See:** [01 · clipping](01-vanishing-exploding.ipynb#1.-Gradient-clipping-·-梯度裁剪),
#   [01 · clipping in training](01-vanishing-exploding.ipynb#Clipping-in-training:-NaN-without-it,-progress-with-it),
#   [11 · watch it train](11-watch-training.ipynb#A-ReLU-network-that-diverges-·-发散的-ReLU-网络): the
#   step where it diverges, and what clipping and a smaller learning rate each cost.
#
# #### A slow or memory-hungry Jacobian
# - **Causes:** a Python loop of `tape.gradient` calls; the full Jacobian of a batch, whose
#   off-diagonal blocks (one example's outputs against another example's inputs) are all 0
#   when the examples are independent; more outputs than you need.
# - **Check:** count the entries, (number of outputs) × (number of inputs);
#   `gl.topics.jacobians.cross_example_max` shows whether the off-diagonal blocks are 0.
# - **Fix:** `tape.jacobian` in one call, `batch_jacobian` for independent examples, a
#   vector-Jacobian product (VJP) instead of the whole matrix.
# - **See:** [02 · Jacobians](02-jacobians.ipynb#Build-a-Jacobian-·-示例：计算Jacobian矩阵),
#   [02 · without building it](02-jacobians.ipynb#Multiply-by-the-Jacobian-without-building-it-·-VJP-and-JVP).
#
# #### `tf.function` retraces, or ignores a change
# - **Causes:** *tracing* is the one-time run of your Python function that builds the graph;
#   it runs again for Python numbers or new shapes as arguments (each one traces a new graph); a
#   Python value, attribute or global read at trace time; a model rebound after tracing.
# - **Check:** `fn.experimental_get_tracing_count()`, `gl.TraceCounter`, `report.tracing_count`.
# - **Fix:** pass tensors, give an `input_signature` or `reduce_retracing=True`; keep values
#   that change in `tf.Variable`s; one function per model.
# - **See:** [03 · tracing](03-tape-and-function.ipynb#Make-tracing-visible-·-注意事项：调试),
#   [03 · frozen values](03-tape-and-function.ipynb#Values-frozen-at-trace-time).
#
# #### A slow training step
# - **Causes:** eager Python overhead on every op; retracing on every call; timing the first
#   call (which traces and compiles) together with the rest.
# - **Check:** `gl.time_step` times the first call apart from the steady state; the tracing
#   count.
# - **Fix:** wrap the step in `tf.function` once, build the model and optimizer first, try
#   `jit_compile=True`, larger batches.
# - **See:** [03 · timing](03-tape-and-function.ipynb#Time-eager,-graph-and-XLA-·-注意事项：图编译).

# %% [markdown]
# ## Inspect one training step
#
# `gl.inspect_training_step(model, x, y, loss=None, step_fn=None)` runs the forward and
# backward pass of one training step under a `GradientTape` (the weights are not changed) and
# returns a report. For a `Sequential` or functional model it has one row per layer: the
# standard deviation of the layer's output, the back-propagated **signal** (the gradient of the
# loss with respect to the layer's *pre-activation*, its output before the activation function,
# as in chapter 01)
# and, in the column `grad (all weights)`, the norm of the gradients of all the layer's
# weights together: kernel **and** bias for a `Dense` layer. Chapter 01's weight-gradient
# norms were the kernel's alone, so this column reads somewhat larger than those. Below the
# table: the diagnosis, which names layers as the table does, and the problems it found, each
# with a fix. Here is chapter 01's first network, six sigmoid layers:

# %%
model = gl.models.mlp.build_mlp(6, activation="sigmoid", initializer="glorot_uniform")
x, y = gl.models.mlp.make_data(batch_size=128, input_dim=64, seed=0)
report = gl.inspect_training_step(model, x, y)
report

# %% [markdown]
# The signal numbers are the ones `gl.gradient_report` gave in chapter 01 for the same
# network; the function reuses its diagnosis:

# %%
print("same signal as chapter 01:", np.allclose(report.signal_norms, gl.gradient_report(model, x, y).signal_norms))  # True
print("status:", report.status)  # vanishing
print("problem kinds:", report.problem_kinds)

# %% [markdown]
# **Non-finite values.** Chapter 01 noted that a deep *linear* network with large weights
# overflows. The report names the first layer whose output is no longer finite, which is
# where to look, rather than the loss, where the NaN is finally noticed. The fix it suggests
# depends on the situation: this model has never been trained (every bias is still 0, as Keras
# creates them, which the report reads as `report.looks_untrained`), so the culprit is the
# initializer, not a learning rate:

# %%
overflowing = gl.models.mlp.build_mlp(60, activation="linear", initializer="large_normal")
nan_report = gl.inspect_training_step(overflowing, x, y)
print(nan_report.summary())
print("first layer with NaN/inf output:", nan_report.first_nonfinite_layer)
print("looks untrained:", nan_report.looks_untrained)  # True
for problem in nan_report.problems:
    print("-", problem)

# %% [markdown]
# **`None` gradients.** Every trainable variable whose gradient is `None` is listed by its
# path. Here a layer creates a weight that its `call` never uses:

# %%
class Offset(keras.layers.Layer):
    """Adds a learned offset; also creates a `gain` weight, which call() forgets to use."""

    def build(self, input_shape):
        self.offset = self.add_weight(shape=(input_shape[-1],), initializer="zeros", name="offset")
        self.gain = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="gain")

    def call(self, inputs):
        return inputs + self.offset


# %%
small = keras.Sequential([keras.Input((4,)), Offset(name="offset"),
                          keras.layers.Dense(8, activation="relu", name="hidden"),
                          keras.layers.Dense(1, name="out")], name="small")
xs = tf.random.stateless_normal([32, 4], seed=[4, 1])
ys = tf.reduce_sum(xs, axis=1, keepdims=True)
none_report = gl.inspect_training_step(small, xs, ys)
print("None gradients:", none_report.none_gradients)  # ('small/offset/gain',)

# %% [markdown]
# **Tracing.** Pass your own training step as `step_fn`. The report is made first, then
# `step_fn(x, y)` runs once (so it does train), and if it is a `tf.function` the report says
# how often it has traced. A second batch size makes it trace again on a later call, and the
# report says so. It does not know which argument changed; it lists the usual causes of a
# retrace on a later call (a new shape or dtype, such as this new batch size, or a new Python
# value) with their fix. A second trace *during the first call* would instead point at
# variables created inside the step:

# %%
step = gl.make_train_step(model, keras.optimizers.SGD(0.01))
first = gl.inspect_training_step(model, x, y, step_fn=step)
second = gl.inspect_training_step(model, x, y, step_fn=step)
third = gl.inspect_training_step(model, x[:64], y[:64], step_fn=step)
for name, r in [("first call", first), ("same shape", second), ("batch of 64", third)]:
    print(f"{name:12s} traced {r.tracing_count} time(s), this call traced: {r.traced_this_call}")
print(third.problems[-1])

# %% [markdown]
# ## Choose the step length: momentum and Adam · 动量与Adam
#
# Chapter 01's fixes make the gradient *point* somewhere useful; the optimizer decides how
# far each step goes. Plain SGD steps by learning rate × gradient. Two common optimizers do
# more, and the capstone below allows both.
#
# **Momentum.** `keras.optimizers.SGD(learning_rate, momentum=β)` keeps a running *velocity*
# $v$: each step $v \leftarrow \beta v - \eta g$, then $w \leftarrow w + v$. Steps that agree
# build up; steps that flip sign cancel. With the same gradient every step, the step grows
# towards $\eta / (1 - \beta)$, which is 1.0 for $\eta = 0.1$ and $\beta = 0.9$:

# %%
w = tf.Variable(0.0)
momentum_sgd = keras.optimizers.SGD(learning_rate=0.1, momentum=0.9)
steps = []
for _ in range(40):
    before = float(w)
    momentum_sgd.apply_gradients([(tf.constant(1.0), w)])  # the same gradient, 1, every step
    steps.append(before - float(w))
print("steps 1, 2, 3   :", [round(s, 3) for s in steps[:3]])  # 0.1, 0.19, 0.271
print("steps 10, 20, 40:", [round(steps[n - 1], 3) for n in (10, 20, 40)])  # towards 0.1 / (1 - 0.9) = 1

# %% [markdown]
# So on a perfectly steady slope `SGD(0.1, momentum=0.9)` ends up moving as far per step as
# `SGD(1.0)`, but only after a few dozen steps (65% of it at step 10, 88% at step 20). On a
# real loss the gradient keeps changing direction, and the two behave very differently: the
# capstone's solution measures it.
#
# **Adam.** `keras.optimizers.Adam(learning_rate)` keeps running averages of each weight's
# gradient and of its square, and divides the first by the square root of the second. Each
# weight then moves by about the learning rate per step, whatever the scale of its gradient:

# %%
for g in [0.001, 1.0, 1000.0]:
    w = tf.Variable(0.0)
    keras.optimizers.Adam(learning_rate=0.01).apply_gradients([(tf.constant(g), w)])
    print(f"gradient {g:g}: first Adam step {-float(w):.4g}")  # about 0.01 every time

# %% [markdown]
# That makes Adam forgiving about the learning rate, but not about spikes: one huge gradient
# inflates its running average of squares, and the following steps shrink. Chapter 01 pairs
# it with clipping for that reason.

# %% [markdown]
# ## Inspecting real architectures
#
# `gl.inspect_training_step` does not re-implement your model: while the model runs its own
# `call`, every layer is tapped (nested models are opened up into their layers), so the same
# report works on a `keras.applications` backbone, a recurrent model or a subclassed model
# with skip connections. It also leaves the model as it found it: the pass runs as `fit` runs a
# training step (`training=True`: dropout on, BatchNorm on the batch's statistics), and then
# every variable, trainable or not, is put back. Here is MobileNetV2 with random weights
# (`weights=None`, so nothing is downloaded) on a batch of four 32×32 images.
#
# We inspect a float64 copy of it, with the same weights (`gl.models.precision.float64_copy`):
# in float32 the third digit of this backbone's gradient norm depends on the machine. A float32
# convolution runs the oneDNN kernels picked for the CPU at hand, each with its own summation
# order, and 155 layers grow the last bit into the printed digits. On an AMD EPYC (AVX2) we
# measured 1.16e+04 with oneDNN's default kernels and 1.14e+04 with `ONEDNN_MAX_CPU_ISA=AVX`;
# on an Intel Xeon, 1.14e+04 with AVX2 kernels and 1.16e+04 with AVX-512 ones. The same
# instruction set gives either figure on another CPU: the digits follow the kernels, not a rule
# about instruction sets. float64 runs the same code on every x86 CPU.

# %%
keras.utils.set_random_seed(0)
backbone = keras.applications.MobileNetV2(input_shape=(32, 32, 3), weights=None, alpha=0.35, classes=3)
images = tf.random.stateless_normal([4, 32, 32, 3], seed=[5, 1])
labels = tf.one_hot([0, 1, 2, 0], 3)
cce = keras.losses.CategoricalCrossentropy()
backbone64 = gl.models.precision.float64_copy(backbone)  # the same weights, in float64
before = [v.numpy().copy() for v in backbone64.variables]
mobile = gl.inspect_training_step(backbone64, images, labels, loss=cce)
print(mobile.summary())
print("layer calls in the report:", len(mobile.layers))
print("every variable unchanged:",
      all(np.array_equal(a, v.numpy()) for a, v in zip(before, backbone64.variables, strict=True)))  # True
for problem in mobile.problems:
    print("-", problem)

# %% [markdown]
# The signal grows by thousands from the last layer to the first, so the verdict is
# "exploding", but the initializer is not the cause. At 32×32 input MobileNetV2's last
# feature maps are 1×1, so each BatchNormalization layer there normalizes every channel over
# only 4 numbers (batch 4 × 1×1): its mean and variance are mostly noise, and the gradient
# through the division by that variance is erratic. The report names this cause instead of
# suggesting another initializer. In inference mode (`training=False`) the picture changes, for
# a related reason: the moving statistics have never been trained, so BatchNorm normalizes
# nothing. Two thirds of the units of two late ReLU layers then never fire (the status reads "dead units"),
# and the signal vanishes toward the input. The report puts the statistics first:

# %%
mobile_eval = gl.inspect_training_step(backbone64, images, labels, loss=cce, training=False)
print(mobile_eval.summary())
print(mobile_eval.problems[0])

# %% [markdown]
# **Recurrent layers.** For a model with a recurrent layer the report adds `time_step_norms`:
# the norm of the gradient of the loss with respect to each time step of that layer's input,
# earliest first. It is one tape in plain TensorFlow: watch the input sequence, take the
# gradient, and reduce over every axis but time:

# %%
keras.utils.set_random_seed(0)
rnn = keras.Sequential([keras.Input((40, 2)), keras.layers.SimpleRNN(8, name="rnn"), keras.layers.Dense(1, name="out")])
seqs = tf.random.stateless_normal([16, 40, 2], seed=[6, 1])
targets = tf.reduce_sum(seqs[:, :5, 0], axis=1, keepdims=True)  # depends on the first 5 steps
with tf.GradientTape() as tape:
    tape.watch(seqs)
    seq_loss = tf.reduce_mean(tf.square(targets - rnn(seqs, training=True)))
per_step = tf.norm(tape.gradient(seq_loss, seqs), axis=[0, 2])  # one norm per time step
print("first / last time step, by hand:", f"{float(per_step[0] / per_step[-1]):.2g}")
rnn_report = gl.inspect_training_step(rnn, seqs, targets)
print("first / last time step, report: ", f"{rnn_report.time_step_norms[0] / rnn_report.time_step_norms[-1]:.2g}")
print(rnn_report.problems[0])

# %% [markdown]
# Forty steps of a `SimpleRNN` shrink the gradient from the first step by four orders of
# magnitude, and the target depends on exactly those steps. An LSTM carries its cell state
# through a forget gate instead of a repeated matrix product. Keras starts that gate's bias at
# 1 (`unit_forget_bias=True`), so an untrained LSTM keeps roughly sigmoid(1) ≈ 0.73 of its
# cell state per step. That is still a decay, and the report still flags it. Compare the
# per-step factor in the diagnosis line with 0.73:

# %%
keras.utils.set_random_seed(0)
lstm = keras.Sequential([keras.Input((40, 2)), keras.layers.LSTM(8, name="lstm"), keras.layers.Dense(1, name="out")])
print("forget-gate bias:", lstm.get_layer("lstm").cell.bias.numpy()[8:16])  # gates i, f, c, o: f is units 8-15
lstm_report = gl.inspect_training_step(lstm, seqs, targets)
lstm_report

# %% [markdown]
# The measured factor, about 0.8 per step, is near 0.73 but not equal to it, and need not
# be: sigmoid(1) is the gate's value only when its other inputs, the weighted input
# $x_t$ and the previous output $h_{t-1}$, add nothing, and the gradient also flows back
# through $h$ as well as through the cell state. The estimate gets the size right; the
# measurement decides, and both are below 1, so after 40 steps almost nothing of the
# earliest inputs is left.

# %% [markdown]
# ## Summary
#
# - Diagnose before you fix. A symptom (NaN, a stalled loss, a slow step) has several possible
#   causes; the troubleshooting table pairs each with a first check.
# - `gl.inspect_training_step` runs those checks in one step: non-finite values and the first
#   layer where they appear, per-layer signal and gradient norms with the vanishing/exploding
#   diagnosis, `None` gradients by variable, and the tracing count of a `tf.function` step.
# - `gl.train_steps` trains any Keras model for a few steps and stops at the first non-finite
#   step; `gl.exercises.checks.check_trains` turns "it trains" into a self-check: the final loss (the mean of
#   the last 10 steps) must be below the target, and `require_variables=` keeps a layer from
#   being deleted instead of repaired.
# - Clipping bounds a step; it does not repair NaN, vanishing gradients or a wrong learning
#   rate. Momentum builds up steps that agree (up to $\eta/(1-\beta)$ on a steady slope); Adam
#   moves each weight by about the learning rate.

# %% [markdown]
# ## Exercises
#
# ### Capstone: repair a broken training setup · 综合练习
#
# Below is a small regression problem and a training setup that fails. It is broken in four
# ways, all of them met in this workbook. Your job: find each one with the workbook's tools
# and fix it, until the self-check at the end passes.
#
# The data, from `ch04.capstone_data()`: 256 examples of 8 input features $x = 3 + 2z$ for
# standard normal $z$ (so mean 3 and standard deviation 2, far from the mean 0 and standard
# deviation 1 networks like), and a target $y = \sin(z_0) + 0.5\, z_1 z_2$ that depends on
# three of them. A model that predicts a constant gets a loss of about the target's variance:

# %%
cx, cy = ch04.capstone_data()
print("x:", cx.shape, " y:", cy.shape)
print("variance of y:", f"{float(tf.math.reduce_variance(cy)):.3f}")  # the loss of a constant guess

# %% [markdown]
# The model starts with `Standardize`, an *affine* layer (a scale and a shift)
# $(x - \text{shift}) \cdot \text{scale}$ with one shift and one scale per feature, meant to
# bring the features to a usable range. It does not compute the mean and standard deviation:
# `shift` starts at 0 and `scale` at 1, and both are trained on the loss like any other
# weight.

# %%
class Standardize(keras.layers.Layer):
    """Learnable per-feature standardization: (x - shift) * scale."""

    def build(self, input_shape):
        n = input_shape[-1]
        self.shift = self.add_weight(shape=(n,), initializer="zeros", name="shift")
        self.scale = self.add_weight(shape=(n,), initializer="ones", name="scale")

    def call(self, inputs):
        centred = inputs - self.shift
        scaled = centred * self.scale  # noqa: F841
        return centred

# %% [markdown]
# Eight sigmoid layers with small random weights follow, trained with plain SGD and a large
# learning rate:

# %%
def make_broken_model():
    layers = [keras.Input((8,)), Standardize(name="standardize")]
    for i in range(8):
        layers.append(keras.layers.Dense(
            32, activation="sigmoid", name=f"hidden_{i + 1}",
            kernel_initializer=keras.initializers.RandomNormal(stddev=0.01, seed=i)))
    layers.append(keras.layers.Dense(1, name="output", kernel_initializer=keras.initializers.GlorotUniform(seed=100)))
    return keras.Sequential(layers, name="broken")


broken_optimizer = keras.optimizers.SGD(learning_rate=2.0)

# %% [markdown]
# Train it for up to 200 steps with `gl.train_steps`, which records the loss and the global
# gradient norm of each step and stops at the first NaN or inf:

# %%
broken = make_broken_model()
broken_run = gl.train_steps(broken, cx, cy, optimizer=broken_optimizer, steps=200)
print(broken_run)

# %% [markdown]
# The loss against the target of 0.1 (dashed), on a logarithmic axis, so that the climb to
# overflow fits in:

# %%
gl.plots.plot_losses({"broken setup": broken_run.losses}, target=0.1)

# %% [markdown]
# The loss rises and overflows long before 200 steps, and one variable was never trained.
#
# **Your goal.** A model and an optimizer (and, if you like, a clipping threshold) such that,
# trained on `(cx, cy)`:
#
# - the loss falls below **0.1** within **200** steps,
# - every loss and gradient stays finite,
# - no variable has a `None` gradient, and the `Standardize` layer's `shift` and `scale` are
#   still there: deleting the layer is not a fix.
#
# "Falls below" means the **final** loss, the mean of the last 10 steps: a loss that dips
# below 0.1 once and climbs back does not count. Any Keras optimizer is allowed, plain SGD,
# SGD with momentum or Adam. `ch04.check_capstone` checks all of this (with `gl.exercises.checks.check_trains`)
# and says which condition fails, and when the loss ends too high, whether the steps were too
# short or too long. Work through the hints; the worked solution is in
# [Solutions](#Solutions) at the end.
#
# **Hint 1: inspect before you change anything.** Inspect the freshly built model, not the
# one that just diverged:

# %%
gl.inspect_training_step(make_broken_model(), cx, cy)

# %% [markdown]
# Two problems before a single step is taken. Read the `None` gradient first: which variable
# is it, and why does the loss not depend on it? (Chapter 02's list of causes.)
#
# Look also at the `output` row: its standard deviation over the batch is 0 (to the digits
# shown). Eight sigmoid layers with tiny weights squash every example to nearly the same
# values, so the model gives the same prediction for every input: its output no longer
# depends on the input at all, which is the vanishing signal seen from the forward side.
#
# **Hint 2: the vanishing signal.** The signal at the first layer is many orders of
# magnitude smaller than at the last. Set the explorer to this network's shape (depth 8, width 32,
# sigmoid, small normal weights), then look for an activation and an initializer that keep it
# healthy:

# %%
capstone_explorer = gl.GradientExplorer(depth=8, activation="sigmoid", initializer="small_normal", width=32)
capstone_explorer

# %% [markdown]
# **Hint 3: the step length.** Once the first two problems are fixed, train again with
# `SGD(learning_rate=2.0)`: `gl.train_steps` stops where the numbers overflow, and
# `gl.inspect_training_step` on the diverged model names the first layer whose output is no
# longer finite. Clipping will stop the NaN; check whether it also makes the model learn.
# The options are the ones this workbook met: a lower learning rate, with clipping for the
# first large gradients; SGD with momentum; or Adam
# ([Choose the step length](#Choose-the-step-length:-momentum-and-Adam-·-动量与Adam)).
#
# **Your fix.** Edit the definitions in the next three cells (they start as copies of the
# broken setup), then run the check.

# %%
class MyStandardize(Standardize):
    def call(self, inputs):
        # --- your code: make the layer's output use both of its weights
        centred = inputs - self.shift
        scaled = centred * self.scale  # noqa: F841
        return centred
        # ---


# %%
def make_my_model():
    # --- your code: activation and initializer
    layers = [keras.Input((8,)), MyStandardize(name="standardize")]
    for i in range(8):
        layers.append(keras.layers.Dense(
            32, activation="sigmoid", name=f"hidden_{i + 1}",
            kernel_initializer=keras.initializers.RandomNormal(stddev=0.01, seed=i)))
    layers.append(keras.layers.Dense(1, name="output", kernel_initializer=keras.initializers.GlorotUniform(seed=100)))
    return keras.Sequential(layers, name="mine")
    # ---


# %%
def make_my_optimizer():
    return keras.optimizers.SGD(learning_rate=2.0)  # --- your code


my_clip = None  # --- your code: None, or a global-norm threshold such as 1.0

# %% [markdown]
# The self-check builds a fresh model and optimizer with your functions and trains a float64
# copy of the model (the same starting weights; the verdict is then the same on every CPU)
# for up to 200 steps. As stored here, with the broken setup unchanged, it fails and says why:

# %%
ch04.check_capstone(make_my_model, make_my_optimizer, my_clip)

# %% [markdown]
# ## Solutions
#
# The four faults: (1) `Standardize.call` returns the wrong value, so `scale` gets no
# gradient; (2) the sigmoid activation, which over eight layers makes the signal vanish;
# (3) the initializer, normal weights with standard deviation 0.01, which chapter 01 found
# vanishes with every activation; (4) the learning rate of 2.0, far too large once the gradients flow.
#
# **Step 1: the `None` gradient.** The report named `broken/standardize/scale`. `call`
# computes `scaled` and then returns `centred`, so the loss never depends on `scale`: a
# wrong return value, the last of chapter 02's causes (a source the target truly does not
# depend on). A linter sees it too: ruff reports `scaled` as assigned but never used
# (rule F841), which is why the broken cells carry a `noqa` for it. Return the scaled value:

# %% tags=["solution"]
class FixedStandardize(Standardize):
    def call(self, inputs):
        return (inputs - self.shift) * self.scale


def make_model(activation, initializer, layer=FixedStandardize):
    layers = [keras.Input((8,)), layer(name="standardize")]
    for i in range(8):
        layers.append(keras.layers.Dense(32, activation=activation, name=f"hidden_{i + 1}",
                                         kernel_initializer=initializer(seed=i)))
    layers.append(keras.layers.Dense(1, name="output", kernel_initializer=keras.initializers.GlorotUniform(seed=100)))
    return keras.Sequential(layers, name="fixed")

# %% tags=["solution"]
def small_normal(seed):
    return keras.initializers.RandomNormal(stddev=0.01, seed=seed)


step1 = gl.inspect_training_step(make_model("sigmoid", small_normal), cx, cy)
print("None gradients:", step1.none_gradients)  # ()
print("problems left :", step1.problem_kinds)  # ('vanishing',)

# %% [markdown]
# **Step 2: the vanishing signal.** Try every initializer with sigmoid at this depth. The
# explorer's engine gives the same diagnosis as its sliders, with the signal's *gain*, the
# factor it keeps per layer:

# %% tags=["solution"]
engine = capstone_explorer.engine
for init in gl.models.mlp.INITIALIZERS:
    r = engine.report(8, "sigmoid", init)
    print(f"{init:16s} {gl.i18n.pad(gl.reports.verdict.status_word(r.status), 9)} gain per layer {r.gain:.3g}")

# %% [markdown]
# None is healthy: with sigmoid, every initializer loses signal layer after layer.
# `large_normal` loses the least, and we come back to it at the end. Here we follow chapter
# 01's advice for deep sigmoid stacks and change the activation. ReLU with He initialization
# is healthy:

# %% tags=["solution"]
capstone_explorer.set(activation="relu", initializer="he_normal")
capstone_explorer.snapshot()

# %% tags=["solution"]
step2 = gl.inspect_training_step(make_model("relu", keras.initializers.HeNormal), cx, cy)
step2

# %% [markdown]
# **Step 3: the step length.** From here on each run trains a float64 copy of the model
# (`gl.models.precision.float64_copy`: the same starting weights, exact in float64), as
# `ch04.check_capstone` does with yours. Two hundred float32 steps grow the last bit of a
# matmul, which depends on the CPU's instruction set, into other printed digits and, at the
# edge of divergence, into another verdict; float64 runs the same code on every x86 CPU. The
# story is the same in float32, with other digits.
#
# With the fixed model, the original `SGD(2.0)` overflows within a few steps:

# %% tags=["solution"]
def relu_he():
    return gl.models.precision.float64_copy(make_model("relu", keras.initializers.HeNormal))


diverged = relu_he()
print(gl.train_steps(diverged, cx, cy, optimizer=keras.optimizers.SGD(2.0), steps=200))
print("first layer with NaN/inf output:", gl.inspect_training_step(diverged, cx, cy).first_nonfinite_layer)

# %% [markdown]
# Clipping the global norm to 1 stops the overflow, but the steps are still far too long for
# this problem, and the loss never settles. The check says so, and why:

# %% tags=["solution"]
ch04.check_capstone(relu_he, lambda: keras.optimizers.SGD(2.0), clip=1.0)

# %% [markdown]
# A much smaller rate, `SGD(0.01)`, fails in two different ways. Without the clip the loss
# touches 0.1 but does not stay there: over the last 20 steps it swings between 0.1 and about
# 0.2. With the clip, nearly every step
# is clipped and moves the weights by exactly 0.01 × 1, and the loss creeps down too slowly.
# The check tells the two apart:

# %% tags=["solution"]
print(ch04.check_capstone(relu_he, lambda: keras.optimizers.SGD(0.01)))
print(ch04.check_capstone(relu_he, lambda: keras.optimizers.SGD(0.01), clip=1.0))

# %% [markdown]
# `SGD(0.1)` with the clip comes close: its loss is still falling when the 200 steps run
# out, just above the target:

# %% tags=["solution"]
ch04.check_capstone(relu_he, lambda: keras.optimizers.SGD(0.1), clip=1.0)

# %% [markdown]
# **Momentum** gets there. `SGD(0.1, momentum=0.9)` with the clip:

# %% tags=["solution"]
def make_fixed_optimizer():
    return keras.optimizers.SGD(learning_rate=0.1, momentum=0.9)


ch04.check_capstone(relu_he, make_fixed_optimizer, clip=1.0)

# %% [markdown]
# Is that because momentum moves as far per step as `SGD(1.0)`, as the steady-slope
# arithmetic suggests? Measure it: the length of each update, $\lVert w_\text{after} -
# w_\text{before}\rVert$ over all weights, for both optimizers with the same clip.

# %% tags=["solution"]
def step_lengths(model, optimizer, clip, steps=200):
    """The length of every update (float64) and the loss before it."""

    @tf.function  # compiled: three times faster than op by op
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(cx) - tf.cast(cy, tf.float64)))  # a float64 model
        grads, _ = tf.clip_by_global_norm(tape.gradient(loss, model.trainable_variables), clip)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    lengths, losses = [], []
    for _ in range(steps):
        before = [v.numpy().astype(np.float64) for v in model.trainable_variables]
        losses.append(float(step()))
        after = [v.numpy().astype(np.float64) for v in model.trainable_variables]
        lengths.append(np.sqrt(sum(np.sum((a - b) ** 2) for a, b in zip(after, before))))
    return np.array(lengths), np.array(losses)

# %% tags=["solution"]
from gradlab.progress import Progress  # noqa: E402

rows = []
with Progress(2, "200 steps each") as bar:
    for label, opt in [("SGD(1.0)", keras.optimizers.SGD(1.0)), ("SGD(0.1, momentum=0.9)", make_fixed_optimizer())]:
        lengths, losses = step_lengths(relu_he(), opt, clip=1.0)
        rows.append(f"{label:22s} median step {np.median(lengths):.3g}, total path {lengths.sum():.3g}, "
                    f"final loss {losses[-10:].mean():.3g}")
        bar.update(note=label)
print("\n".join(rows))

# %% [markdown]
# (This loop is written out by hand, while the check runs gradlab's own compiled step, which
# takes the global norm in float64. In float64 the two agree on the final loss to the digits
# shown. In float32 they do not: over 200 momentum steps the two ways of rounding grow apart
# into different paths, and so do two CPUs. A loss this far below the target is then not
# reproducible in float32, only its size.)
#
# No. With the clip, `SGD(1.0)` takes steps of length 1 whenever a gradient's norm is above 1,
# and its loss stalls far above the target. Momentum's steps are about twenty times shorter
# (a median of a few hundredths), because the gradient keeps turning and opposing steps cancel in the
# velocity, long before the steady-slope limit of 1.0 is reached. What momentum buys here
# is a direction averaged over recent steps, not a longer step.
#
# The clip is part of the fix, not an extra. The gradient norm starts near 50 (the step-2
# report above), and without the clip the same optimizer overflows within a few steps:

# %% tags=["solution"]
print(gl.train_steps(relu_he(), cx, cy, optimizer=make_fixed_optimizer(), steps=200))

# %% [markdown]
# The whole run, against the broken one, with the target. The logarithmic axis (left) spans
# about 40 powers of ten, from the broken run's largest finite loss (printed below) down to the
# fixed run's final loss, and squeezes the fixed run into its bottom; the linear
# axis (right), cut just above the first loss, shows the fixed run's fall and where it
# crosses the target:

# %% tags=["solution"]
fixed = relu_he()
fixed_run = gl.train_steps(fixed, cx, cy, optimizer=make_fixed_optimizer(), steps=200, clip=1.0)
print(fixed_run)
print("broken run's largest finite loss:", f"{max(v for v in broken_run.losses if np.isfinite(v)):.2g}")  # about 1e36
gl.plots.plot_losses({"broken setup": broken_run.losses, "fixed setup": fixed_run.losses}, target=0.1, linear=True)

# %% [markdown]
# **Adam works as well**, with or without a clip, on the same repaired model:

# %% tags=["solution"]
print(ch04.check_capstone(relu_he, lambda: keras.optimizers.Adam(0.01)))
print(ch04.check_capstone(relu_he, lambda: keras.optimizers.Adam(0.01), clip=1.0))

# %% [markdown]
# **The mildest candidate from step 2.** Sigmoid with `large_normal`, whose signal still
# shrinks layer after layer, trained with the same momentum optimizer and clip, and with Adam
# at rate 0.01 without a clip:

# %% tags=["solution"]
def sigmoid_large():
    return gl.models.precision.float64_copy(
        make_model("sigmoid", lambda seed: keras.initializers.RandomNormal(stddev=1.0, seed=seed)))


print(ch04.check_capstone(sigmoid_large, make_fixed_optimizer, clip=1.0))
print(ch04.check_capstone(sigmoid_large, lambda: keras.optimizers.Adam(0.01)))

# %% [markdown]
# With momentum SGD it does not reach the target; with Adam it does. Adam divides each
# weight's gradient by that weight's own running gradient size, so the layers that receive a
# small signal still take steps of about the learning rate. A "vanishing" verdict warns about
# plain gradient steps; it does not prove that a network cannot train. A short training run
# decides.
#
# And a last inspection of the trained model finds nothing left to fix:

# %% tags=["solution"]
print(gl.inspect_training_step(fixed, cx, cy).summary())
