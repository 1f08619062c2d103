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
import os
import shutil
import tempfile
import warnings

import keras
import numpy as np
import tensorflow as tf
from gradlab.exercises import ch06

gl.setup(seed=0)

x = tf.random.stateless_normal([32, 4], seed=[1, 2])
y = tf.reduce_sum(x, axis=1, keepdims=True) + 0.1 * tf.random.stateless_normal([32, 1], seed=[3, 4])
print("x:", x.shape, " y:", y.shape)  # (32, 4) (32, 1)

# %% [markdown]
# ## Read the messages users see · 常见报错信息
#
# In the public issue trackers of TensorFlow and Keras, the gradient questions people ask
# most are not about depth. A sample counted when this chapter was planned (lower bounds, not
# reproduced here): "No gradients provided for any variable" in about 17 threads, "Gradients
# do not exist for variables" 16, `None` from `tape.gradient` 15, NaN losses or gradients 20,
# the `IndexedSlices` warning 20, custom-layer gradients 20, `tf.custom_gradient` 10. Each message below comes from a
# minimal model run right here, so what you read is what TF 2.21 and Keras 3 print.
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
# A Keras optimizer applies the slices as they are, row by row:

# %%
table_before = embedding.embeddings.numpy().copy()
keras.optimizers.SGD(0.1).apply_gradients([(g, embedding.embeddings)])
changed = np.flatnonzero(np.any(embedding.embeddings.numpy() != table_before, axis=1))
print("rows changed by the update:", changed)  # [ 3 17 42]

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
# ## Find the ops that cut the path
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
# ## Avoid the NaN traps
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
    print(f"{name:20s} value {out.numpy()}  gradient {tape.gradient(out, at).numpy()}")
zero = tf.zeros([3])
with tf.GradientTape() as tape:
    tape.watch(zero)
    norm = tf.norm(zero)
print(f"{'tf.norm(zeros)':20s} value {norm.numpy():.3g}  gradient {tape.gradient(norm, zero).numpy()}")

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
# Which ops fall into the trap? In TF 2.21 not all of them: the same `where` around
# different ops, at -4, 0 and 4:

# %%
for name, fn in {"x ** 0.5": lambda t: t ** 0.5, "tf.math.log(x)": tf.math.log, "1 / x": lambda t: 1.0 / t,
                 "tf.sqrt(x)": tf.sqrt, "tf.math.rsqrt(x)": tf.math.rsqrt,
                 "tf.math.reciprocal(x)": tf.math.reciprocal}.items():
    with tf.GradientTape() as tape:
        tape.watch(xs)
        out = tf.reduce_sum(tf.where(xs > 0, fn(xs), 0.0))
    print(f"tf.where(x > 0, {name + ', 0)':25s} gradient {tape.gradient(out, xs).numpy()}")

# %% [markdown]
# `Pow`, `Log` and division still give NaN. `tf.sqrt`, `tf.math.rsqrt` and
# `tf.math.reciprocal` do not: their gradients come out as 0 where the incoming gradient is
# 0, so the textbook example written with `tf.sqrt` no longer shows the trap. Do not count
# on it: the same `1/x` written as a division has the trap, and the double where is safe for
# every op.

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
# log of 0 is `-inf`. Four ways to write the same cross-entropy for logits `[0, 200]` and the
# label "class 0":

# %%
logits = tf.constant([[0.0, 200.0]])
onehot = tf.constant([[1.0, 0.0]])
losses = {
    "-log(softmax(z))": lambda z: -tf.reduce_sum(onehot * tf.math.log(tf.nn.softmax(z))),
    "keras CE of softmax(z)": lambda z: keras.losses.categorical_crossentropy(onehot, tf.nn.softmax(z))[0],
    "keras CE, from_logits=True": lambda z: keras.losses.categorical_crossentropy(onehot, z, from_logits=True)[0],
    "tf.nn.softmax_cross_entropy_with_logits": lambda z: tf.nn.softmax_cross_entropy_with_logits(onehot, z)[0],
}
for name, fn in losses.items():
    with tf.GradientTape() as tape:
        tape.watch(logits)
        out = fn(logits)
    print(f"{name:40s} loss {float(out):8.4g}  gradient {tape.gradient(out, logits).numpy()}")

# %% [markdown]
# The hand-written version is `inf` with NaN gradients. Keras's loss on probabilities clips
# them to `[1e-7, 1 - 1e-7]`, so it stays finite, but the loss is stuck at 16.1 and the
# gradient is exactly 0: the model cannot learn its way out. Only the versions that receive
# the logits compute `log_softmax` stably and get the true loss, 200, and the true gradient.
# The same holds for the other stable forms:

# %%
big = tf.constant([100.0, 101.0, 102.0])
print("log(sum(exp(a))):", tf.math.log(tf.reduce_sum(tf.exp(big))).numpy(),
      " reduce_logsumexp:", f"{tf.reduce_logsumexp(big).numpy():.6g}")  # inf vs 102.4
print("log(1 + 1e-8):", tf.math.log(1.0 + tf.constant(1e-8)).numpy(),
      " log1p(1e-8):", tf.math.log1p(tf.constant(1e-8)).numpy())  # 0 vs 1e-08
print("log(1 + exp(100)):", tf.math.log(1.0 + tf.exp(tf.constant(100.0))).numpy(),
      " softplus(100):", tf.math.softplus(tf.constant(100.0)).numpy())  # inf vs 100

