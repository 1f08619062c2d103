# %% [markdown]
# # GradientTape with tf.function · tf.GradientTape与tf.function的协同使用

# %% [markdown]
# **What you will learn**
#
# - what `@tf.function` does to a training step: it *traces* your Python once into a graph,
#   then runs the graph; and how to measure what that buys you (eager vs graph vs XLA,
#   TensorFlow's optimising compiler; first call vs steady state) on your own machine;
# - to *see* tracing: `print` vs `tf.print`, a tracing counter, and what makes a function
#   retrace (Python numbers, new shapes) and how to stop it (tensors, `input_signature`,
#   `reduce_retracing`);
# - the traps that bite in practice: values frozen at trace time, a model rebound after
#   tracing, variables created inside the function, side effects that run once, and
#   numerics checks that TF 2.21 drops under `jit_compile=True` on a CPU;
# - a training loop you can take away: clipping, a non-finite check and per-layer gradient
#   norms, as a `tf.function`, as a Keras `train_step` for `fit`, and as a callback.

# %% [markdown]
# ## Setup

# %%
import gradlab as gl  # noqa: I001  (first: it imports TensorFlow quietly)
import keras
import numpy as np
import tensorflow as tf
from gradlab.exercises import ch03

gl.setup(seed=0)

# %% [markdown]
# ## Run the source's training step · 协同使用示例
#
# The source text says that `tf.GradientTape` records operations to compute gradients,
# that `tf.function` compiles a Python function into a TensorFlow graph "to improve
# performance", and that putting the forward pass and the gradient computation inside a
# `tf.function` speeds up training. Here is its example, exactly as written:

# %%
import tensorflow as tf

# 定义一个简单的模型和优化器
model = tf.keras.Sequential([tf.keras.layers.Dense(10)])
optimizer = tf.keras.optimizers.SGD(learning_rate=0.01)

@tf.function  # 编译为图，提高性能
def train_step(inputs, labels):
    with tf.GradientTape() as tape:
        predictions = model(inputs, training=True)
        loss = tf.reduce_mean(tf.square(labels - predictions))
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    return loss

# 示例训练循环
for epoch in range(10):
    inputs = tf.random.normal([32, 784])
    labels = tf.random.normal([32, 10])
    loss = train_step(inputs, labels)
    print(f"Epoch {epoch+1}, Loss: {loss.numpy()}")

# %% [markdown]
# It runs. Three things are worth saying about what it printed.
#
# 1. **Over 10 steps the loss looks flat, but it can still go down.** Every "epoch" draws
#    *new* random inputs and *new* random labels, so the labels do not depend on the inputs
#    and there is no pattern to learn. There is still something to *fit*: the labels have
#    mean 0 and variance 1, and the freshly initialized layer produces outputs of its own
#    (mean square about 2), so the loss starts near $1 + 2 = 3$. The best the model can do
#    is to shrink its outputs towards the label mean 0, which brings the loss down to the
#    label variance, about 1. At a learning rate of 0.01 that takes hundreds of steps, not
#    ten. The next cell shows it.
# 2. **The numbers are reproducible here.** `loss.numpy()` prints all the digits of a
#    float32. They are the same on every run of this notebook because `gl.setup(seed=0)`
#    seeded TensorFlow (so `tf.random.normal` and the `Dense` initializer draw the same
#    numbers) and turned on deterministic ops. Another CPU could round the last digits
#    differently, so when the notebook is tested only the first four decimals of these
#    losses are compared; elsewhere in the workbook we print rounded numbers.
# 3. **"Epoch" is a misnomer:** each iteration is one step on one batch of 32.
#
# Keep calling the same `train_step` for 600 more steps of fresh random data, and print the
# mean loss of each block of 100 steps. Before and after, the mean square of the model's
# outputs on one fixed batch of inputs: the part of the loss that the model can remove.

# %%
fixed_inputs = tf.random.stateless_normal([256, 784], seed=[3, 0])


def output_power():
    return f"{float(tf.reduce_mean(tf.square(model(fixed_inputs)))):.2f}"


print("before: mean square of the outputs", output_power())  # about 2
block = []
for step_number in range(11, 611):
    block.append(float(train_step(tf.random.normal([32, 784]), tf.random.normal([32, 10]))))
    if step_number % 100 == 10:
        print(f"steps {step_number - 99:3d}-{step_number}: mean loss {np.mean(block):.2f}")
        block = []
print("after:  mean square of the outputs", output_power())  # much smaller

# %% [markdown]
# The loss falls from about 3 towards 1, the variance of the labels, while the outputs
# shrink towards 0. The model has learned nothing about the inputs (there is nothing to
# learn); it has only learned to predict the labels' mean. So the example shows the
# mechanics of a training step, not a model learning a pattern. We fix that below with data
# that has one.
#
# Now look inside: how many times did TensorFlow trace `train_step` into a graph?

# %%
print("traces of train_step:", train_step.experimental_get_tracing_count())  # 2, for 610 calls

# %% [markdown]
# 610 calls, two traces. The second trace is not a retrace caused by the inputs (all the
# batches have the same shape and dtype). On the first call `model` had no weights yet: a
# `Sequential` given no input shape creates its kernel and bias the first time it sees
# data, so they were created *inside* the function. When a `tf.function` creates variables
# on its first call, TensorFlow traces it once to create them and a second time to get a
# graph that only uses them. The optimizer played no part here. Keras creates an
# optimizer's iteration counter and learning rate in its constructor, and plain SGD has no
# other variables. With momentum or Adam it would: their **slots** (one extra variable per
# weight, such as a momentum buffer) are created on the first `apply_gradients`, which
# would then also happen inside the function, unless the optimizer is built first. Build
# the model (and an optimizer with slots) before the first call, and a single trace is
# enough:

# %%
def make_source_step(model, optimizer):
    """The source's train_step body, bound to one model and optimizer, not yet decorated."""
    def train_step(inputs, labels):
        with tf.GradientTape() as tape:
            predictions = model(inputs, training=True)
            loss = tf.reduce_mean(tf.square(labels - predictions))
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
        return loss
    return train_step


# %%
def fresh_model_and_optimizer(seed=0):
    keras.utils.set_random_seed(seed)
    model = tf.keras.Sequential([tf.keras.layers.Dense(10)])
    model.build((None, 784))  # create the weights now, outside any tf.function
    optimizer = tf.keras.optimizers.SGD(learning_rate=0.01)
    optimizer.build(model.trainable_variables)  # and its slots (none for plain SGD, but harmless)
    return model, optimizer


built_step = tf.function(make_source_step(*fresh_model_and_optimizer()))
x32 = tf.random.stateless_normal([32, 784], seed=[1, 0])
y32 = tf.random.stateless_normal([32, 10], seed=[1, 1])
for _ in range(10):
    built_step(x32, y32)
print("traces when built first:", built_step.experimental_get_tracing_count())  # 1

# %% [markdown]
# What each optimizer holds, before and after `build`:

# %%
plain_sgd = keras.optimizers.SGD(learning_rate=0.01)
print("a new SGD's variables:", [v.name for v in plain_sgd.variables])  # made by its constructor
slot_model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(10, kernel_initializer="zeros")])
momentum_sgd = keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
n_new = len(momentum_sgd.variables)
momentum_sgd.build(slot_model.trainable_variables)
print("momentum SGD's variables, new / built:", n_new, len(momentum_sgd.variables))  # 2 / 4: a slot per weight

# %% [markdown]
# ## Time eager, graph and XLA · 注意事项：图编译
#
# The source's note says: the first call of a `tf.function` compiles the graph, which
# "adds a little time", and later calls are faster. Let us measure both halves of that
# claim. `gl.time_step(fn, args)` times the first call on its own, makes a few untimed
# warm-up calls, then reports the median of many timed calls (the *steady state*). We time
# the same step three ways, each on a fresh model:
#
# - **eager**: the plain Python function; every TensorFlow op is dispatched from Python;
# - **tf.function**: traced once into a graph, then the graph runs;
# - **XLA** (`tf.function(..., jit_compile=True)`): XLA ("Accelerated Linear Algebra") is
#   TensorFlow's optimising compiler. It compiles the whole graph into machine code and
#   *fuses* neighbouring ops (a multiply, an add and a square become one loop over the data
#   instead of three). It works on a CPU too.
#
# The times below are this machine's, from the last time the notebook ran. They are not
# compared when the notebook is tested. Re-run the cell and you get your own.

# %%
steps = {
    "eager": make_source_step(*fresh_model_and_optimizer()),
    "tf.function": tf.function(make_source_step(*fresh_model_and_optimizer())),
    "XLA": tf.function(make_source_step(*fresh_model_and_optimizer()), jit_compile=True),
}
print("modes:", list(steps))

# %% tags=["nbval-ignore-output"]
timings = [gl.time_step(fn, (x32, y32), warmup=5, repeats=50, name=name) for name, fn in steps.items()]
print(gl.topics.tracing.format_timings(timings))

# %%
gl.plots.plot_step_times(timings)

# %% [markdown]
# Rather than claim a speed-up, let the cell read the table and say what it shows:

# %% tags=["nbval-ignore-output"]
eager_t, graph_t, xla_t = timings
for t in (graph_t, xla_t):
    ratio = eager_t.steady_s / t.steady_s
    verdict = "faster" if ratio > 1 else "slower"
    print(f"{t.name:12s} steady step: {ratio:.3g}x the speed of eager ({verdict})")
    print(f"{'':12s} first call costs as much as {t.first_s / t.steady_s:.3g} of its steady steps")
    saved = eager_t.steady_s - t.steady_s
    if saved > 0:
        extra = max(t.first_s - eager_t.first_s, 0.0)  # its first call's cost beyond eager's first call
        print(f"{'':12s} it pays back that extra first-call cost after ~{extra / saved:.3g} more steps")

# %% [markdown]
# Where does a graph's advantage come from? In eager mode Python dispatches each op: a
# matmul, an add, a subtraction, a square, a mean, the gradient ops, the update. That
# overhead is roughly fixed per op, so it matters most when the ops themselves are small,
# as in this tiny model with a batch of 32. Give the same step a batch of 4096 and the
# matrix multiplications dominate. Compare the speed-up column of this table with the one
# above:

# %% tags=["nbval-ignore-output"]
x4096 = tf.random.stateless_normal([4096, 784], seed=[2, 0])
y4096 = tf.random.stateless_normal([4096, 10], seed=[2, 1])
steps_big = {
    "eager": make_source_step(*fresh_model_and_optimizer()),
    "tf.function": tf.function(make_source_step(*fresh_model_and_optimizer())),
    "XLA": tf.function(make_source_step(*fresh_model_and_optimizer()), jit_compile=True),
}
timings_big = [gl.time_step(fn, (x4096, y4096), warmup=2, repeats=15, name=name)
               for name, fn in steps_big.items()]
print(gl.topics.tracing.format_timings(timings_big))

# %% [markdown]
# The speed-up shrinks. How far depends on the machine and on what else runs on it: on a
# quiet machine some speed-up is usually left, on a busy one both graph modes can even come
# out slower than eager (below 1×), because timings of large ops are dominated by how much
# of the CPU the step gets. Is the graph making the big matrix multiplication itself faster? Time that one op alone, eagerly and as a
# `tf.function`. A busy machine makes single timings noisy, so the cell alternates the two
# and keeps each one's fastest call:

# %% tags=["nbval-ignore-output"]
w784 = tf.random.stateless_normal([784, 10], seed=[2, 2])
matmul_fns = {"eager": tf.matmul, "tf.function": tf.function(tf.matmul)}
fastest = {name: np.inf for name in matmul_fns}
for _ in range(5):  # alternate the two, so that a busy moment of the machine hits both
    for name, fn in matmul_fns.items():
        timing = gl.time_step(fn, (x4096, w784), warmup=3, repeats=20, name=name)
        fastest[name] = min(fastest[name], timing.times_s.min())
for name, seconds in fastest.items():
    print(f"{name:12s} fastest of 100 calls: {seconds * 1e3:.3g} ms")
print(f"eager / tf.function: {fastest['eager'] / fastest['tf.function']:.2g}")  # about 1 or below: no gain

# %% [markdown]
# The lone matmul is no faster in a graph (a ratio of about 1, or below 1): a graph does not
# make one large op faster. Whatever difference is left at batch 4096, in either direction,
# comes from the rest of the step (Keras's Python work on every layer call, and the ops around
# the large matmuls: the loss, the gradient's smaller ops, the update, each dispatched from
# Python in eager mode) and from the load on the machine.
#
# Two lessons that hold whatever your numbers are:
#
# - the **first call** is a different kind of cost from the steady step. Time them apart,
#   or a benchmark of 10 calls mostly measures tracing (and XLA compiling);
# - the **ratio depends on the work per op**. A graph removes per-op Python overhead; it
#   does not make a large matrix multiplication faster. XLA can additionally fuse
#   element-wise ops, which may or may not pay for its longer compile.

# %% [markdown]
# ## Make tracing visible · 注意事项：调试
#
# The source's second note says: inside a `tf.function` use `tf.print` instead of Python's
# `print`, "because the function runs in graph mode". Let us see what actually happens.
# The function below uses both and is called three times:

# %%
@tf.function
def show_prints(x):
    print("Python print, x =", x)
    tf.print("tf.print,     x =", x)
    return x * 2


for i in range(3):
    show_prints(tf.constant(i))

# %% [markdown]
# Python's `print` ran **once**, during tracing, and it printed a symbolic `Tensor` with a
# shape and a dtype but no value. `tf.print` became an op in the graph, so it runs on
# every call and prints the value. So the note is right, and the reason is more precise
# than "graph mode": Python code in a `tf.function` runs only while TensorFlow traces it.
# That makes `print` a handy *trace detector*, and it is how `gl.TraceCounter` counts:
# it wraps your function in `tf.function` and increments a Python counter inside it.

# %%
def scaled_loss(x, scale):
    return scale * tf.reduce_mean(tf.square(x))


counted = gl.TraceCounter(scaled_loss)
x4 = tf.ones([4])
for scale in [0.1, 0.2, 0.3, 0.1]:  # Python floats
    counted(x4, scale)
print(counted)  # 4 calls, 3 traces: one per new Python value
print("TensorFlow's own count:", gl.tracing_count(counted))  # the same, 3
print("\n".join(counted.log))

# %% [markdown]
# A Python number is part of the trace's *signature*. Each new value is baked into a new
# graph as a constant, so each new value retraces (0.1 came back and reused its graph).
# In a loop over learning rates, or with a slider, that is a trace per value. Pass a
# tensor and one trace serves every value:

# %%
counted = gl.TraceCounter(scaled_loss)
for scale in [0.1, 0.2, 0.3, 0.4]:
    counted(x4, tf.constant(scale))
print(counted)  # 4 calls, 1 trace

# %% [markdown]
# Tensors retrace on a new **shape** or **dtype**. Feeding batches of different sizes (for
# example a smaller last batch) makes new traces:

# %%
counted = gl.TraceCounter(scaled_loss)
for n in [8, 16, 32, 8]:
    counted(tf.ones([n]), tf.constant(1.0))
print(counted)  # 4 calls, 3 traces: one per new shape
print("\n".join(counted.log))

# %% [markdown]
# Two fixes. An `input_signature` declares the shapes once, with `None` for "any size";
# calls that do not fit are an error instead of a silent retrace (shown after the next
# cell). `reduce_retracing=True` lets TensorFlow generalise by itself: after a second
# shape it traces a graph for `[None]`.

# %%
signature = [tf.TensorSpec([None], tf.float32), tf.TensorSpec([], tf.float32)]
with_signature = gl.TraceCounter(scaled_loss, input_signature=signature)
relaxed = gl.TraceCounter(scaled_loss, reduce_retracing=True)
for n in [8, 16, 32, 8]:
    with_signature(tf.ones([n]), tf.constant(1.0))
    relaxed(tf.ones([n]), tf.constant(1.0))
print("input_signature :", with_signature)  # 1 trace
print("reduce_retracing:", relaxed)  # 2 traces: [8], then [None]
print("\n".join(relaxed.log))

# %% [markdown]
# A call that does not fit the signature, a matrix where it declares a vector, is refused
# before anything is traced:

# %%
try:
    with_signature(tf.ones([2, 2]), tf.constant(1.0))
except TypeError as err:
    print(gl.topics.tracing.error_summary(err).split(" Received args")[0])
print("input_signature :", with_signature)  # 5 calls, still 1 trace

# %% [markdown]
# `reduce_retracing` does not help with Python numbers: those are constants in the graph,
# not shapes that can be relaxed.

# %%
relaxed = gl.TraceCounter(scaled_loss, reduce_retracing=True)
for scale in [0.1, 0.2, 0.3]:
    relaxed(x4, scale)
print(relaxed)  # 3 calls, 3 traces

# %% [markdown]
# ## Explore tracing live
#
# The lab below runs one SGD step of a small linear model with the learning rate from the
# slider. Switch **pass as** between *python float* and *tensor*, move the slider, and
# watch the count of traces and the time of each call (red dots are calls that traced).
# In a live notebook it is interactive; a saved copy shows the state below.

