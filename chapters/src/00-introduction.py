# %% [markdown]
# # Introduction · 引言
#
# *Gradient problems in TensorFlow 2: a hands-on workbook · 梯度计算常见问题与解决*

# %% [markdown]
# **What you will learn**
#
# - why training a network is, at its core, following gradients downhill;
# - how `tf.GradientTape` records a computation and gives back gradients, from a single
#   number up to a small Keras model;
# - the difference between a watched *tensor* and an automatically watched *variable*, and
#   why some gradients come back as `tf.IndexedSlices` instead of a plain tensor;
# - what each chapter of this workbook answers, and how to use its live explorers.

# %% [markdown]
# ## Setup
#
# Every chapter starts with the same cell. `import gradlab as gl` comes first, because it
# loads TensorFlow without the wall of start-up log lines TensorFlow would otherwise print
# (how, for maintainers, is in the [appendix](#Appendix-for-maintainers:-why-the-first-cell-is-clean)).
# `gl.setup(seed=0)` *seeds* the random generators of Python, NumPy and TensorFlow (fixes
# their starting point, so "random" numbers are the same on every run), makes TensorFlow's
# ops deterministic and sets plot defaults, so re-running a chapter reproduces its stored
# outputs. `gradlab` is this workbook's small helper package; the chapters show each
# mechanism in plain TensorFlow before they use the gradlab function that packages it.

# %%
import gradlab as gl
import keras
import numpy as np
import tensorflow as tf

gl.setup(seed=0)
print("TensorFlow", tf.__version__, "· Keras", keras.__version__)

# %% [markdown]
# ## Why gradients matter · 梯度为何重要
#
# The source text opens with: *"gradient computation is the core of back-propagation and model
# optimisation"* (梯度计算是反向传播和模型优化的核心环节). Concretely: a model has weights
# $w$, a *loss* $L(w)$ (one number) says how wrong it is, and training repeats one step,
#
# $$w \leftarrow w - \eta \, \frac{\partial L}{\partial w},$$
#
# moving every weight a little *against* its gradient (the slope of the loss in that
# weight's direction), scaled by a *learning rate* $\eta$. *Back-propagation* is the method
# that computes all those slopes at once, from the loss back to each weight. If the
# gradient is wrong, missing (`None`), vanishingly small, or huge, this step does nothing
# useful, or does damage. That is what the rest of the workbook is about.
#
# Here is the smallest version of that story: a loss of **one** weight.

# %%
w = tf.constant(-0.5)
with tf.GradientTape() as tape:
    tape.watch(w)              # w is a plain tensor, so we ask the tape to watch it
    loss = gl.topics.intro.toy_loss(w)      # (3w - 6)² / 9 + 0.5·sin(2w)
slope = tape.gradient(loss, w)
print("loss :", round(float(loss), 4))
print("dL/dw:", round(float(slope), 4))  # negative: the loss falls if w grows

# %% [markdown]
# The slope is negative, so one gradient-descent step with $\eta = 0.3$ moves $w$ to the
# right, towards the minimum near $w = 2$:

# %%
eta = 0.3
w_next = w - eta * slope
print("w after one step:", round(float(w_next), 4))
print("loss after     :", round(float(gl.topics.intro.toy_loss(w_next)), 4))  # smaller than before

# %% [markdown]
# ### Try it: drag the weight · 交互体验
#
# Move `w` and the learning rate. The blue line is the tangent, whose slope is exactly the
# number `tape.gradient` returned; the green arrow is one gradient-descent step. (The
# explorer is a live widget: in a notebook read without a running kernel you see a stored
# picture instead.)

# %%
tangent = gl.TangentExplorer(w=-0.5, learning_rate=0.3)
tangent

# %% [markdown]
# The explorer is an ordinary Python object, so you can also drive it from code. The cells
# below drive a copy, `step = tangent.copy()`, so the explorer above keeps its settings.
# Setting a control recomputes immediately, and `snapshot()` stores a picture of the new state:

# %%
step = tangent.copy()
step.w.value = 3.5
step.snapshot()

# %% [markdown]
# Now a learning rate of 1.5 from `w = 0`. The slope there is -3, so the step is
# $-1.5 \cdot (-3) = 4.5$: it jumps far past the minimum near 2, to a *higher* loss:

# %%
step.w.value = 0.0
step.learning_rate.value = 1.5
step.snapshot()

# %% [markdown]
# Three learning rates from the same point. 0.3 moves towards the minimum, 1.0 jumps past it
# but still lands lower, 1.5 lands higher than it started:

# %%
for lr in [0.3, 1.0, 1.5]:
    loss, slope, w_next = gl.topics.intro.slope_and_step(0.0, lr)
    print(f"lr {lr}: w 0 -> {w_next:.2f}, loss {loss:.3f} -> {float(gl.topics.intro.toy_loss(w_next)):.3f}")

# %% [markdown]
# Too large a step is the one-weight version of *exploding* updates, which chapter 01
# studies in deep networks.

# %% [markdown]
# ## `tf.GradientTape` from zero
#
# TensorFlow computes gradients by **recording** operations on a *tape* while they run, then
# playing the tape backwards, from the result to the inputs, multiplying local slopes by
# the chain rule as it goes (this is called *reverse-mode automatic differentiation*; it
# gives the slopes of one number, the loss, with respect to millions of weights at a cost
# of the same order as computing the loss itself). Three rules cover most of what you will meet:
#
# 1. Only operations run **inside** the `with tf.GradientTape()` block are recorded.
# 2. The tape watches **trainable `tf.Variable`s automatically** (a *variable* is a tensor
#    that holds state and can be changed in place, which is how a model stores its weights).
#    Plain *tensors* (`tf.constant`, immutable arrays) must be watched explicitly with
#    `tape.watch`.
# 3. `tape.gradient(target, sources)` returns one gradient per source, each with the
#    **source's** shape. (One exception, shown below: a gradient that touches only a few
#    rows of a table comes back as `tf.IndexedSlices`.)
#
# ### A scalar loss of a variable

# %%
x = tf.Variable(3.0)
with tf.GradientTape() as tape:
    y = x**2
print("dy/dx:", tape.gradient(y, x).numpy())  # 2*x = 6

# %% [markdown]
# ### A tensor needs `tape.watch`
#
# The same computation with a constant gives `None`: nothing told the tape to follow `c`.
# A `None` gradient raises no error; it just comes back as `None` and breaks the next line
# that uses it. Chapter 02 has a whole gallery of such cases.

# %%
c = tf.constant(3.0)
with tf.GradientTape() as tape:
    y = c**2
print("unwatched:", tape.gradient(y, c))  # None

with tf.GradientTape() as tape:
    tape.watch(c)
    y = c**2
print("watched  :", tape.gradient(y, c).numpy())  # 6.0

# %% [markdown]
# ### A tape is used once
#
# By default a tape frees its records after the first `gradient` call. Asking twice is an
# error (chapter 02 shows `persistent=True`, which lifts this, and what it costs):

# %% tags=["raises-exception"]
x = tf.Variable(2.0)
with tf.GradientTape() as tape:
    y = x**3
print("first :", tape.gradient(y, x).numpy())  # 3*x**2 = 12
print("second:", tape.gradient(y, x))

# %% [markdown]
# ### Gradients of a small Keras model
#
# A Keras model's weights are trainable variables, so the tape watches them without being
# asked. `model.trainable_variables` lists them: for each `Dense` layer its *kernel* (the
# weight matrix) and its *bias* (the vector added after it).
# `tape.gradient(loss, model.trainable_variables)` returns a list in the same order, each
# gradient shaped like its variable. (`relu`, the first layer's *activation*, is the function
# applied to each of its outputs, here $\max(0, z)$.)

# %%
keras.utils.set_random_seed(1)  # the same initial weights each time this cell runs
model = keras.Sequential(
    [keras.Input((4,)), keras.layers.Dense(3, activation="relu"), keras.layers.Dense(1)]
)
xb = tf.random.stateless_normal([8, 4], seed=[0, 1])  # a batch of 8 examples, 4 features
yb = tf.random.stateless_normal([8, 1], seed=[0, 2])  # and their 8 targets

# %% [markdown]
# The loss is the *mean squared error*: the average over the batch of (prediction − target)².

# %%
with tf.GradientTape() as tape:
    loss = tf.reduce_mean(tf.square(model(xb) - yb))
grads = tape.gradient(loss, model.trainable_variables)

for v, g in zip(model.trainable_variables, grads):
    print(f"{v.path:26s} variable {str(v.shape):8s} gradient {str(g.shape):8s} norm {float(tf.norm(g)):.3g}")

# %% [markdown]
# One step of plain gradient descent with these gradients lowers the loss, which is all
# that training is:

# %%
print("loss before:", f"{float(loss):.4f}")
for v, g in zip(model.trainable_variables, grads):
    v.assign_sub(0.1 * g)
