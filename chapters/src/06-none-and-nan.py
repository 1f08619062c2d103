# %% [markdown]
# # Where None and NaN gradients come from · 梯度为 None 与 NaN 的根源

# %% [markdown]
# **What you will learn**
#
# - to recognise the messages TensorFlow and Keras print when gradients are missing
#   ("No gradients provided for any variable", "Gradients do not exist for variables",
#   "None values not supported", the `IndexedSlices` memory warning), reproduced here in
#   TF 2.21 / Keras 3, with the cause and the fix of each;
# - which ops cut the path from a variable to the loss (`argmax`, `round`, integer casts,
#   comparisons, `stop_gradient`), and the tape settings and frozen layers that do it on purpose;
# - the NaN traps (`log` and `sqrt` at 0, division, the `tf.where` trap, softmax followed by a
#   log) and the stable forms that avoid them;
# - how to find the op where a NaN is born: `enable_check_numerics`, the Debugger V2 dump,
#   `TerminateOnNaN`, and `gl.inspect_training_step`, which now names the cause;
# - to write your own gradient with `tf.custom_gradient`, and the two ways its signature bites.

# %% [markdown]
# ## Setup

# %%
import gradlab as gl  # noqa: I001  (first: it imports TensorFlow quietly)
import inspect
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf
from gradlab.exercises import ch06
from gradlab.plots.traps import plot_where_trap

gl.setup(seed=0)

x = tf.random.stateless_normal([32, 4], seed=[1, 2])
y = tf.reduce_sum(x, axis=1, keepdims=True) + 0.1 * tf.random.stateless_normal([32, 1], seed=[3, 4])
print("x:", x.shape, " y:", y.shape)  # (32, 4) (32, 1)

# %% [markdown]
# ## Read the messages users see · 常见报错信息
#
# In the public issue trackers of TensorFlow and Keras, many gradient questions are not about
# depth at all: a gradient that is `None`, a loss that turns NaN, a warning about
# `IndexedSlices`, a custom gradient that misbehaves. Each message below comes from a minimal
# model run right here, so what you read is what TF 2.21 and Keras 3 print.
#
# ### "No gradients provided for any variable"
#
# A regression whose targets are whole numbers. Rounding the prediction inside the loss
# looks harmless:

# %%
def rounded_mse(y_true, y_pred):
    return tf.reduce_mean(tf.square(y_true - tf.round(y_pred)))


model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
with tf.GradientTape() as tape:
    loss = rounded_mse(y, model(x))
grads = tape.gradient(loss, model.trainable_variables)
print("loss:", f"{float(loss):.4g}")
print("gradients:", grads)  # all None

# %% [markdown]
# Every gradient is `None`, and the optimizer refuses them all:

# %%
try:
    keras.optimizers.SGD(0.01).apply_gradients(zip(grads, model.trainable_variables))
except ValueError as err:
    print(f"ValueError: {err}")

# %% [markdown]
# **Cause.** `tf.round` has no gradient (it is flat almost everywhere, and TensorFlow gives it
# none), and every path from every weight to the loss goes through it. **Fix.** Round only
# when you *use* the prediction, not in the loss you train on; if the rounding must stay in
# the forward pass, give it a straight-through gradient (the `tf.custom_gradient` section).
#
# `gl.explain_none_gradients(loss_fn, variables)` names the op. It takes the loss as a
# zero-argument function:

# %%
causes = gl.explain_none_gradients(lambda: rounded_mse(y, model(x)), model.trainable_variables)
for i, cause in causes.items():
    print(model.trainable_variables[i].path, "->", cause)

# %% [markdown]
# `gl.inspect_training_step` asks the same question for a whole training step and puts the
# answer in its list of problems:

# %%
report = gl.inspect_training_step(model, x, y, rounded_mse)
for p in report.problems:
    print(f"[{p.kind}] {p}")

# %% [markdown]
# ### "Gradients do not exist for variables … when minimizing the loss"
#
# When *some* gradients are `None`, Keras applies the others and warns. The classic cause is
# a layer built in `__init__` and forgotten in `call`:

# %%
class TwoHeads(keras.Model):
    def __init__(self):
        super().__init__()
        self.body = keras.layers.Dense(8, activation="relu", name="body")
        self.head = keras.layers.Dense(1, name="head")
        self.aux = keras.layers.Dense(1, name="aux")  # meant to be added to the output

    def build(self, input_shape):
        self.body.build(input_shape)
        self.head.build((None, 8))
        self.aux.build((None, 8))

    def call(self, inputs):
        h = self.body(inputs)
        return self.head(h)  # forgot: + self.aux(h)


two = TwoHeads()
two.build((None, 4))
with tf.GradientTape() as tape:
    loss = tf.reduce_mean(tf.square(y - two(x)))
grads = tape.gradient(loss, two.trainable_variables)
aux_before = two.aux.kernel.numpy().copy()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    keras.optimizers.SGD(0.01).apply_gradients(zip(grads, two.trainable_variables))
for w in caught:
    print(f"{w.category.__name__}: {w.message}")
print("aux kernel changed by the step?", not np.array_equal(aux_before, two.aux.kernel.numpy()))  # False

# %% [markdown]
# The hint about `model.compile()` does not apply here: the loss is fine, the model is not.
# The inspector names the cause:

# %%
report = gl.inspect_training_step(two, x, y)
for p in report.problems:
    print(f"[{p.kind}] {p}")

# %% [markdown]
# **Fix.** Use the layer in `call` (exercise 2), or delete it. Training with the warning is
# not harmless: the forgotten layer's weights never change (the last line above), and only
# this warning tells you.
#
# ### "None values not supported"
#
# If your own training step does something with each gradient, a `None` reaches a
# TensorFlow op. Inside a `tf.function` (as in a Keras `train_step` under `fit`, unless
# `run_eagerly=True`) the message is
# "None values not supported"; run eagerly, the same mistake reads differently:

# %%
sgd = keras.optimizers.SGD(0.01)


def clipped_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(y - two(x)))
    grads = tape.gradient(loss, two.trainable_variables)
    grads = [tf.clip_by_norm(g, 1.0) for g in grads]  # a None among them
    sgd.apply_gradients(zip(grads, two.trainable_variables))
    return loss


for label, fn in [("tf.function", tf.function(clipped_step)), ("eager", clipped_step)]:
    try:
        fn(x, y)
    except ValueError as err:
        print(f"{label}: {str(err).strip().splitlines()[-1].strip()}")

# %% [markdown]
# The message does not say which variable; `gl.inspect_training_step(two, x, y)` above does.
# **Fix.** Find out *why* the gradient is `None` and repair that. Skipping the `None`
# pairs (exercise 3) only hides the symptom: the variable still does not train.
#
# ### The `IndexedSlices` warning, and what it costs
#
# The gradient of a lookup (`tf.gather`, a Keras `Embedding`) touches only the rows that were
# looked up, so TensorFlow returns it as `tf.IndexedSlices`: those rows and their indices,
# not a tensor the size of the table.