# %%
lab = gl.TracingLab(value=0.1, mode="python float")
for lr in [0.2, 0.3, 0.4]:
    lab.value.value = lr  # what a slider move does
print("python float:", lab.summary)  # 4 traces: 0.1, 0.2, 0.3, 0.4
lab.snapshot()  # a picture of this state: every call was a new trace (red)

# %% [markdown]
# Now pass the same values as a tensor:

# %%
lab.mode.value = "tensor"
for lr in [0.5, 0.6, 0.7]:
    lab.value.value = lr
print("tensor      :", lab.summary)  # 1 trace for every value
lab.snapshot()  # only the first call traced

# %% [markdown]
# The lab itself, live (a saved copy shows its current state):

# %%
lab

# %% [markdown]
# ## Avoid the traps
#
# Each trap below is a runnable cell, followed by its fix. They all follow from one fact:
# **Python runs at trace time; the graph runs at call time.**
#
# ### Values frozen at trace time
#
# A Python number that the function reads from outside (a global, an attribute) is read
# while tracing and stored in the graph as a constant. Changing it later changes nothing:

# %%
lr = 0.1
w = tf.Variable(1.0)


@tf.function
def sgd_on_w():
    w.assign_sub(lr * 1.0)  # the gradient is 1.0 here


sgd_on_w()  # traced with lr = 0.1
lr = 0.0  # "stop training"
sgd_on_w()  # no retrace: the graph still subtracts 0.1
print("w:", f"{w.numpy():.3g}")  # 0.8, not 0.9

# %% [markdown]
# Keras optimizers show both sides of this. `optimizer.learning_rate` is stored in a
# variable, so assigning it does take effect in a traced step. `optimizer.clipnorm` is a
# plain Python attribute, read when the step is traced:

# %%
v = keras.Variable([0.0, 0.0])
opt = keras.optimizers.SGD(learning_rate=1.0, clipnorm=100.0)


@tf.function
def step_v():
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(v * tf.constant([3.0, 4.0]))  # gradient (3, 4), norm 5
    grads = tape.gradient(loss, [v])
    opt.apply_gradients(zip(grads, [v], strict=True))


# %%
step_v()
print("after step 1 (clipnorm 100):", v.numpy())  # [-3, -4]
opt.clipnorm = 1.0
step_v()
print("after step 2 (clipnorm 1)  :", v.numpy())  # moved by (3, 4) again: not clipped
opt.learning_rate = 0.5
step_v()
print("after step 3 (lr 0.5)      :", v.numpy())  # moved by (1.5, 2): the new rate is used

# %% [markdown]
# Fixes: keep anything you want to change during training in a `tf.Variable` (and
# `assign` to it), or pass it in as a tensor argument, or build a new `tf.function` after
# the change, which traces afresh:

# %%
step_v = tf.function(step_v.python_function)  # a new function: traces with clipnorm = 1.0
before = v.numpy()
step_v()
print("step norm with a fresh trace:", f"{np.linalg.norm(v.numpy() - before):.3g}")  # 0.5 = lr·1

# %% [markdown]
# ### A global model rebound after tracing
#
# The source's `train_step` reads the global `model`. What if you build a new model
# under the same name?

# %%
model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, kernel_initializer="ones")])


@tf.function
def predict(x):
    return model(x)


ones = tf.ones([1, 2])
print("traced with the first model:", predict(ones).numpy())  # [[2.]]
model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, kernel_initializer="zeros")])
print("new model, called directly :", model(ones).numpy())  # [[0.]]
print("new model, through predict :", predict(ones).numpy())  # still [[2.]]: the old model
print("traces:", predict.experimental_get_tracing_count())  # 1: nothing told it to retrace

# %% [markdown]
# The graph captured the *first* model's variables. Rebinding the name does not retrace.
# A training step would keep training the old model while you evaluate the new one. Fix:
# make one function per model with a factory, as `make_source_step` above does and as
# `gl.make_train_step(model, optimizer)` does below.

# %%
predict = tf.function(lambda x: model(x))  # a fresh function for the current model
print("fresh function:", predict(ones).numpy())  # [[0.]]

# %% [markdown]
# ### A variable or an optimizer created inside the function
#
# `tf.Variable` inside a `tf.function` is allowed only while the first trace runs, and
# every later trace must reuse those variables instead of making new ones. Recall the
# source's `train_step` above: a function that creates variables on its first call is
# traced a **second** time straight away, to get a graph that only uses them. The function
# below creates a new variable each time its Python body runs, so that second trace creates
# another one, and the very first call already fails. (We catch the error and print it
# with `gl.topics.tracing.error_summary`, which keeps the line that matters.)

# %%
@tf.function
def make_and_use(x):
    v = tf.Variable(1.0)  # a new variable every time the body is traced
    return v * x


try:
    make_and_use(tf.constant(2.0))
except ValueError as err:
    print(gl.topics.tracing.error_summary(err))

# %% [markdown]
# An optimizer holds variables too (its iteration count, momentum slots), so creating one
# inside the step fails the same way:

# %%
w2 = tf.Variable(1.0)


@tf.function
def step_with_new_optimizer(x):
    opt = keras.optimizers.SGD(0.1)  # a new optimizer every time the body is traced
    with tf.GradientTape() as tape:
        loss = w2 * x
    opt.apply_gradients([(tape.gradient(loss, w2), w2)])
    return loss


try:
    step_with_new_optimizer(tf.constant(2.0))
except ValueError as err:
    print(gl.topics.tracing.error_summary(err))

# %% [markdown]
# Fix: create models, optimizers and variables **outside** the function, once, and build
# them before the first call (as `fresh_model_and_optimizer` does). Then no trace creates a
# variable, and a step that later meets a new input shape simply retraces with the same
# weights. A Keras layer that is already built does not build again for a new shape: a
# new batch size retraces and reuses the weights, and a shape its weights do not fit is an
# ordinary shape error:

# %%
built_dense = keras.layers.Dense(3, kernel_initializer="ones", name="built_dense")
built_dense.build((None, 4))
dense_fn = tf.function(lambda x: built_dense(x))
print("batch 2, batch 7:", dense_fn(tf.ones([2, 4])).shape, dense_fn(tf.ones([7, 4])).shape)  # (2, 3) (7, 3)
print("traces:", dense_fn.experimental_get_tracing_count(), " weights:", len(built_dense.weights))  # 2, still 2
try:
    dense_fn(tf.ones([2, 5]))  # 5 features, but the kernel is 4 x 3
except ValueError as err:
    print(gl.topics.tracing.error_summary(err))

# %% [markdown]
# ### Python side effects run only while tracing
#
# Appending to a list, incrementing a counter, reading the clock, drawing a NumPy random
# number: these are Python and run once per trace, not once per call.

# %%
calls = []


@tf.function
def logged_square(x):
    calls.append(1)  # a Python side effect
    return x * x


for i in range(5):
    logged_square(tf.constant(float(i)))
print("calls made:", 5, " calls logged:", len(calls))  # 5 vs 1

# %% [markdown]
# Fix: keep per-call bookkeeping outside the function (the loop around it), or make it an
# op (`tf.print`, `variable.assign_add`, a value returned from the function). We used the
# once-per-trace behaviour on purpose in `gl.TraceCounter`.

# %% [markdown]
# ### Numerics checks under tf.function and XLA
#
# Chapter 01 used `tf.debugging.check_numerics` and `assert_all_finite` to stop on NaN or
# inf; `tf.debugging.Assert` stops on any condition you compute. Inside a `tf.function`
# they still work: they are ops, and they raise when the graph runs. Here the gradient of
# `sqrt` at 0 is infinite:

# %%
def sqrt_grad(x):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(tf.sqrt(x))
    return tape.gradient(y, x)


def with_check_numerics(x):
    return tf.debugging.check_numerics(sqrt_grad(x), "gradient of sqrt")


def with_assert_all_finite(x):
    return tf.debugging.assert_all_finite(sqrt_grad(x), "gradient of sqrt")


# %%
def with_assert(x):
    grad = sqrt_grad(x)
    tf.debugging.Assert(tf.reduce_all(tf.math.is_finite(grad)), [grad])
    return grad


zero_and_one = tf.constant([0.0, 1.0])
numerics_checks = (with_check_numerics, with_assert_all_finite, with_assert)
for checked in numerics_checks:
    try:
        tf.function(checked)(zero_and_one)
    except tf.errors.InvalidArgumentError as err:
        print(f"{checked.__name__:24s}", gl.topics.tracing.error_summary(err))

# %% [markdown]
# Now the same three functions with `jit_compile=True`:

# %%
for checked in numerics_checks:
    result = tf.function(checked, jit_compile=True)(zero_and_one)
    print(f"{checked.__name__:24s} XLA result:", result.numpy())  # [inf 0.5], no error

# %% [markdown]
# No error: the infinity went straight through. This is TensorFlow 2.21's behaviour on a
# CPU, and the three checks disappear in two different ways:
#
# - `check_numerics` (which `assert_all_finite` calls) is compiled to nothing, **silently**;
# - `tf.debugging.Assert` is dropped **with a warning** in TensorFlow's C++ log. This
#   notebook does not show it because `gl.setup` sets `TF_CPP_MIN_LOG_LEVEL=2`, which hides
#   C++ log lines below errors.
#
# To see the warning, the next cell runs both in a fresh Python process with
# `TF_CPP_MIN_LOG_LEVEL=0` and prints the lines of its log that mention them (without their
# timestamp prefix):

# %%
probe = """import tensorflow as tf
@tf.function(jit_compile=True)
def with_assert(x):
    tf.debugging.Assert(tf.reduce_all(x > 0), [x])
    return x
@tf.function(jit_compile=True)
def with_check_numerics(x):
    return tf.debugging.check_numerics(tf.sqrt(x), "sqrt")
x = tf.constant([-1.0, 1.0])
print("with Assert, XLA result:", with_assert(x).numpy())
print("with check_numerics, XLA result:", with_check_numerics(x).numpy())
"""

# %%
import os
import subprocess
import sys

from gradlab.progress import Progress

env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0")  # let TensorFlow's C++ log through
with Progress(1, "probe in a fresh Python process") as bar:  # it imports TensorFlow first: seconds
    run = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
    bar.update()
for line in (run.stdout + run.stderr).splitlines():
    if "XLA result" in line or "Assert" in line or "CheckNumerics" in line:
        print(line.split("] ")[-1])  # the log's own words, without time and thread

# %% [markdown]
# The log says `Ignoring Assert operator`; about `check_numerics` it says nothing, and the
# NaN from `sqrt(-1)` comes back. (This notebook runs on a CPU and shows what TF 2.21
# does there; nothing here was measured on a GPU. TensorFlow's source says where a GPU can
# differ. Its XLA kernel for `Assert` (`tensorflow/compiler/tf2xla/kernels/assert_op.cc`)
# ignores the op on every device. Its XLA kernel for `CheckNumerics`
# (`tensorflow/compiler/tf2xla/kernels/check_numerics_op.cc`, as of commit `3c7602c1` of
# tensorflow/tensorflow) builds a runtime check, a `__xla_gpu_assert` call, only when it
# compiles for a GPU, and elsewhere logs "Ignoring CheckNumerics operator ... on non-GPU
# backend". TF 2.21 on this CPU logs no such line, so which path 2.21 takes on a GPU is not
# settled here: run the probe above on your own hardware before you rely on either
# behaviour.)