print("loss after :", f"{float(tf.reduce_mean(tf.square(model(xb) - yb))):.4f}")  # lower

# %% [markdown]
# ### Sparse gradients: `tf.IndexedSlices`
#
# Rule 3 has one exception you will meet in any model with an embedding (a table with one
# learned row per word or id). When the loss reads only some rows of a variable, through
# `tf.gather` or a `keras.layers.Embedding`, the gradient of every other row is 0, and
# TensorFlow does not build that mostly-zero tensor. It returns a `tf.IndexedSlices`: the
# rows that were read (`indices`), their gradients (`values`) and the full shape
# (`dense_shape`):

# %%
table = tf.Variable(tf.reshape(tf.range(12.0), (4, 3)))  # 4 rows of 3
with tf.GradientTape() as tape:
    loss = tf.reduce_sum(tf.gather(table, [0, 2, 2]))  # reads row 0 once, row 2 twice
g = tape.gradient(loss, table)
print(type(g).__name__)  # IndexedSlices, not a (4, 3) tensor
print("indices    :", g.indices.numpy())  # [0 2 2]
print("values     :", g.values.shape)  # (3, 3): one row per lookup
print("dense_shape:", g.dense_shape.numpy())  # [4 3]

# %% [markdown]
# When you need the ordinary tensor (to print it, or to compare it),
# `tf.convert_to_tensor` adds the rows up: row 2 was read twice, so its gradient is 2:

# %%
print(tf.convert_to_tensor(g).numpy())  # rows 1 and 3 are 0

# %% [markdown]
# Optimizers accept the `IndexedSlices` as it is. Plain SGD then updates only the rows that
# were read:

# %%
keras.optimizers.SGD(learning_rate=1.0).apply_gradients([(g, table)])  # g is still IndexedSlices
print(table.numpy())  # row 0 minus 1, row 2 minus 2; rows 1 and 3 untouched

# %% [markdown]
# An optimizer with state is different. With momentum (or Adam) every row keeps a running
# velocity, and each step moves every row by its velocity, so a row that was read once keeps
# moving in later steps that do not read it. Two steps, the first reading row 0 and the
# second only row 2:

# %%
for name, optimizer in [("SGD", keras.optimizers.SGD(0.1)),
                        ("SGD, momentum=0.9", keras.optimizers.SGD(0.1, momentum=0.9))]:
    rows = tf.Variable(tf.zeros((4, 3)))
    for read in ([0], [2]):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.gather(rows, read))
        before = rows.numpy().copy()
        optimizer.apply_gradients([(tape.gradient(loss, rows), rows)])
    moved = np.flatnonzero(np.any(rows.numpy() != before, axis=1))
    print(f"{name:18s} rows changed by the step that read row 2: {moved}")  # [2], then [0 2]

# %% [markdown]
# An `Embedding` layer does the same, both in ordinary *eager* code (each op runs as soon as
# Python reaches it, as in every cell so far) and inside a `tf.function` (a Python function
# that TensorFlow turns into a graph once and then reruns; chapter 03 is about it):

# %%
embedding = keras.layers.Embedding(input_dim=5, output_dim=2)
ids = tf.constant([[1, 3, 3]])


@tf.function
def embedding_gradient():
    with tf.GradientTape() as tape:
        out = tf.reduce_sum(embedding(ids))
    return tape.gradient(out, embedding.embeddings)


with tf.GradientTape() as tape:
    out = tf.reduce_sum(embedding(ids))
print("eager             :", type(tape.gradient(out, embedding.embeddings)).__name__)  # IndexedSlices
print("inside tf.function:", type(embedding_gradient()).__name__)  # IndexedSlices