# %%
embedding = keras.layers.Embedding(50_000, 64)
ids = tf.constant([[3, 17, 3, 42]])
embedding.build(ids.shape)
with tf.GradientTape() as tape:
    loss = tf.reduce_sum(tf.square(embedding(ids)))
g = tape.gradient(loss, embedding.embeddings)
print(type(g).__name__, "values", g.values.shape, "indices", g.indices.numpy(), "dense_shape", g.dense_shape.numpy())
sparse_bytes = g.values.numpy().nbytes + g.indices.numpy().nbytes
dense_bytes = tf.convert_to_tensor(g).numpy().nbytes
print(f"as slices: {sparse_bytes} bytes; as a dense tensor: {dense_bytes / 1e6:.1f} MB")  # 12.8 MB

# %% [markdown]
# A Keras optimizer applies the slices as they are. Plain SGD changes only the rows that
# were looked up:

# %%
table_before = embedding.embeddings.numpy().copy()
keras.optimizers.SGD(0.1).apply_gradients([(g, embedding.embeddings)])
changed = np.flatnonzero(np.any(embedding.embeddings.numpy() != table_before, axis=1))
print("rows changed by the update:", changed)  # [ 3 17 42]

# %% [markdown]
# "Only the rows that were read" holds for plain SGD (and Adagrad), not for every optimizer.
# Momentum and Adam keep a running average per row, and every step moves every row by it: a
# row read in one step keeps moving in the next steps, which do not read it. Weight decay
# (AdamW, or `weight_decay=` on any optimizer) shrinks every row in every step. Two steps
# on a 4-row table, the first reading row 0, the second only row 2, eagerly and in a
# `tf.function`:

# %%
def rows_changed(make_optimizer, compiled: bool):
    rows = tf.Variable(tf.ones((4, 3)))
    optimizer = make_optimizer()

    def step(read):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.gather(rows, read))
        optimizer.apply_gradients([(tape.gradient(loss, rows), rows)])

    step = tf.function(step) if compiled else step
    step(tf.constant([0]))
    before = rows.numpy().copy()
    step(tf.constant([2]))
    return np.flatnonzero(np.any(rows.numpy() != before, axis=1))


for name, make in [("SGD", lambda: keras.optimizers.SGD(0.1)), ("Adagrad", lambda: keras.optimizers.Adagrad(0.1)),
                   ("SGD, momentum=0.9", lambda: keras.optimizers.SGD(0.1, momentum=0.9)),
                   ("Adam", lambda: keras.optimizers.Adam(0.1)), ("AdamW", lambda: keras.optimizers.AdamW(0.1))]:
    print(f"{name:18s} step 2 read row 2 and changed rows: eager {rows_changed(make, False)}, "
          f"tf.function {rows_changed(make, True)}")

# %% [markdown]
# Anything that needs a dense tensor (`tf.convert_to_tensor`, most math ops) turns the slices
# into the full table, here 12.8 MB for four lookups. The warning people quote, "Converting
# sparse IndexedSlices to a dense Tensor of unknown shape. This may consume a large amount of
# memory.", is **no longer in TensorFlow 2.21**: the conversion of a table whose number of
# rows is unknown (`None`) inside a `tf.function` now passes silently. The warning that is
# left fires only while *tracing* a graph, when the dense tensor would have at least 100
# million elements (the threshold in TensorFlow's `indexed_slices.py`). Tracing is enough to
# see both, and allocates nothing:

# %%
@tf.function(input_signature=[tf.TensorSpec([None, 64])])
def dense_gradient_unknown_rows(table):
    with tf.GradientTape() as tape:
        tape.watch(table)
        loss = tf.reduce_sum(tf.square(tf.gather(table, [3, 17, 3, 42])))
    return tf.convert_to_tensor(tape.gradient(loss, table))  # rows: None


@tf.function(input_signature=[tf.TensorSpec([None, 64]), tf.TensorSpec([None], tf.int64)])
def dense_gradient_huge(values, indices):
    return tf.convert_to_tensor(tf.IndexedSlices(values, indices, tf.constant([2_000_000, 64], tf.int64)))


for fn in (dense_gradient_unknown_rows, dense_gradient_huge):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn.get_concrete_function()  # trace only
    print(f"{fn.__name__}:", [f"{w.category.__name__}: {w.message}" for w in caught] or "no warning")

# %% [markdown]
# **Fix.** Keep the gradient sparse until the optimizer applies it (as above), and do not
# turn it into a tensor yourself; when a dense conversion is real and large, the cure is a
# smaller vocabulary or a sampled loss. Exercise 4 does the arithmetic.
#
# ### Retracing warnings
#
# "5 out of the last 5 calls to … triggered tf.function retracing" is not a gradient problem;
# [chapter 03](03-tape-and-function.ipynb) shows what triggers it and how to stop it.

# %% [markdown]
# ## Find the ops that cut the path · 找出切断梯度的运算
#
# A gradient is `None` when no recorded, differentiable path leads from the variable to the
# loss. Some ops have no gradient at all; others have a gradient that is zero almost
# everywhere, which trains nothing either, but silently:

# %%
v = tf.Variable([-1.4, 0.3, 2.6])
ops = {
    "tf.argmax": lambda t: tf.cast(tf.argmax(t), tf.float32),
    "tf.round": tf.round,
    "tf.floor": tf.floor,
    "tf.cast(int32)": lambda t: tf.cast(tf.cast(t, tf.int32), tf.float32),
    "t > 0": lambda t: tf.cast(t > 0, tf.float32),
    "tf.stop_gradient": tf.stop_gradient,
    "tf.sign": tf.sign,
    "tf.nn.relu": tf.nn.relu,
}
for name, op in ops.items():
    with tf.GradientTape() as tape:
        out = tf.reduce_sum(op(v))
    grad = tape.gradient(out, v)
    print(f"{name:17s}", "None" if grad is None else grad.numpy())

# %% [markdown]
# `argmax`, `round`, `floor`, integer casts and comparisons give `None`; `sign` gives zeros
# (and ReLU gives zeros wherever its input is negative, the "dead ReLU" of chapter 01).
#
# **How the inspector finds the op.** Trace the loss into a graph, walk from the variable to
# the loss, and ask `tf.gradients` which tensors on the way the loss's gradient still
# reaches. Here is that done by hand for the rounded model; `gl.explain_none_gradients` does
# the same for every variable whose gradient is `None`:

# %%
concrete = tf.function(lambda: rounded_mse(y, model(x))).get_concrete_function()
graph = concrete.graph
round_op = next(op for op in graph.get_operations() if op.type == "Round")
with graph.as_default():
    before, after = tf.gradients(concrete.outputs[0], [round_op.inputs[0], round_op.outputs[0]])