# %% [markdown]
# This is not only about code that asks for `jit_compile=True`. Keras's `model.compile()`
# defaults to `jit_compile="auto"`, and "auto" turns XLA on when the machine has a GPU (or
# another accelerator), no distribution strategy is active, every layer supports XLA and op
# determinism is off (`_resolve_auto_jit_compile` and `model_supports_jit` in
# `keras/src/trainers/trainer.py`, Keras 3.15). So on a GPU machine a plain `model.fit` runs
# under XLA, and a `check_numerics` inside a layer stops nothing. On this CPU "auto" means no
# XLA. This notebook cannot show XLA in `fit` either, because `gl.setup` turns on op
# determinism, and with it Keras refuses XLA:

# %%
import warnings  # noqa: E402

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    refusing = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    refusing.compile(optimizer="sgd", loss="mse", jit_compile=True)
print("asked for jit_compile=True, got model.jit_compile =", refusing.jit_compile)  # False
print("warning:", [str(w.message) for w in caught])

# %% [markdown]
# So the next cell runs `fit` in a fresh Python process (no `gl.setup`, so no determinism):
# a layer with a `check_numerics` on `log(x)` and an input of 0, once with the default
# `jit_compile="auto"` (here: no XLA, a CPU) and once with XLA, as "auto" would choose on a
# GPU machine:

# %%
fit_probe = """import numpy as np, keras, tensorflow as tf
class CheckedLog(keras.layers.Layer):
    def call(self, inputs):
        return tf.debugging.check_numerics(tf.math.log(inputs), "log in CheckedLog")
x, y = np.array([[1.0], [0.0]], np.float32), np.zeros((2, 1), np.float32)  # log(0) = -inf
for jit in ("auto", True):
    model = keras.Sequential([keras.Input((1,)), CheckedLog(), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", jit_compile=jit)
    try:
        outcome = "fit ran to the end, loss %s" % model.fit(x, y, epochs=1, verbose=0).history["loss"][0]
    except tf.errors.InvalidArgumentError as err:
        outcome = "InvalidArgumentError: " + [l for l in str(err).splitlines() if "CheckedLog" in l][0].strip()
    print("jit_compile=%-5s (model.jit_compile = %-5s): %s" % (jit, model.jit_compile, outcome))
"""
with Progress(1, "probe in a fresh Python process") as bar:
    run = subprocess.run([sys.executable, "-c", fit_probe], capture_output=True, text=True, timeout=300)
    bar.update()
print("\n".join(line for line in run.stdout.splitlines() if line.startswith("jit_compile")))

# %% [markdown]
# Without XLA the check stops `fit` at the first `-inf`; with XLA the same `fit` runs to the
# end and reports an infinite loss. On a GPU machine that is what "auto" gives you.

# %% [markdown]
# A check you rely on under XLA must therefore be part of the computation: compute a boolean
# tensor and act on it, for example skip the update, and return it so the caller can see it.

# %%
def finite_flag(x):
    return tf.reduce_all(tf.math.is_finite(sqrt_grad(x)))


print("finite (graph):", bool(tf.function(finite_flag)(zero_and_one)))  # False
print("finite (XLA)  :", bool(tf.function(finite_flag, jit_compile=True)(zero_and_one)))  # False

# %% [markdown]
# ## Debug with run_functions_eagerly
#
# When a traced function misbehaves, `tf.config.run_functions_eagerly(True)` makes every
# `tf.function` run its Python code on every call: `print` runs each time, `.numpy()`
# works inside, and a debugger can stop on any line. For code made only of TensorFlow ops
# the results are the same as the graph's up to floating-point rounding: a graph may
# combine ops differently, so the last bits can differ, and over many training steps such
# differences can grow (chapter 04's capstone meets one). What changes is the speed, and
# everything that is Python: side effects now run on every call, and values read from
# Python are read afresh each time. Switch it off again afterwards (here in `finally`, so an
# error cannot leave it on):

# %%
@tf.function
def debug_me(x):
    y = x * 2
    print("y inside =", y.numpy())  # .numpy() fails while tracing, works when eager
    return y


tf.config.run_functions_eagerly(True)
try:
    for i in range(2):
        debug_me(tf.constant(i))
finally:
    tf.config.run_functions_eagerly(False)
print("traces while eager:", debug_me.experimental_get_tracing_count())  # 0

# %% [markdown]
# Use it to find a bug, never to benchmark or to train: it gives up every graph
# advantage measured above. That difference in the Python parts is also what makes it a
# test for the trace-time traps above: if a function gives clearly other results eagerly
# than traced, more than rounding in the last digits, the cause is usually Python that ran
# only while tracing (a frozen value, a side effect).

# %% [markdown]
# ## Put it together: a training loop to keep
#
# `gl.make_train_step(model, optimizer, clip=..., check_finite=True)` returns
# a `tf.function` training step with everything from this chapter and chapter 01:
#
# - one trace for all batches of one shape (model and optimizer built beforehand);
# - global-norm clipping (`tf.clip_by_global_norm`, which keeps the update's direction);
# - a non-finite check computed as a tensor, so it also works under `jit_compile=True`: a
#   step with NaN or inf gradients is **skipped** instead of writing NaN into the weights;
# - per-layer gradient norms, returned with the loss.
#
# This time the data has something to learn: $y = x\,w_\text{true} + \text{noise}$.

# %%
def regression_data(n, seed):
    x = tf.random.stateless_normal([n, 20], seed=[seed, 0])
    w_true = tf.random.stateless_normal([20, 1], seed=[99, 0])
    noise = 0.1 * tf.random.stateless_normal([n, 1], seed=[seed, 1])
    return x, x @ w_true + noise


# %%
keras.utils.set_random_seed(0)
net = keras.Sequential([
    keras.Input((20,)),
    keras.layers.Dense(32, activation="relu", name="hidden1"),
    keras.layers.Dense(32, activation="relu", name="hidden2"),
    keras.layers.Dense(1, name="output"),
])
step = gl.make_train_step(net, keras.optimizers.SGD(0.05), clip=5.0)
print("layers:", gl.train.steps.layer_names(net))