# %% [markdown]
# ## Contents
#
# The source text (梯度计算常见问题与解决) names four problems developers meet: vanishing
# and exploding gradients, shape matching for non-scalar targets, and using `GradientTape`
# efficiently with `tf.function`. One chapter each, and a summary:
#
# | | Chapter | What it answers |
# |---|---|---|
# | 00 | [Introduction · 引言](00-introduction.ipynb) | What a gradient is for, and `tf.GradientTape` from zero (this page). |
# | 01 | [Vanishing and exploding gradients · 梯度消失与梯度爆炸的检测与处理](01-vanishing-exploding.ipynb) | Why gradients shrink or blow up with depth, how to detect it, and what clipping, initialisation and activations really fix; with the live **GradientExplorer**. |
# | 02 | [Non-scalar targets and Jacobians · 非标量求导的维度匹配问题](02-jacobians.ipynb) | What `gradient` does with a vector target, Jacobians and their cost, and a gallery of `None` gradients with fixes. |
# | 03 | [GradientTape with tf.function · tf.GradientTape与tf.function的协同使用](03-tape-and-function.ipynb) | Speed measured eager vs graph vs XLA, tracing and retracing, and the traps of state frozen at trace time. |
# | 04 | [Summary · 总结](04-summary.ipynb) | A troubleshooting guide from symptom to fix, and a capstone: repair a broken training setup. |
#
# Chapters 05 onwards go beyond the source, to where learners really get stuck:
#
# | | Chapter | What it answers |
# |---|---|---|
# | 05 | [Beyond the source: residual connections, normalization and mixed precision · 超越原文：残差连接、归一化与混合精度](05-beyond-the-source.ipynb) | What keeps a 100-layer network trainable: skip connections, BatchNorm and LayerNorm, float16 with loss scaling; theory curves and paper presets in the explorer. |
# | 06 | [Where None and NaN gradients come from · 梯度为 None 与 NaN 的根源](06-none-and-nan.ipynb) | The error messages users really see, the ops that cut the gradient path, NaN traps such as `tf.where`, `tf.custom_gradient`, and an inspector that names the cause. |
# | 07 | [Gradients through time · 循环网络中的梯度](07-through-time.ipynb) | Back-propagation through time, why tanh RNNs vanish or explode, what gates change before and after training, and clipping for sequences; with the **TimeExplorer**. |
# | 08 | [Gradients across devices and workers · 分布式训练中的梯度](08-distributed.ipynb) | `tf.distribute` on two logical CPUs and two real worker processes: loss scaling across replicas, where clipping happens, gradient accumulation. |
# | 09 | [Transformers, warmup and long runs · Transformer 的梯度与学习率预热](09-transformers.ipynb) | Per-block gradients of post-LN and pre-LN Transformers and the conditions behind Xiong et al.'s picture, Adam's first steps and Keras's warmup, the Tuning Playbook's recipe for unstable runs, TensorBoard. The **TransformerExplorer**. |
# | 10 | [Check, bend and budget gradients · 梯度的检验、改造与内存](10-checking-and-memory.ipynb) | Is my gradient right? Finite differences and `gl.check_gradient`; one gradient per example (and DP-SGD's clipping); a gradient of a gradient (WGAN-GP's penalty); and what `tf.recompute_grad` and gradient accumulation really save in memory. |

# %% [markdown]
# ## How to use this workbook
#
# - **Run cells in order** (Shift+Enter), or *Run → Run All Cells*. Each chapter stands
#   alone: its Setup cell is all it needs. *Kernel → Restart Kernel and Run All Cells*
#   gives you the outputs stored in the file, apart from cells that time something (and,
#   on a different CPU, perhaps a last digit). Re-running a single cell out of order can
#   give other numbers, because the random generators have moved on.
# - **Move the sliders.** The explorers recompute as soon as a control changes. Each one
#   is a Python object too (`explorer.depth.value = 50`), so you can script experiments.
# - **Cells marked as errors are errors on purpose.** Where the source text's code fails or
#   misleads, the chapter keeps that cell, shows the real error, explains it, and gives the
#   corrected version next to it.
# - **Exercises check themselves.** Each chapter ends with exercises whose checks say *what*
#   is wrong (shape, values, `None`, NaN) and hint at why, not only pass or fail. Worked
#   solutions follow at the very end, in collapsed cells: click the bar beside a cell to
#   open it.

# %% [markdown]
# ## Summary
#
# - Training moves each weight against its gradient; bad gradients mean bad training, and
#   too large a step overshoots (learning rate 1.5 above: loss 4.0 → 6.46).
# - `tf.GradientTape` records what runs inside it. Variables are watched automatically,
#   tensors need `tape.watch`, and an unconnected source gives `None`, silently.
# - A non-persistent tape answers one `gradient` call.
# - `tape.gradient(loss, model.trainable_variables)` gives one gradient per variable, shaped
#   like it; for `tf.gather` and `Embedding` lookups it is a `tf.IndexedSlices`.
#
# ## Exercises
#
# Fill in the cells; each check says what is still wrong. As shipped they hold
# placeholders, so the checks show ❌. The checks live in `gradlab.exercises.ch00`.

# %%
from gradlab.exercises import ch00

# %% [markdown]
# **1.** Compute $\frac{d}{dx}\,\sin(x)\,x^2$ at $x = 1.5$ with a tape. The check compares
# it with the hand-derived $\cos(x)x^2 + 2x\sin(x)$.