print("op:", round_op.name)
print("gradient reaches the output of Round:", after is not None)  # True
print("gradient reaches the input of Round: ", before is not None)  # False

# %% [markdown]
# Here is what the inspector says for a model with `argmax` (a classifier whose "loss" is
# its accuracy, a common first attempt) and one with a `stop_gradient`:

# %%
classifier = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="logits")])
labels = tf.cast(tf.reduce_sum(x, axis=1) > 0, tf.int64)


def accuracy_loss():
    predicted = tf.argmax(classifier(x), axis=1)
    return 1.0 - tf.reduce_mean(tf.cast(tf.equal(predicted, labels), tf.float32))


print(gl.explain_none_gradients(accuracy_loss, classifier.trainable_variables)[0])

# %%
frozen_in_loss = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, name="encoder"),
                                   keras.layers.Lambda(tf.stop_gradient, name="detach"), keras.layers.Dense(1)])
report = gl.inspect_training_step(frozen_in_loss, x, y)
for p in report.problems:
    print(f"[{p.kind}] {p}")

# %% [markdown]
# **Fix.** For a classifier, train on the cross-entropy of the logits and compute the
# accuracy only as a metric. `stop_gradient` is often deliberate (a target network, the
# "detach" of a teacher's output); then exclude those variables from the optimizer instead of
# letting them collect `None`.
#
# ### Cut on purpose: the tape and frozen layers
#
# Three more ways to stop a gradient, all deliberate. `tape.stop_recording()` leaves a part
# of the computation off the tape; `watch_accessed_variables=False` records only what you
# `watch`:

# %%
w = tf.Variable(2.0)
with tf.GradientTape() as tape:
    a = w * w
    with tape.stop_recording():
        b = 3.0 * w  # not recorded
    total = a + b
print("with stop_recording:", tape.gradient(total, w).numpy())  # 2w = 4, not 2w + 3 = 7

with tf.GradientTape(watch_accessed_variables=False) as tape:
    total = w * w
print("watch_accessed_variables=False:", tape.gradient(total, w))  # None
with tf.GradientTape(watch_accessed_variables=False) as tape:
    tape.watch(w)
    total = w * w
print("... after tape.watch(w):", tape.gradient(total, w).numpy())  # 4

# %% [markdown]
# A frozen layer (`layer.trainable = False`) leaves `model.trainable_variables`, so it
# gets no gradient and no warning: it simply is not asked. For `BatchNormalization` freezing
# does more: in Keras 3 a frozen BatchNorm layer runs in inference mode even when the model is
# called with `training=True`, so its moving statistics stop updating too. That is what you
# want when fine-tuning a pretrained network on small batches:

# %%
tuned = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.BatchNormalization(name="bn"),
                          keras.layers.Dense(1)])
bn = tuned.get_layer("bn")
print("trainable variables:", len(tuned.trainable_variables))  # 6
bn.trainable = False
print("with bn frozen:", len(tuned.trainable_variables))  # 4: gamma and beta are no longer in the list
shifted = 5.0 * x + 3.0
before = bn.moving_mean.numpy().copy()
h = tuned.layers[0](shifted)
print("frozen bn: training=True gives the inference output?",
      np.allclose(bn(h, training=True), bn(h, training=False)))  # True
tuned(shifted, training=True)
print("frozen bn, training=True: moving mean changed?", not np.allclose(before, bn.moving_mean.numpy()))  # False
bn.trainable = True
tuned(shifted, training=True)
print("trainable bn, training=True: moving mean changed?", not np.allclose(before, bn.moving_mean.numpy()))  # True

# %% [markdown]
# ### When the value leaves TensorFlow
#
# `.numpy()` or any `np.*` function turns a tensor into a NumPy array. The tape cannot
# follow it there, and inside a `tf.function` it fails outright (a traced tensor has no value
# yet). `explain_none_gradients` tells this apart from a layer that is never used:

# %%
numpy_model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, name="hidden"),
                                keras.layers.Dense(1, name="out")])


def numpy_loss():
    h = numpy_model.get_layer("hidden")(x)
    squashed = tf.constant(np.tanh(h.numpy()))  # leaves TensorFlow and comes back
    return tf.reduce_mean(tf.square(y - numpy_model.get_layer("out")(squashed)))


for i, cause in gl.explain_none_gradients(numpy_loss, numpy_model.trainable_variables).items():
    print(numpy_model.trainable_variables[i].path, "->", cause)
try:
    tf.function(numpy_loss)()
except (AttributeError, NotImplementedError) as err:
    print("in tf.function:", str(err).strip().splitlines()[-1].strip())

# %% [markdown]
# **Fix.** Use the TensorFlow op (`tf.tanh`, or `keras.ops.tanh`). An integer variable
# (`tf.Variable(3)`) never gets a gradient either; the cause then says "integer dtype":

# %%
count = tf.Variable(3)
with tf.GradientTape() as tape:
    out = 2.0 * tf.cast(count, tf.float32)
print("gradient:", tape.gradient(out, count))  # None
print(gl.explain_none_gradients(lambda: 2.0 * tf.cast(count, tf.float32), [count])[0])

# %% [markdown]
# ## Avoid the NaN traps · 避开 NaN 陷阱
#
# A NaN gradient with a finite loss usually comes from an op whose derivative is infinite or
# undefined where it is evaluated. The usual suspects, at -1, 0 and 1:

# %%
at = tf.constant([-1.0, 0.0, 1.0])
traps = {
    "tf.sqrt": tf.sqrt,
    "x ** 0.5": lambda t: t ** 0.5,
    "x ** 1.5": lambda t: t ** 1.5,
    "tf.math.log": tf.math.log,
    "1 / x": lambda t: 1.0 / t,
    "x / x": lambda t: t / t,
    "divide_no_nan(x, x)": lambda t: tf.math.divide_no_nan(t, t),
}
for name, fn in traps.items():
    with tf.GradientTape() as tape:
        tape.watch(at)
        out = fn(at)
    print(f"{name:20s} value {str(out.numpy()):16s} gradient {tape.gradient(out, at).numpy()}")
zero = tf.zeros([3])
with tf.GradientTape() as tape:
    tape.watch(zero)
    norm = tf.norm(zero)
print(f"{'tf.norm(zeros)':20s} value {norm.numpy():<16.3g} gradient {tape.gradient(norm, zero).numpy()}")

# %% [markdown]
# `sqrt` and powers below 1 (`x ** 0.5`) are finite at 0 but their derivative is infinite
# (`x ** 1.5` is fine there), and all of them are NaN below 0; `log` is already `-inf` at 0; `tf.norm` of an all-zero vector has a NaN gradient (it is a `sqrt` of
# a sum of squares), which bites in distance and normalisation code. `divide_no_nan` is the
# safe division.
#
# ### The `tf.where` trap, and the double where
#
# `tf.where` looks like the fix: take the square root only where `x > 0`. The loss is finite,
# yet the gradient is NaN, eagerly and in a graph alike:

# %%
xs = tf.constant([-4.0, 0.0, 4.0])


def where_sqrt(t):
    return tf.where(t > 0, t ** 0.5, 0.0)


for label, fn in [("eager", where_sqrt), ("tf.function", tf.function(where_sqrt))]:
    with tf.GradientTape() as tape:
        tape.watch(xs)
        out = tf.reduce_sum(fn(xs))
    print(f"{label:12s} loss {float(out):.4g}  gradient {tape.gradient(out, xs).numpy()}")  # [nan nan 0.25]

# %% [markdown]
# Both branches are computed for every element. The backward pass sends 0 into the branch
# that was not selected and multiplies it by that branch's derivative: at -4 that is
# 0 × NaN, at 0 it is 0 × inf, and both are NaN. The cure is to make the *input* safe before
# the op, with a second `where`:

# %%
def double_where_sqrt(t):
    safe = tf.where(t > 0, t, 1.0)  # any value where the sqrt is finite and smooth
    return tf.where(t > 0, safe ** 0.5, 0.0)


with tf.GradientTape() as tape:
    tape.watch(xs)
    out = tf.reduce_sum(double_where_sqrt(xs))
print(f"double where: loss {float(out):.4g}  gradient {tape.gradient(out, xs).numpy()}")  # [0 0 0.25]

# %% [markdown]
# Which ops fall into the trap? The same `where` around different ops, at -4, 0 and 4,
# eagerly, in a `tf.function`, and compiled with XLA (`jit_compile=True`):

# %%
where_ops = {"x ** 0.5": lambda t: t ** 0.5, "tf.math.log(x)": tf.math.log, "1 / x": lambda t: 1.0 / t,
             "tf.sqrt(x)": tf.sqrt, "tf.math.rsqrt(x)": tf.math.rsqrt, "tf.math.reciprocal(x)": tf.math.reciprocal}


def where_gradient(op):
    def gradient(t):
        with tf.GradientTape() as tape:
            tape.watch(t)
            out = tf.reduce_sum(tf.where(t > 0, op(t), 0.0))
        return tape.gradient(out, t)

    return gradient


print(f"{'tf.where(x > 0, f, 0) with f =':30s} {'eager':22s} {'tf.function':22s} {'jit_compile=True':22s}")
for name, op in where_ops.items():
    gradient = where_gradient(op)
    cells = [gradient(xs), tf.function(gradient)(xs), tf.function(gradient, jit_compile=True)(xs)]
    print(f"{name:30s} " + " ".join(f"{np.array2string(g.numpy(), precision=3):22s}" for g in cells))

# %% [markdown]
# `Pow` (`x ** 0.5`) has the trap everywhere, `Log` and division at 0 (at -4 their
# derivatives, $1/x$ and $-1/x^2$, are finite, and $0 \times$ finite is 0). `tf.sqrt`,
# `tf.math.rsqrt` and `tf.math.reciprocal` look safe eagerly and in a `tf.function`:
# TensorFlow's own kernels for their gradients (`SqrtGrad`, `RsqrtGrad`, `ReciprocalGrad`)
# return 0 where the incoming gradient is 0. Under XLA the same gradient ops compute the plain
# formula and the trap is back: `[nan nan 0.25]` for `tf.sqrt`. So the textbook example
# written with `tf.sqrt` hides the trap in eager code and shows it as soon as the step is
# compiled. The gradient op itself, fed the unselected branch's values ($\sqrt{-4}$ = NaN,
# $\sqrt{0} = 0$) and an incoming gradient of 0:

# %%
def sqrt_grad_op(y, dy):
    return tf.raw_ops.SqrtGrad(y=y, dy=dy)  # what the tape runs for tf.sqrt: dy * 0.5 / y


y_values, upstream = tf.constant([np.nan, 0.0, 2.0]), tf.constant([0.0, 0.0, 1.0])
print("SqrtGrad, TensorFlow kernel:", sqrt_grad_op(y_values, upstream).numpy())  # [0 0 0.25]
print("SqrtGrad, XLA              :", tf.function(sqrt_grad_op, jit_compile=True)(y_values, upstream).numpy())

# %% [markdown]
# That matters beyond `jit_compile=True` in your own code: Keras's `compile()` defaults to
# `jit_compile="auto"`, which turns XLA **on** when the machine has a GPU (or another
# accelerator), no distribution strategy is active, every layer supports XLA and op
# determinism is off. On this CPU-only machine it resolves to `False`; the rule, printed from
# the installed Keras:

# %%
auto_model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
auto_model.compile(optimizer="sgd", loss="mse")
print("jit_compile after compile() on this machine:", auto_model.jit_compile)  # False: CPU only
source, first_line = inspect.getsourcelines(keras.Model._resolve_auto_jit_compile)
path = inspect.getsourcefile(keras.Model._resolve_auto_jit_compile)
print(f"{path[path.index('keras/'):]}, lines {first_line}-{first_line + len(source) - 1}:")
for number, line in enumerate(source, first_line):
    if any(word in line for word in ("devices", "CPU", "distribute", "model_supports_jit(")):
        print(f"{number:6d}  {line.strip()}")
supports_jit = inspect.getmodule(keras.Model._resolve_auto_jit_compile).model_supports_jit
source, first_line = inspect.getsourcelines(supports_jit)
for number, line in enumerate(source, first_line):
    if "determinism" in line.lower() and "import" not in line or "supports_jit for" in line:
        print(f"{number:6d}  {line.strip()}")

# %% [markdown]
# (`model_supports_jit` returns `False` when op determinism is on, as `gl.setup` turns it on
# for the workbook, or when a layer does not support XLA.) The double where is safe in every
# mode. The picture: the value is the same finite curve whichever way it is written, while
# the gradient of the single `where` is NaN on the whole half-line $x \le 0$:

# %%
grid = tf.constant(np.linspace(-1.0, 1.0, 81), tf.float32)
trap_gradients = {
    "tf.where(x > 0, x ** 0.5, 0)": where_gradient(lambda t: t ** 0.5)(grid).numpy(),
    "tf.where(x > 0, tf.sqrt(x), 0)\njit_compile=True":
        tf.function(where_gradient(tf.sqrt), jit_compile=True)(grid).numpy(),
}
with tf.GradientTape() as tape:
    tape.watch(grid)
    out = tf.reduce_sum(double_where_sqrt(grid))
trap_gradients["double where"] = tape.gradient(out, grid).numpy()
plot_where_trap(grid.numpy(), double_where_sqrt(grid).numpy(), trap_gradients, value_label="√x for x > 0, else 0")

