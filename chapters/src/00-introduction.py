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
# - the difference between a watched *tensor* and an automatically watched *variable*;
# - what each chapter of this workbook answers, and how to use its live explorers.

# %% [markdown]
# ## Setup
#
# Every chapter starts with the same cell. `import gradlab as gl` comes first: it imports
# TensorFlow with its C++ start-up log lines silenced (more on that at the end of this
# chapter). `gl.setup(seed=0)` seeds Python, NumPy and TensorFlow, turns on deterministic
# ops and sets plot defaults, so re-running a chapter reproduces its stored outputs.

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
# $w$, a loss $L(w)$ says how wrong it is, and training repeats one step,
#
# $$w \leftarrow w - \eta \, \frac{\partial L}{\partial w},$$
#
# moving every weight a little *against* its gradient, with a learning rate $\eta$. If the
# gradient is wrong, missing (`None`), vanishingly small, or huge, this step does nothing
# useful, or does damage. That is what the rest of the workbook is about.
#
# Here is the smallest version of that story: a loss of **one** weight.

# %%
w = tf.constant(-0.5)
with tf.GradientTape() as tape:
    tape.watch(w)              # w is a plain tensor, so we ask the tape to watch it
    loss = gl.toy_loss(w)      # (3w - 6)² / 9 + 0.5·sin(2w)
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
print("loss after     :", round(float(gl.toy_loss(w_next)), 4))  # smaller than before

# %% [markdown]
# ### Try it: drag the weight · 交互体验
#
# Move `w` and the learning rate. The blue line is the tangent, whose slope is exactly the
# number `tape.gradient` returned; the green arrow is one gradient-descent step. Try a
# learning rate of 1.5 from `w = 0`: the step jumps past the minimum to a *higher* loss.
# Too large a step is the one-weight version of *exploding* updates, which chapter 01
# studies in deep networks.

# %%
tangent = gl.TangentExplorer(w=-0.5, learning_rate=0.3)
tangent

# %% [markdown]
# The explorer is an ordinary Python object, so you can also drive it from code. Setting a
# control recomputes immediately:

# %%
tangent.w.value = 3.5
print(tangent.status_text)

# %% [markdown]
# ## `tf.GradientTape` from zero
#
# TensorFlow computes gradients by **recording** operations on a *tape* while they run, then
# playing the tape backwards (reverse-mode automatic differentiation). Three rules cover
# most of what you will meet:
#
# 1. Only operations run **inside** the `with tf.GradientTape()` block are recorded.
# 2. The tape watches **trainable `tf.Variable`s automatically**. Plain tensors
#    (`tf.constant`) must be watched explicitly with `tape.watch`.
# 3. `tape.gradient(target, sources)` returns one gradient per source, each with the
#    **source's** shape.
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
# asked. `model.trainable_variables` lists them (kernel and bias of each `Dense` layer), and
# `tape.gradient(loss, model.trainable_variables)` returns a list in the same order, each
# gradient shaped like its variable.