# %%
x = tf.constant(1.5)
answer_1 = None  # your code here: record sin(x) * x**2 on a tape and take its gradient
ch00.check_derivative(answer_1)

# %% [markdown]
# **2.** Write `model_gradients(model, x, y)`: it returns the gradients of the model's mean
# squared error on `(x, y)` with respect to its trainable variables (a list of four
# tensors). The check calls it on `model, xb, yb` and compares with a reference tape.

# %%
def model_gradients(model, x, y):
    return None  # your code here


ch00.check_model_gradients(model_gradients, model, xb, yb)

# %% [markdown]
# ## Appendix for maintainers: why the first cell is clean
#
# *Not needed for learning; it explains what `import gradlab` changes in your session.*
#
# TensorFlow 2.21 prints several C++ log lines when it loads (`WARNING: All log messages
# before absl::InitializeLog() ...`, an oneDNN notice, a CUDA notice on machines without a
# GPU). `TF_CPP_MIN_LOG_LEVEL` cannot stop them because they come before logging is
# configured. `import gradlab` therefore makes three changes, all visible below:
#
# 1. It loads TensorFlow with the process's standard error pointed at `/dev/null` for the
#    duration of that import (and its first op) only.
# 2. Before the import it sets two environment variables, unless you set them yourself:
#    `TF_CPP_MIN_LOG_LEVEL=2`, which hides TensorFlow's C++ *info and warning* lines for the
#    whole session (errors still show), and `TF_ENABLE_ONEDNN_OPTS=0`, so CPU results do not
#    vary with oneDNN's order of computation (its start-up notice warns of round-off
#    differences).
# 3. `gl.setup()` sets TensorFlow's Python logger to `ERROR`; `gl.setup(seed=0, quiet=False)`
#    leaves it alone.
#
# The tests (`make test`) re-run every chapter with nbval, which compares each cell's
# output, standard error included, with the stored one; start-up lines there would fail
# them. The same run also checks the unit tests of `gradlab` and drives the explorers in a
# real JupyterLab in headless Chromium.
#
# To see TensorFlow's warnings again, call `tf.get_logger().setLevel("WARNING")` (Python
# side), or set `TF_CPP_MIN_LOG_LEVEL=0` in the environment before starting Jupyter (C++
# side). Chapter 02 does the first when it wants to show you one of those warnings.

# %%
import os

print("TF_ENABLE_ONEDNN_OPTS =", os.environ.get("TF_ENABLE_ONEDNN_OPTS"))
print("TF_CPP_MIN_LOG_LEVEL  =", os.environ.get("TF_CPP_MIN_LOG_LEVEL"))
print("Python logger level   =", tf.get_logger().getEffectiveLevel())  # 40 = ERROR

# %% [markdown]
# ## Solutions
#
# **1.** `x` is a constant, so the tape must be told to watch it:

# %% tags=["solution"]
with tf.GradientTape() as tape:
    tape.watch(x)
    f = tf.sin(x) * x**2
answer_1 = tape.gradient(f, x)
ch00.check_derivative(answer_1)

# %% [markdown]
# Two typical slips, and what the check says about them. Forgetting `tape.watch` gives
# `None`; computing `sin` with NumPy makes it a constant the tape cannot see, so the slope
# of that factor is lost:

# %% tags=["solution"]
with tf.GradientTape() as tape:
    f = tf.sin(x) * x**2  # x is a tensor and nobody watched it
print(ch00.check_derivative(tape.gradient(f, x)))

with tf.GradientTape() as tape:
    tape.watch(x)
    f = np.sin(x) * x**2  # np.sin returns a NumPy number: a constant for the tape
print(ch00.check_derivative(tape.gradient(f, x)))

# %% [markdown]
# **2.** The model's variables are watched automatically:

# %% tags=["solution"]
def model_gradients(model, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    return tape.gradient(loss, model.trainable_variables)


ch00.check_model_gradients(model_gradients, model, xb, yb)

# %% [markdown]
# Returning the loss instead of the gradients, or summing the squared errors instead of
# averaging them, is feedback too:

# %% tags=["solution"]
def loss_only(model, x, y):
    return tf.reduce_mean(tf.square(model(x) - y))


def summed(model, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(model(x) - y))
    return tape.gradient(loss, model.trainable_variables)


print(ch00.check_model_gradients(loss_only, model, xb, yb))
print(ch00.check_model_gradients(summed, model, xb, yb))