# %%
for i in range(60):
    before = [v.numpy().astype(np.float64) for v in net.trainable_variables]
    out = step(*regression_data(64, seed=i))
    if i % 15 == 0 or i == 59:
        moved = np.sqrt(sum(np.sum((v.numpy() - b) ** 2) for v, b in zip(net.trainable_variables, before, strict=True)))
        norms = {k: f"{v.numpy():.3g}" for k, v in out["grad_norms"].items()}
        print(f"step {i:2d} loss {out['loss'].numpy():.3g}  global norm {out['global_norm'].numpy():.3g} "
              f"→ applied {out['clipped_norm'].numpy():.3g}, moved {moved:.3g}  {norms}")
print("traces:", gl.tracing_count(step))  # 1 for 60 steps

# %% [markdown]
# Whenever the raw global norm was above 5, the gradient actually applied was rescaled to a
# global norm of exactly 5, in the same direction, so SGD moved the weights by
# $0.05 \times 5 = 0.25$ (the `moved` column: the length of the change of all weights);
# a gradient whose norm was below 5 passed unchanged, and moved them by 0.05 times its norm. The
# loss still fell: clipping limits the size of a step, not where it goes. Now a batch with
# a NaN in it, the way a corrupt record would arrive:

# %%
weights_before = [v.numpy().copy() for v in net.trainable_variables]
x_bad, y_bad = regression_data(64, seed=1000)
x_bad = tf.tensor_scatter_nd_update(x_bad, [[0, 0]], [np.nan])
out = step(x_bad, y_bad)
unchanged = all(np.array_equal(a, v.numpy()) for a, v in zip(weights_before, net.trainable_variables, strict=True))
print("finite:", bool(out["finite"]), " applied:", bool(out["applied"]))  # False False
print("weights unchanged:", unchanged)  # True
print("traces:", gl.tracing_count(step))  # still 1

# %% [markdown]
# In your own loop, decide what a skipped step means: count them, stop after a few in a
# row, or raise. The flag is returned, so the decision stays in your Python loop.
#
# The same step compiles with XLA. `jit_compile=True` is passed on to `tf.function`; here
# on a copy of `net` with fresh weights, 60 steps and then the same bad batch:

# %%
xla_net = keras.models.clone_model(net)  # the same layers, new weights
xla_step = gl.make_train_step(xla_net, keras.optimizers.SGD(0.05), clip=5.0, jit_compile=True)
for i in range(60):
    out = xla_step(*regression_data(64, seed=i))
print("XLA step 59: loss", f"{out['loss'].numpy():.2g}", " applied norm <= 5:",
      bool(out["clipped_norm"] <= 5.0 + 1e-4))  # the loss fell; True
xla_before = [v.numpy().copy() for v in xla_net.trainable_variables]
out = xla_step(x_bad, y_bad)
print("bad batch: finite", bool(out["finite"]), " applied", bool(out["applied"]), " weights unchanged",
      all(np.array_equal(a, v.numpy()) for a, v in zip(xla_before, xla_net.trainable_variables, strict=True)))
print("traces:", gl.tracing_count(xla_step))  # 1

# %% [markdown]
#
# ### The same step inside `model.fit`
#
# Keras 3 lets a model override `train_step`; `fit` then traces *that* into its training
# function. `gl.GradNormTrainStep` is a **mixin** with the same logic (clipping, skip on
# non-finite, per-layer norms): a class that is not used on its own but listed as an extra
# base class, `class MyModel(gl.GradNormTrainStep, keras.Model)`, to add its `train_step` to
# the model. `gl.GradNormSequential` is a `keras.Sequential` with it. The logs gain `grad_norm`, `grad_norm/<layer>` and `skipped_steps`.

# %%
keras.utils.set_random_seed(0)
fit_net = gl.GradNormSequential(
    [keras.Input((20,)),
     keras.layers.Dense(32, activation="relu", name="hidden1"),
     keras.layers.Dense(32, activation="relu", name="hidden2"),
     keras.layers.Dense(1, name="output")],
    clip=5.0,
)
fit_net.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
x_train, y_train = regression_data(512, seed=7)
norm_logger = gl.GradNormLogger()  # reads grad_norm/<layer> from the logs
history = fit_net.fit(x_train, y_train, epochs=8, batch_size=64, shuffle=False,
                      verbose=0, callbacks=[norm_logger])
print("loss per epoch:", np.round(history.history["loss"], 3))
print("skipped steps :", history.history["skipped_steps"])
print("layers logged :", list(norm_logger.history))

# %%
gl.plots.plot_grad_norm_history(norm_logger.history, steps=norm_logger.steps, xlabel="epoch",
                                title="Per-layer gradient norms, last batch of each epoch")

# %% [markdown]
# ### A callback for any model
#
# For a model you did not write, `gl.GradNormLogger(probe=(x, y))` measures the gradient
# of the compiled loss on a fixed probe batch with its own `GradientTape` (in inference
# mode, `training=False`, so dropout adds no noise), at the end of
# every epoch (or every `every_n` batches with `every="batch"`). Because the batch is
# fixed, the curves show how the model changes, not how batches differ.
#
# Probe at the same point of every epoch. With `shuffle=False` and 8 batches per epoch, a
# probe every 4 batches would alternate between "just trained on the first half of the
# data" and "just trained on the second half", and the curve would zigzag between the two
# for that reason alone. Once per epoch, every point is taken after the same batch:

# %%
keras.utils.set_random_seed(0)
plain = keras.Sequential([
    keras.Input((20,)),
    keras.layers.Dense(32, activation="tanh", name="hidden1"),
    keras.layers.Dense(32, activation="tanh", name="hidden2"),
    keras.layers.Dense(1, name="output"),
])
plain.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
probe = regression_data(128, seed=500)
probe_logger = gl.GradNormLogger(probe=probe)  # every="epoch"