# %%
keras.utils.set_random_seed(1)  # the same initial weights each time this cell runs
model = keras.Sequential(
    [keras.Input((4,)), keras.layers.Dense(3, activation="relu"), keras.layers.Dense(1)]
)
xb = tf.random.stateless_normal([8, 4], seed=[0, 1])
yb = tf.random.stateless_normal([8, 1], seed=[0, 2])

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
# ## Contents
#
# The source text (梯度计算常见问题与解决) names four problems developers meet: vanishing
# and exploding gradients, shape matching for non-scalar targets, and using `GradientTape`
# efficiently with `tf.function`. One chapter each:
#
# | | Chapter | What it answers |
# |---|---|---|
# | 00 | [Introduction · 引言](00-introduction.ipynb) | What a gradient is for, and `tf.GradientTape` from zero (this page). |
# | 01 | [Vanishing and exploding gradients · 梯度消失与梯度爆炸的检测与处理](01-vanishing-exploding.ipynb) | Why gradients shrink or blow up with depth, how to detect it, and what clipping, initialisation and activations really fix; with the live **GradientExplorer**. |
# | 02 | [Non-scalar targets and Jacobians · 非标量求导的维度匹配问题](02-jacobians.ipynb) | What `gradient` does with a vector target, Jacobians and their cost, and a gallery of `None` gradients with fixes. |
# | 03 | [GradientTape with tf.function · tf.GradientTape与tf.function的协同使用](03-tape-and-function.ipynb) | Speed measured eager vs graph vs XLA, tracing and retracing, and the traps of state frozen at trace time. |
# | 04 | [Summary · 总结](04-summary.ipynb) | A troubleshooting guide from symptom to fix, and a capstone: repair a broken training setup. |

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
#   is wrong (shape, values, `None`, NaN), not only pass or fail.
# - **Tests.** `make test` re-runs every chapter and compares each output with the stored one
#   (nbval), runs the unit tests of the `gradlab` helper package, and drives the explorers
#   in a real JupyterLab in headless Chromium.
#
# ### Why the first cell is clean
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
#    depend on oneDNN's threading.
# 3. `gl.setup()` sets TensorFlow's Python logger to `ERROR`; `gl.setup(seed=0, quiet=False)`
#    leaves it alone.
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
# ## Summary
#
# - Training moves each weight against its gradient; bad gradients mean bad training.
# - `tf.GradientTape` records what runs inside it. Variables are watched automatically,
#   tensors need `tape.watch`, and an unconnected source gives `None`, silently.
# - A non-persistent tape answers one `gradient` call.
# - `tape.gradient(loss, model.trainable_variables)` gives one gradient per variable, shaped
#   like it.
#
# ## Exercises
#
# Fill in the cells; each check says what is still wrong. As shipped they hold
# placeholders, so the checks show ❌; worked answers are in [Solutions](#Solutions).
#
# **1.** Compute $\frac{d}{dx}\,\sin(x)\,x^2$ at $x = 1.5$ with a tape, and compare it with
# the hand-derived $\cos(x)x^2 + 2x\sin(x)$.

# %%
x = tf.constant(1.5)
answer_1 = None  # your code here: record sin(x) * x**2 on a tape and take its gradient
expected_1 = np.cos(1.5) * 1.5**2 + 2 * 1.5 * np.sin(1.5)
print(gl.check_array("d/dx sin(x)·x²", answer_1, expected_1))

# %% [markdown]
# **2.** Return the gradients of the model's mean squared error with respect to its
# trainable variables (a list of four tensors). The check compares them with a reference.

# %%
def model_gradients(model, x, y):
    return None  # your code here


with tf.GradientTape() as ref_tape:
    ref_loss = tf.reduce_mean(tf.square(model(xb) - yb))
reference = ref_tape.gradient(ref_loss, model.trainable_variables)
print(gl.check_arrays("model gradients", model_gradients(model, xb, yb), reference))

# %% [markdown]
# ## Solutions
#
# **1.** `x` is a constant, so the tape must be told to watch it:

# %% tags=["solution"]
with tf.GradientTape() as tape:
    tape.watch(x)
    f = tf.sin(x) * x**2
answer_1 = tape.gradient(f, x)
print(gl.check_array("d/dx sin(x)·x²", answer_1, expected_1))

# %% [markdown]
# Forgetting `tape.watch` gives `None`, and the check says so:

# %% tags=["solution"]
with tf.GradientTape() as tape:
    f = tf.sin(x) * x**2  # x is a tensor and nobody watched it
print(gl.check_array("d/dx sin(x)·x²", tape.gradient(f, x), expected_1))

# %% [markdown]
# **2.** The model's variables are watched automatically:

# %% tags=["solution"]
def model_gradients(model, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    return tape.gradient(loss, model.trainable_variables)


print(gl.check_arrays("model gradients", model_gradients(model, xb, yb), reference))