# %% [markdown]
# ## Find the op that made the NaN
#
# ### `tf.debugging.enable_check_numerics`
#
# After this call every op checks its output, eager ops and ops in `tf.function`s traced
# afterwards, and the first NaN or inf raises an error that names the op. Turn it off again:
# it slows everything down.

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
# and a summary of the tensors computed inside the traced graph. We write it to a temporary folder:

# %%
dump_dir = tempfile.mkdtemp(prefix="gradlab-dbg-")
tf.debugging.experimental.enable_dump_debug_info(dump_dir, tensor_debug_mode="CONCISE_HEALTH",
                                                 circular_buffer_size=-1)
with tf.GradientTape() as tape:
    out = tf.function(lambda: tf.reduce_sum(where_sqrt(xs_var)))()
tape.gradient(out, xs_var)
tf.debugging.experimental.disable_dump_debug_info()
print(sorted(name.rsplit(".", 1)[-1] for name in os.listdir(dump_dir)))

# %% [markdown]
# Each file is a stream of `DebugEvent` protocol buffers. With `CONCISE_HEALTH` the record of
# each tensor is `[tensor id, elements, -inf count, +inf count, NaN count]`:

# %%
from tensorflow.core.protobuf import debug_event_pb2  # noqa: E402

traces = next(name for name in os.listdir(dump_dir) if name.endswith(".graph_execution_traces"))
for record in tf.data.TFRecordDataset(os.path.join(dump_dir, traces)):
    trace = debug_event_pb2.DebugEvent.FromString(record.numpy()).graph_execution_trace
    health = tf.make_ndarray(trace.tensor_proto)
    print(f"{trace.op_name:22s} elements {int(health[1])}  -inf {int(health[2])}  +inf {int(health[3])}  "
          f"NaN {int(health[4])}")
execution = next(name for name in os.listdir(dump_dir) if name.endswith(".execution"))
calls = [debug_event_pb2.DebugEvent.FromString(r.numpy()).execution.op_type
         for r in tf.data.TFRecordDataset(os.path.join(dump_dir, execution))]
print("function calls:", [name[: name.index("<lambda>") + len("<lambda>")] for name in calls])

# %% [markdown]
# The `Pow` row has 1 NaN. All eight rows are ops of the *forward* function: the backward
# function that `tape.gradient` ran appears in the `execution` file as one call, but its
# tensors get no rows here, so this dump shows where the forward NaN is born, not how the
# gradient became NaN (`find_nonfinite_source` above covers the backward pass). To browse such a dump, run `tensorboard --logdir <folder>` and
# open the **Debugger V2** tab: it lists the alerts (the first NaN or inf and the op that
# produced it), the graph, and the line of your source that created each op. The
# `FULL_HEALTH` mode records more per tensor; `NO_TENSOR` only which ops ran. We delete the
# folder:

# %%
shutil.rmtree(dump_dir)
print("removed:", not os.path.exists(dump_dir))  # True

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
# ## Write your own gradient with `tf.custom_gradient`
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
    print(f"{name:17s} value {out.numpy()}  gradient {tape.gradient(out, big_x).numpy()}")

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
# ## Summary
#
# | Message or trap | What this chapter showed | Fix |
# |---|---|---|
# | "No gradients provided for any variable." | `tf.round` in the loss: every gradient `None`, `apply_gradients` raises `ValueError`. | Round only outside the loss, or a straight-through gradient. |
# | "Gradients do not exist for variables [...] when minimizing the loss." | A layer built but not used in `call`: a `UserWarning`, the others train. | Use the layer (or delete it). |
# | "None values not supported." | A `None` gradient reaching `tf.clip_by_norm` inside `tf.function`; eagerly "Attempt to convert a value (None)...". | Repair the cause of the `None`; skipping pairs hides it. |
# | `IndexedSlices` to dense | 4 lookups: 1 KB of slices against a 12.8 MB dense gradient. TF 2.21 no longer warns for an unknown shape, only at ≥ 1e8 elements while tracing. | Keep the gradient sparse until the optimizer. |
# | Ops that cut the path | `argmax`, `round`, `floor`, integer casts, comparisons: `None`; `sign`: zeros; `stop_gradient`, `stop_recording`, `watch_accessed_variables=False`, frozen layers (frozen BatchNorm also stops its statistics). | Train on a differentiable surrogate (logits, cross-entropy). |
# | NumPy round-trip | `.numpy()`/`np.*` in the forward pass: `None` eagerly, an error in `tf.function`. | Use `tf.*` or `keras.ops.*`. |
# | `sqrt`, `x ** 0.5`, `log`, `1/x`, `tf.norm` at 0 | Infinite or NaN derivatives at 0. | An epsilon, `divide_no_nan`, or the double where. |
# | The `tf.where` trap | `tf.where(x > 0, x ** 0.5, 0.)`: finite loss, NaN gradient at -4 and 0, eager and graph; also with `log` and `1/x`, but no longer with `tf.sqrt`, `rsqrt`, `reciprocal` in TF 2.21. | The double where. |
# | Log of a softmax | `inf` and NaN gradients; Keras on probabilities: finite but a zero gradient. | `from_logits=True`, `softplus`, `log1p`, `reduce_logsumexp`. |
# | Finding the op | `enable_check_numerics` names the `Pow`; Debugger V2 records its NaN count for TensorBoard; `TerminateOnNaN` stops `fit`. | `gl.find_nonfinite_source`, `gl.inspect_training_step`. |
# | `tf.custom_gradient` | Straight-through `sign`, stable and clipped backward passes; `grad(dy, variables=None)` is required with variables; keyword arguments skip the custom gradient eagerly and raise in a graph. | Pass tensors positionally. |

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