# %%
plain_history = plain.fit(x_train, y_train, epochs=8, batch_size=64, shuffle=False, verbose=0,
                          callbacks=[probe_logger])
print("entries per layer:", {k: len(v) for k, v in probe_logger.history.items()})  # 8 each
print("loss per epoch:", np.round(plain_history.history["loss"], 3))
for layer_name, norms in probe_logger.history.items():
    print(f"{layer_name:8s} probe norms:", np.round(norms, 3))

# %%
gl.plots.plot_grad_norm_history(probe_logger.history, steps=probe_logger.steps, xlabel="epoch",
                                title="Gradient norms on a fixed probe batch, once per epoch")

# %% [markdown]
# One point per epoch, each after the same batch. The curves need not fall with the loss:
# here the output layer's norm shrinks while the first hidden layer's grows. A gradient
# norm says how strongly the loss reacts to a layer's weights, not how well trained the
# model is.

# %% [markdown]
# ## Summary
#
# - `tf.function` traces Python into a graph once per input signature and then runs the
#   graph. Its first call costs extra (more with `jit_compile=True`); what the later calls
#   save depends on how much Python overhead the eager version had. The table in this
#   chapter measures both on your machine; the next cell reprints it.
# - Python code inside a `tf.function` runs only while tracing: `print` shows symbolic
#   tensors once, `tf.print` prints values every call.
# - Python numbers and new shapes retrace. Pass tensors; use `input_signature` or
#   `reduce_retracing` for varying batch sizes. Watch `experimental_get_tracing_count()`.
# - Anything read at trace time is frozen: Python hyperparameters (`optimizer.clipnorm`),
#   a global model rebound later. Use variables, arguments, or a new function per model.
# - Create variables and optimizers outside the step, and build them before the first call.
# - `check_numerics`, `assert_all_finite` and `tf.debugging.Assert` raise inside a graph. Under
#   `jit_compile=True` on a CPU, TF 2.21 drops them: `Assert` with a C++ log warning that
#   `TF_CPP_MIN_LOG_LEVEL=2` hides, `check_numerics` silently. A check that must hold
#   everywhere is a tensor you compute and act on.
# - `tf.config.run_functions_eagerly(True)` is for debugging only.

# %% tags=["nbval-ignore-output"]
print(gl.topics.tracing.format_timings(timings))  # this machine, batch of 32, from the timing section

# %%
print("source train_step, 610 calls:", train_step.experimental_get_tracing_count(), "traces")  # 2
print("built model first, 10 calls:", built_step.experimental_get_tracing_count(), "trace")  # 1
print("gl.make_train_step, 61 calls:", gl.tracing_count(step), "trace")  # 1
print("tracing lab:", lab.summary)  # tensor mode: 1 trace

# %% [markdown]
# ## Exercises
#
# Each exercise has a stub marked `# your code here` and a self-check from
# `gradlab.exercises.ch03`. As shipped, the stubs are empty and the checks say what is
# missing; worked answers are in [Solutions](#Solutions) at the end, collapsed.
#
# **1. Stop the retracing.** `noisy_step` below takes a Python float `scale`, so a sweep
# over 5 values traces it 5 times. Change the call in the *loop* (not the function) so
# that the sweep traces once.

# %%
def noisy_step(x, scale):
    return scale * tf.reduce_mean(x)


sweep = gl.TraceCounter(noisy_step)
for scale in [0.1, 0.2, 0.3, 0.4, 0.5]:
    sweep(tf.ones([3]), scale)  # your code here: change what is passed as scale
print(ch03.check_sweep(sweep))

# %% [markdown]
# **2. Predict the count.** Without running anything new, how many traces does this
# sequence of calls make? (Arguments: a tensor of shape `[2]`, then `[2]` again, then
# `[3]`, then the Python int `1`, then `1` again.)

# %%
predicted = None  # your code here: a whole number

print(ch03.check_prediction(predicted))

# %% [markdown]
# **3. Clip for real.** Write `make_clipped_step(model)`: it returns a training step for
# `model` made with `gl.make_train_step`, plain `keras.optimizers.SGD(learning_rate=0.05)`
# and the global gradient norm clipped to **1.0**. The check does not trust what the step
# reports. It builds fresh copies of a small model, runs your step on a batch whose raw
# gradient norm is far above 1 and on one whose raw norm is below it, and measures how far
# the weights actually move. With SGD the weights move by the learning rate times the
# applied gradient: by $0.05 \times 1.0$ when the gradient is clipped, and by $0.05$ times
# the raw norm when it is not.

# %%
def make_clipped_step(model):
    return None  # your code here


print(ch03.check_clipped_step(make_clipped_step))

# %% [markdown]
# ## Solutions
#
# **1.** Pass `scale` as a tensor. A tensor of the same shape and dtype reuses the trace;
# only its value changes:

# %% tags=["solution"]
sweep = gl.TraceCounter(noisy_step)
for scale in [0.1, 0.2, 0.3, 0.4, 0.5]:
    sweep(tf.ones([3]), tf.constant(scale))
print(ch03.check_sweep(sweep))

# %% [markdown]
# **2.** Three traces: shape `[2]` (the second `[2]` reuses it), shape `[3]`, and the
# Python value `1` (the second `1` reuses it).

# %% tags=["solution"]
print(ch03.check_prediction(3))

# %% [markdown]
# **3.** Pass the threshold to `gl.make_train_step`; it clips with `tf.clip_by_global_norm`:

# %% tags=["solution"]
def make_clipped_step(model):
    return gl.make_train_step(model, keras.optimizers.SGD(learning_rate=0.05), clip=1.0)


print(ch03.check_clipped_step(make_clipped_step))