# %% [markdown]
# `gl.find_nonfinite_source(loss_fn, variables)` says where the NaN is born and which fix
# fits; `inspect_training_step` includes it in its problems. A layer that takes the square
# root of its positive inputs, with the trap:

# %%
class RootLayer(keras.layers.Layer):
    def call(self, inputs):
        return tf.where(inputs > 0, inputs ** 0.5, 0.0)


where_model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, name="dense_in"), RootLayer(name="root"),
                                keras.layers.Dense(1, name="dense_out")])
report = gl.inspect_training_step(where_model, x, y)
print("loss:", f"{report.loss:.4g}")
for p in report.problems:
    print(f"[{p.kind}] {p}")

# %% [markdown]
# ### Log of a softmax, and the stable forms
#
# A softmax of large logits rounds the small probabilities to exactly 0 in float32, and the
# log of 0 is `-inf`. Five ways to write the same cross-entropy for logits `[0, 200]` and the
# label "class 0":

# %%
logits = tf.constant([[0.0, 200.0]])
onehot = tf.constant([[1.0, 0.0]])
losses = {
    "-log(softmax(z))": lambda z: -tf.reduce_sum(onehot * tf.math.log(tf.nn.softmax(z))),
    "keras CE of tf.nn.softmax(z)": lambda z: keras.losses.categorical_crossentropy(onehot, tf.nn.softmax(z))[0],
    "keras CE of keras.ops.softmax(z)":
        lambda z: keras.losses.categorical_crossentropy(onehot, keras.ops.softmax(z))[0],
    "keras CE, from_logits=True": lambda z: keras.losses.categorical_crossentropy(onehot, z, from_logits=True)[0],
    "tf.nn.softmax_cross_entropy_with_logits": lambda z: tf.nn.softmax_cross_entropy_with_logits(onehot, z)[0],
}


def loss_and_gradient(fn):
    def run(z):
        with tf.GradientTape() as tape:
            tape.watch(z)
            out = fn(z)
        return out, tape.gradient(out, z)

    return run


for name, fn in losses.items():
    for mode, run in (("eager", loss_and_gradient(fn)), ("tf.function", tf.function(loss_and_gradient(fn)))):
        out, grad = run(logits)
        print(f"{gl.i18n.pad(name, 40)} {mode:12s} loss {float(out):8.4g}  gradient {grad.numpy()}")

# %% [markdown]
# The hand-written version is `inf` with NaN gradients, in both modes. Keras's loss on
# probabilities made by `tf.nn.softmax` gives two different answers. Eagerly it clips the
# probabilities to `[1e-7, 1 - 1e-7]`: the loss stays finite but is stuck at 16.1 and the
# gradient is exactly 0, so the model cannot learn its way out. Inside a `tf.function`, and
# so in `fit` (unless `run_eagerly=True`), Keras's TensorFlow backend looks at the op that produced the
# probabilities; when it is a `Softmax`, it takes that op's input, the logits, and computes
# the stable loss: 200, gradient `[-1, 1]`. `keras.ops.softmax` (and a layer with
# `activation="softmax"`) attaches its logits to the output tensor, so Keras finds them in
# both modes. The rescue lives in `_get_logits` of the installed Keras:

# %%
nn_source = Path(keras.__file__).parent / "src" / "backend" / "tensorflow" / "nn.py"  # read as text
lines = nn_source.read_text().splitlines()
start = next(i for i, line in enumerate(lines) if line.startswith("def _get_logits("))
end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("def "))
print(f"keras/src/backend/tensorflow/nn.py, lines {start + 1}-{end}:")
for number in range(start, end):
    if any(word in lines[number] for word in ("_keras_logits", "op.type == op_type", "op.inputs[0]")):
        print(f"{number + 1:6d}  {lines[number].strip()}")

# %% [markdown]
# Do not rely on it: anything between the softmax and the loss (a `tf.identity`, a clip, a
# cast, a probability computed by hand) hides the `Softmax` op, and the loss is stuck at 16.1
# again, also inside `tf.function`:

# %%
hidden = lambda z: keras.losses.categorical_crossentropy(onehot, tf.identity(tf.nn.softmax(z)))[0]  # noqa: E731
out, grad = tf.function(loss_and_gradient(hidden))(logits)
print(f"keras CE of tf.identity(softmax(z)), tf.function: loss {float(out):.4g}  gradient {grad.numpy()}")

# %% [markdown]
# Only the versions that receive the logits, `from_logits=True` or
# `tf.nn.softmax_cross_entropy_with_logits`, compute `log_softmax` stably whatever surrounds
# them, and get the true loss, 200, and the true gradient. The same holds for the other stable
# forms:

# %%
big = tf.constant([100.0, 101.0, 102.0])
print("log(sum(exp(a))):", tf.math.log(tf.reduce_sum(tf.exp(big))).numpy(),
      " reduce_logsumexp:", f"{tf.reduce_logsumexp(big).numpy():.6g}")  # inf vs 102.4
print("log(1 + 1e-8):", tf.math.log(1.0 + tf.constant(1e-8)).numpy(),
      " log1p(1e-8):", tf.math.log1p(tf.constant(1e-8)).numpy())  # 0 vs 1e-08
print("log(1 + exp(100)):", tf.math.log(1.0 + tf.exp(tf.constant(100.0))).numpy(),
      " softplus(100):", tf.math.softplus(tf.constant(100.0)).numpy())  # inf vs 100

# %% [markdown]
# ## Find the op that made the NaN · 找出产生 NaN 的运算
#
# ### `tf.debugging.enable_check_numerics`
#
# After this call every op checks its output, eager ops and ops in `tf.function`s traced
# afterwards, and the first NaN or inf raises an error that names the op. A function with
# `jit_compile=True` does not run at all while it is on, even on finite inputs: TF 2.21
# raises `InvalidArgumentError: Detected unsupported operations when trying to compile
# graph ... DebugNumericSummaryV2`, the op the check inserts, which XLA cannot compile. Turn
# it off again: it slows everything down.

# %%
xs_var = tf.Variable([-4.0, 0.0, 4.0])
tf.debugging.enable_check_numerics()
try:
    with tf.GradientTape() as tape:
        out = tf.reduce_sum(where_sqrt(xs_var))
    tape.gradient(out, xs_var)
except tf.errors.InvalidArgumentError as err:
    for line in str(err).splitlines():
        if "!!!" in line or "# of" in line:
            print(line.strip())
finally:
    tf.debugging.disable_check_numerics()

# %% [markdown]
# It stops at the `Pow` in the forward pass, the unselected branch, before the loss is even
# computed: the NaN exists there even though the loss never uses it. `gl.find_nonfinite_source`
# runs exactly this, and tells the forward from the backward pass. For `sqrt(x²)` at 0 the
# forward pass is finite; the first non-finite value is an inf born in the gradient of `Sqrt`,
# and it turns into NaN when the chain rule multiplies it by the derivative of `x²`, 2x = 0:

# %%
print(gl.find_nonfinite_source(lambda: tf.reduce_sum(tf.sqrt(xs_var * xs_var)), [xs_var]))
with tf.GradientTape() as tape:
    out = tf.reduce_sum(tf.sqrt(xs_var * xs_var))
print("gradient of sum(sqrt(x²)) at [-4, 0, 4]:", tape.gradient(out, xs_var).numpy())  # [-1 nan 1]

# %% [markdown]
# ### Debugger V2: a dump to look at in TensorBoard
#
# `tf.debugging.experimental.enable_dump_debug_info(folder)` records, instead of raising,
# every eagerly executed op and function call, the graphs, the source files and stack traces,
# and a summary of every tensor computed inside a traced graph. What it can summarise depends
# on where the tape is. In `fit` (and in `gl.make_train_step`) the tape sits *inside* the
# `tf.function`, so the backward ops are part of the traced graph too. We write two dumps to
# temporary folders, one with the tape outside the function and one with it inside:

# %%
def dump(run, prefix):
    folder = tempfile.mkdtemp(prefix=prefix)
    tf.debugging.experimental.enable_dump_debug_info(folder, tensor_debug_mode="CONCISE_HEALTH",
                                                     circular_buffer_size=-1)
    run()
    tf.debugging.experimental.disable_dump_debug_info()
    return folder


def tape_outside():
    with tf.GradientTape() as tape:
        out = tf.function(lambda: tf.reduce_sum(where_sqrt(xs_var)))()
    tape.gradient(out, xs_var)


@tf.function
def tape_inside():  # as in fit: forward and backward in one graph
    with tf.GradientTape() as tape:
        out = tf.reduce_sum(where_sqrt(xs_var))
    return tape.gradient(out, xs_var)


dumps = {"outside": dump(tape_outside, "gradlab-dbg-out-"), "inside": dump(tape_inside, "gradlab-dbg-in-")}  # where the tape is
print(sorted(name.rsplit(".", 1)[-1] for name in os.listdir(dumps["inside"])))

# %% [markdown]
# To browse a dump, run `tensorboard --logdir <folder>` and open the **Debugger V2** tab: it
# lists the alerts (the first NaN or inf and the op that produced it), the graphs, and the
# line of your source that created each op. With `CONCISE_HEALTH` each traced tensor gets a
# record of its element count and its -inf, +inf and NaN counts; `FULL_HEALTH` records more,
# `NO_TENSOR` only which ops ran. The optional [appendix](#Appendix:-read-a-Debugger-V2-dump-by-hand-·-附录：手动读取调试转储)
# reads these two dumps without TensorBoard: with the tape outside the function only the 8
# forward ops have records (the `Pow` with 1 NaN); with the tape inside, the backward ops
# `gradient_tape/pow/...` have records too, and their NaNs show how the gradient became NaN.

# %% [markdown]
# ### `keras.callbacks.TerminateOnNaN`
#
# In `model.fit`, this callback stops training at the first batch whose loss is NaN or inf,
# so you do not train for hours on NaN. A learning rate far too large for unscaled targets:

# %%
x_np = np.random.default_rng(0).normal(size=(64, 3)).astype("float32")
y_np = 1000.0 * x_np.sum(axis=1, keepdims=True)
diverging = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
diverging.compile(optimizer=keras.optimizers.SGD(10.0), loss="mse")
history = diverging.fit(x_np, y_np, epochs=10, batch_size=16, verbose=0,
                        callbacks=[keras.callbacks.TerminateOnNaN()])
print("epochs run:", len(history.history["loss"]), "of 10; losses:",
      [f"{v:.3g}" for v in history.history["loss"]])

# %% [markdown]
# It printed `Batch 0: Invalid loss, terminating training` in the fourth epoch and stopped.
# It tells you *when*, not *where*: for that, use the tools above.

# %% [markdown]
# ## Write your own gradient with `tf.custom_gradient` · 自定义梯度
#
# `@tf.custom_gradient` wraps a function that returns its output *and* a function `grad(dy)`
# that returns the gradient with respect to each input, given the upstream gradient `dy`.
#
# ### A straight-through estimator for `round` and `sign`
#
# Keep the rounding in the forward pass and pretend it is the identity in the backward pass.
# Quantization-aware training and binary networks rely on this:

# %%
@tf.custom_gradient
def sign_ste(t):
    def grad(dy):
        return dy * tf.cast(tf.abs(t) <= 1.0, dy.dtype)  # pass through, but only inside [-1, 1]

    return tf.sign(t), grad


t = tf.constant([-2.0, -0.5, 0.3, 1.5])
with tf.GradientTape() as tape:
    tape.watch(t)
    out = tf.reduce_sum(sign_ste(t) * [1.0, 2.0, 3.0, 4.0])
print("sign:", sign_ste(t).numpy(), " gradient:", tape.gradient(out, t).numpy())  # [0 2 3 0]

# %% [markdown]
# The clipped version (the gradient is zeroed outside `[-1, 1]`) is a common choice for
# `sign`; exercise 1 writes the plain one for `round`.
#
# ### A stable backward pass, and a clipped one
#
# TensorFlow's own example is `log(1 + eˣ)`, whose naive gradient `eˣ / (1 + eˣ)` is
# evaluated by the tape as `1 / (1 + eˣ) · eˣ` = `0 · inf` = NaN once `eˣ` overflows (x = 100). A
# custom gradient can use the stable form `1 - 1 / (1 + eˣ)`:

# %%
@tf.custom_gradient
def log1pexp(t):
    e = tf.exp(t)

    def grad(dy):
        return dy * (1.0 - 1.0 / (1.0 + e))

    return tf.math.log(1.0 + e), grad


big_x = tf.constant([0.0, 10.0, 100.0])
for name, fn in [("naive", lambda t: tf.math.log(1.0 + tf.exp(t))), ("custom gradient", log1pexp),
                 ("tf.math.softplus", tf.math.softplus)]:
    with tf.GradientTape() as tape:
        tape.watch(big_x)
        out = fn(big_x)
    print(f"{gl.i18n.pad(name, 17)} value {str(out.numpy()):28s} gradient {tape.gradient(out, big_x).numpy()}")

# %% [markdown]
# The custom gradient fixes the gradient, but the *value* at 100 is still `inf`: `exp(100)`
# overflows float32 in the forward pass, which the custom gradient does not touch. In
# practice, use `tf.math.softplus`, which is stable both ways. A custom gradient can also
# clip what flows backwards through one spot of the network, without touching the forward
# pass:

# %%
@tf.custom_gradient
def clip_backward(t):
    def grad(dy):
        return tf.clip_by_norm(dy, 1.0)

    return tf.identity(t), grad


with tf.GradientTape() as tape:
    tape.watch(big_x)
    out = tf.reduce_sum(100.0 * clip_backward(big_x))
print("gradient clipped to norm 1:", tape.gradient(out, big_x).numpy())  # [0.5774 0.5774 0.5774]

# %% [markdown]
# ### Functions that use variables: `grad(dy, variables=None)`
#
# If the wrapped function reads a `tf.Variable`, `grad` must accept a keyword argument
# `variables` and return two things: the gradients for the inputs and a list with one
# gradient per variable. Forget it and TensorFlow says so when the function runs:

# %%
scale = tf.Variable(2.0)


@tf.custom_gradient
def scaled(t):
    def grad(dy, variables=None):
        return dy * scale, [tf.reduce_sum(dy * t)]  # d/dt, then d/dscale

    return t * scale, grad


@tf.custom_gradient
def scaled_no_variables(t):
    def grad(dy):
        return dy * scale

    return t * scale, grad


with tf.GradientTape() as tape:
    tape.watch(t)
    out = tf.reduce_sum(scaled(t))
d_t, d_scale = tape.gradient(out, [t, scale])
print("d/dt:", d_t.numpy(), " d/dscale:", f"{float(d_scale):.4g}")  # [2 2 2 2], sum(t) = -0.7
try:
    scaled_no_variables(t)
except TypeError as err:
    print(f"TypeError: {str(err).split(': [')[0]}")

# %% [markdown]
# ### The keyword-argument pitfall
#
# It has been reported that a custom gradient is silently skipped when the function is
# called with keyword arguments. Checked on TF 2.21: true eagerly, an error in a graph.
# A function whose custom gradient is a recognisable 42:

# %%
@tf.custom_gradient
def marked(t, factor=1.0):
    def grad(dy):
        return tf.fill(tf.shape(dy), 42.0)

    return t * factor, grad


calls = {"marked(t)": lambda: marked(t), "marked(t, factor=2.0)": lambda: marked(t, factor=2.0),
         "marked(t=t)": lambda: marked(t=t)}
for label, call in calls.items():
    for mode, fn in [("eager", call), ("tf.function", tf.function(call))]:
        try:
            with tf.GradientTape() as tape:
                tape.watch(t)
                out = tf.reduce_sum(fn())
            print(f"{label:22s} {mode:12s} gradient {tape.gradient(out, t).numpy()}")
        except ValueError as err:
            last = str(err).strip().splitlines()[-1].strip().removeprefix("ValueError: ")
            print(f"{label:22s} {mode:12s} ValueError: {last}")

# %% [markdown]
# Passing the *tensor* by keyword (`marked(t=t)`) eagerly gives the plain gradient of
# `t * factor`, 1, not 42: eagerly, TensorFlow records only the positional arguments (and the
# variables) as the inputs of the custom gradient, so nothing connects `t` to `grad`, and the
# gradient flows through the ops inside as if there were no custom gradient. Inside
# `tf.function` any keyword argument, even the Python float `factor`, raises "The
# custom_gradient decorator currently supports keywords arguments only when eager execution
# is enabled." **Rule:** pass tensors to a custom-gradient function positionally.

# %% [markdown]
# ## Summary · 总结
#
# | Message or trap | What this chapter showed | Fix |
# |---|---|---|
# | "No gradients provided for any variable." | `tf.round` in the loss: every gradient `None`, `apply_gradients` raises `ValueError`. | Round only outside the loss, or a straight-through gradient. |
# | "Gradients do not exist for variables [...] when minimizing the loss." | A layer built but not used in `call`: a `UserWarning`, the others train. | Use the layer (or delete it). |
# | "None values not supported." | A `None` gradient reaching `tf.clip_by_norm` inside `tf.function`; eagerly "Attempt to convert a value (None)...". | Repair the cause of the `None`; skipping pairs hides it. |
# | `IndexedSlices` to dense | 4 lookups: 1 KB of slices against a 12.8 MB dense gradient. TF 2.21 no longer warns for an unknown shape, only at ≥ 1e8 elements while tracing. Plain SGD updates only the rows read; momentum and Adam also move rows read earlier, weight decay every row. | Keep the gradient sparse until the optimizer. |
# | Ops that cut the path | `argmax`, `round`, `floor`, integer casts, comparisons: `None`; `sign`: zeros; `stop_gradient`, `stop_recording`, `watch_accessed_variables=False`, frozen layers (frozen BatchNorm also stops its statistics). | Train on a differentiable surrogate (logits, cross-entropy). |
# | NumPy round-trip | `.numpy()`/`np.*` in the forward pass: `None` eagerly, an error in `tf.function`. | Use `tf.*` or `keras.ops.*`. |
# | `sqrt`, `x ** 0.5`, `log`, `1/x`, `tf.norm` at 0 | Infinite or NaN derivatives at 0. | An epsilon, `divide_no_nan`, or the double where. |
# | The `tf.where` trap | `tf.where(x > 0, x ** 0.5, 0.)`: finite loss, NaN gradient at -4 and 0, eager and graph; `log` and `1/x` at 0; `tf.sqrt`, `rsqrt`, `reciprocal` only under XLA (`jit_compile=True`, and Keras's `compile()` default on a GPU machine). | The double where. |
# | Log of a softmax | `inf` and NaN gradients; Keras on `tf.nn.softmax` probabilities: 16.1 with a zero gradient eagerly, the stable 200 and `[-1, 1]` inside `tf.function` (Keras finds the `Softmax` op), stuck again if anything sits between. | `from_logits=True`, `softplus`, `log1p`, `reduce_logsumexp`. |
# | Finding the op | `enable_check_numerics` names the `Pow`; Debugger V2 records NaN counts for TensorBoard (the backward ops only when the tape is inside the `tf.function`, as in `fit`); `TerminateOnNaN` stops `fit`. | `gl.find_nonfinite_source`, `gl.inspect_training_step`. |
# | `tf.custom_gradient` | Straight-through `sign`, stable and clipped backward passes; `grad(dy, variables=None)` is required with variables; keyword arguments skip the custom gradient eagerly and raise in a graph. | Pass tensors positionally. |

# %% [markdown]
# ## Appendix: read a Debugger V2 dump by hand · 附录：手动读取调试转储
#
# Optional: TensorBoard reads the dump for you; this is what it reads. Each file of the dump folder is
# a stream of `DebugEvent` protocol buffers (records of a TFRecord file). With
# `CONCISE_HEALTH`, the record of each traced tensor is `[tensor id, elements, -inf count,
# +inf count, NaN count]`. The two dumps made in the Debugger V2 section hold one row per
# traced tensor; the cell counts them and prints only the rows with a non-finite count and
# those of `pow` and `SelectV2`:

# %%
from tensorflow.core.protobuf import debug_event_pb2  # noqa: E402


def health_rows(folder):
    traces = next(name for name in os.listdir(folder) if name.endswith(".graph_execution_traces"))
    rows = []
    for record in tf.data.TFRecordDataset(os.path.join(folder, traces)):
        trace = debug_event_pb2.DebugEvent.FromString(record.numpy()).graph_execution_trace
        health = tf.make_ndarray(trace.tensor_proto)
        rows.append((trace.op_name, *(int(v) for v in health[1:5])))
    return rows


dump_labels = {"outside": "tape outside", "inside": "tape inside"}
for where, folder in dumps.items():
    rows = health_rows(folder)
    print(f"{dump_labels[where]}: {len(rows)} rows")
    for op_name, elements, minus_inf, plus_inf, nan in rows:
        if minus_inf or plus_inf or nan or op_name in ("pow", "SelectV2"):
            print(f"    {op_name:26s} elements {elements}  -inf {minus_inf}  +inf {plus_inf}  NaN {nan}")

# %% [markdown]
# With the tape outside, the backward function that `tape.gradient` ran appears in the
# `execution` file as one call, but its tensors get no rows: the dump shows where the forward
# NaN is born, not how the gradient became NaN. With the tape inside, the `Pow` of the
# backward pass (`gradient_tape/pow/Pow`, $x^{-0.5}$: +inf at 0, NaN at -4) and the multiply
# after it carry the NaNs into the gradient. We delete the folders:

# %%
for folder in dumps.values():
    shutil.rmtree(folder)
print("removed:", not any(os.path.exists(folder) for folder in dumps.values()))  # True

# %% [markdown]
# ## Exercises
#
# Each exercise has a stub marked `# your code here` and a self-check. As shipped, the stubs
# are empty and the checks say what is missing; worked answers are in
# [Solutions](#Solutions) at the end.
#
# **1. A straight-through `round`.** Write `round_ste(t)` with `@tf.custom_gradient`: the
# forward pass is `tf.round(t)`, the backward pass returns `dy` unchanged. (This is the fix
# for "No gradients provided for any variable" when the rounding must stay.)

# %%
def round_ste(t):
    return tf.round(t)  # your code here


print(ch06.check_round_ste(round_ste))

# %% [markdown]
# **2. Use every layer.** `TwoHeadsFixed` is `TwoHeads` from the start of the chapter. Change
# its `call` so that the output is `head(h) + aux(h)`; the check wants a gradient for every
# variable, and all three layers still there.

# %%
class TwoHeadsFixed(TwoHeads):
    def call(self, inputs):
        h = self.body(inputs)
        return self.head(h)  # your code here


fixed = TwoHeadsFixed()
fixed.build((None, 4))
print(ch06.check_uses_every_layer(fixed, x))

# %% [markdown]
# **3. Skip the `None` pairs.** Write `drop_none(grads, variables)` that returns the list of
# `(gradient, variable)` pairs whose gradient is not `None`, in order (a gradient of exactly
# 0 is not `None`: keep it). (Useful for a model
# whose frozen parts you leave out on purpose; for a bug, fix the cause instead.)

# %%
def drop_none(grads, variables):
    return None  # your code here


print(ch06.check_drop_none(drop_none))

# %% [markdown]
# **4. What the dense gradient costs.** An `Embedding(50_000, 64)` in float32 is looked up 4
# times. How many bytes does its gradient take as a dense tensor, and how many bytes do the
# `IndexedSlices` values take (leave out the indices)?

# %%
print(ch06.EMBEDDING)
dense_bytes = None  # your code here
slices_bytes = None  # your code here
print(ch06.check_dense_bytes(dense_bytes, slices_bytes))

# %% [markdown]
# **5. A logarithm without the trap.** Write `safe_log(t)`: `log(t)` where `t > 0`, 0
# elsewhere, with a finite gradient everywhere (0 where `t <= 0`).

# %%
def safe_log(t):
    return tf.where(t > 0, tf.math.log(t), 0.0)  # your code here: this has the trap


print(ch06.check_safe_log(safe_log))

# %% [markdown]
# **6. A binary cross-entropy that stays finite.** Write `bce_from_logits(labels, logits)`,
# the mean over the batch of $-y \log \sigma(z) - (1 - y) \log(1 - \sigma(z))$, so that it is
# finite for logits of ±200. Hint: $-\log \sigma(z) = \mathrm{softplus}(-z)$ and
# $-\log(1 - \sigma(z)) = \mathrm{softplus}(z)$.

# %%
def bce_from_logits(labels, logits):
    p = tf.sigmoid(logits)  # your code here: the naive version
    return tf.reduce_mean(-labels * tf.math.log(p) - (1.0 - labels) * tf.math.log(1.0 - p))


print(ch06.check_bce_from_logits(bce_from_logits))

# %% [markdown]
# ## Solutions
#
# **1.** Return the rounded tensor and a `grad` that passes `dy` through:

# %% tags=["solution"]
@tf.custom_gradient
def round_ste(t):
    def grad(dy):
        return dy

    return tf.round(t), grad


print(ch06.check_round_ste(round_ste))

# %% [markdown]
# **2.** Add the forgotten term:

# %% tags=["solution"]
class TwoHeadsFixed(TwoHeads):
    def call(self, inputs):
        h = self.body(inputs)
        return self.head(h) + self.aux(h)


fixed = TwoHeadsFixed()
fixed.build((None, 4))
print(ch06.check_uses_every_layer(fixed, x))

# %% [markdown]
# **3.** A list comprehension over the zipped pairs:

# %% tags=["solution"]
def drop_none(grads, variables):
    return [(g, v) for g, v in zip(grads, variables) if g is not None]


print(ch06.check_drop_none(drop_none))

# %% [markdown]
# **4.** One float per table entry against one row per lookup, 4 bytes each:

# %% tags=["solution"]
dense_bytes = 50_000 * 64 * 4
slices_bytes = 4 * 64 * 4
print(ch06.check_dense_bytes(dense_bytes, slices_bytes))

# %% [markdown]
# **5.** The double where: a safe input first, then the selection.

# %% tags=["solution"]
def safe_log(t):
    positive = t > 0
    return tf.where(positive, tf.math.log(tf.where(positive, t, 1.0)), 0.0)


print(ch06.check_safe_log(safe_log))

# %% [markdown]
# **6.** With the hint, the loss is $y\,\mathrm{softplus}(-z) + (1-y)\,\mathrm{softplus}(z)$
# $= \mathrm{softplus}(z) - y z$:

# %% tags=["solution"]
def bce_from_logits(labels, logits):
    return tf.reduce_mean(tf.math.softplus(logits) - labels * logits)


print(ch06.check_bce_from_logits(bce_from_logits))
