# %% [markdown]
# # Gradients across devices and workers · 分布式训练中的梯度

# %% [markdown]
# **What you will learn**
#
# - how `tf.distribute.MirroredStrategy` splits one global batch over replicas and sums
#   their gradients, run for real on two logical CPU devices of your laptop;
# - the loss-scaling bug: a per-replica mean makes every gradient *number-of-replicas*
#   times too large, and `tf.nn.compute_average_loss` fixes it, measured against one device;
# - where clipping must happen (after the all-reduce), and what Keras 3's `clipnorm` and
#   `global_clipnorm` really do under `fit` with a strategy;
# - gradient accumulation against one larger batch, gradlab's training steps under a
#   strategy, and two real worker processes with `MultiWorkerMirroredStrategy` whose
#   weights equal a single-process run.

# %% [markdown]
# ## Setup
#
# `MirroredStrategy` needs several devices. A CPU can be split into *logical* devices with
# `tf.config.set_logical_device_configuration`, but only before TensorFlow has run its
# first op, and `import gradlab` runs one (it imports TensorFlow quietly, see chapter 00).
# So this chapter asks gradlab for the split: the environment variable
# `GRADLAB_LOGICAL_CPUS` is read by `import gradlab` just before that first op. It must be
# set before the first `import gradlab` of the kernel (after a kernel restart, if another
# chapter ran in it).

# %%
import os

os.environ["GRADLAB_LOGICAL_CPUS"] = "2"  # before the first `import gradlab`

import gradlab as gl  # noqa: E402,I001  (first: it imports TensorFlow quietly)
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from gradlab.exercises import ch08  # noqa: E402

gl.setup(seed=0)
SGD = keras.optimizers.SGD
print(tf.config.list_logical_devices("CPU"))

# %% [markdown]
# Once the devices exist, they cannot be changed any more. Asking for a different split now
# (three devices), after the first op, is the error that tutorials' set-up cells meet when
# anything has touched TensorFlow before them. Asking again for the split that is already
# there, two devices, is accepted silently:

# %%
cpu = tf.config.list_physical_devices("CPU")[0]
try:
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 3)
except RuntimeError as err:
    print("three devices: RuntimeError:", err)
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
print("two devices again: accepted;", len(tf.config.list_logical_devices("CPU")), "logical CPUs")  # 2

# %% [markdown]
# ## Mirror a model on two devices
#
# `MirroredStrategy` keeps one copy of every variable on each device ("replica") and
# keeps the copies equal: each replica computes gradients on its share of the batch, the
# gradients are summed across replicas (an *all-reduce*), and every replica applies the
# same sum. Here the sum runs between two logical CPU devices; between GPUs,
# `MirroredStrategy` computes the same sum with NCCL by default.

# %%
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
print("replicas:", strategy.num_replicas_in_sync)  # 2

x, y = gl.toy_data(n=32)  # one global batch of 32 examples, 4 features
with strategy.scope():
    model = gl.toy_model(seed=0)  # Dense(16, tanh) -> Dense(1), seeded weights
print(type(model.layers[0].kernel.value).__name__)  # a variable with one copy per replica
print("x:", x.shape, "y:", y.shape)

# %% [markdown]
# `gl.mirrored_strategy(2)` builds the same strategy, and says what to do when the devices
# are missing. `gl.split_batch(strategy, x, y)` gives replica *i* rows
# `16*i ... 16*i + 15` of the global batch, so every number below can be checked against
# one device running the whole batch.

# %% [markdown]
# ## Scale the loss by the global batch
#
# On one device the loss is the mean over the batch of $B = 32$ examples. Under a strategy
# each replica sees $B/2 = 16$ of them. If each replica takes the mean *of its own share*
# (`tf.reduce_mean`), the all-reduce adds two means: the gradient is twice the true one.
# The fix is to divide each replica's *sum* by the global batch size,
# `tf.nn.compute_average_loss(per_example_loss, global_batch_size=B)`. Here is the whole
# mechanism in plain TensorFlow:

# %%
B = x.shape[0]
variables = model.trainable_variables


def gradient_on_replicas(dist_x, dist_y, global_mean):
    def replica_fn(xr, yr):
        with tf.GradientTape() as tape:
            per_example = tf.reduce_mean(tf.square(yr - model(xr)), axis=-1)
            if global_mean:
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=B)
            else:
                loss = tf.reduce_mean(per_example)  # the bug: a mean over this replica only
        grads = tape.gradient(loss, variables)
        return tf.distribute.get_replica_context().all_reduce("SUM", grads)

    summed = strategy.run(replica_fn, args=(dist_x, dist_y))
    return [strategy.experimental_local_results(g)[0] for g in summed]  # same on every replica


dist_x, dist_y = gl.split_batch(strategy, x, y)
with tf.GradientTape() as tape:  # the reference: one device, the whole batch
    loss = tf.reduce_mean(tf.square(y - model(x)))
single = tape.gradient(loss, variables)

for global_mean in (True, False):
    summed = gradient_on_replicas(dist_x, dist_y, global_mean)
    ratio = tf.linalg.global_norm(summed) / tf.linalg.global_norm(single)
    label = "compute_average_loss" if global_mean else "reduce_mean per replica"
    print(f"{label:<24} gradient norm / one-device norm = {float(ratio):.4f}")  # 1, then 2

# %% [markdown]
# `gl.compare_loss_scaling` packages the same measurement (norms in float64, and the
# largest element-wise error against the single-device gradient):

# %%
scaling = gl.compare_loss_scaling(strategy, model, x, y)
print(scaling)

# %% [markdown]
# The factor is exactly the number of replicas (2 here, 8 on an 8-GPU machine). With plain
# SGD it acts as a learning rate 2 or 8 times too large. Adam divides each gradient by its
# own running scale, so a constant factor almost cancels: one step from the same start
# with the true and with the doubled gradient:

# %%
for name, make in (("SGD(0.1)", lambda: SGD(0.1)), ("Adam(0.01)", lambda: keras.optimizers.Adam(0.01))):
    sizes = []
    for factor in (1.0, 2.0):
        w = [tf.Variable(tf.zeros_like(v)) for v in variables]
        make().apply_gradients(zip([factor * g for g in single], w))
        sizes.append(float(tf.linalg.global_norm(w)))
    print(f"{name:<10} step with the doubled gradient / step with the true one = {sizes[1] / sizes[0]:.4f}")

# %% [markdown]
# That is why the bug can go unnoticed for a long time with Adam, and appears when someone
# switches to SGD or changes the number of devices with a learning-rate schedule tuned for
# another. Keras 3's `fit` scales correctly by itself: each replica's loss is divided by
# the number of replicas (the next sections compare `fit` with one device).

# %% [markdown]
# ## Clip after the all-reduce
#
# Global-norm clipping rescales the gradient when its norm exceeds `clip_norm`. On one
# device the gradient is one vector. Across replicas, each replica holds only a part of it.
# Clipping must be applied to the *sum*, after the all-reduce: the sum is the
# single-device gradient, so its global norm is the single-device global norm. Each
# replica's own norm is a different number:

# %%
local, summed = gl.replica_gradients(strategy, model, x, y)
print("global norm, one device:         ", f"{float(tf.linalg.global_norm(single)):.4g}")
print("global norm of the summed grads: ", f"{float(tf.linalg.global_norm(summed)):.4g}")
for i, grads in enumerate(local):
    print(f"global norm on replica {i} alone:  ", f"{float(tf.linalg.global_norm(grads)):.4g}")

# %% [markdown]
# Clipping each replica's part to 0.5 before summing makes two vectors of length at most
# 0.5 and adds them: the applied gradient is longer than 0.5 (0.885 here, 77% too long) and
# points in a slightly different direction than the single-device one (a cosine below 1):

# %%
clipping = gl.compare_clipping(strategy, model, x, y, clip_norm=0.5)
print(clipping)
clip_before = [tf.add_n(parts) for parts in zip(*[tf.clip_by_global_norm(g, 0.5)[0] for g in local])]
cosine = sum(float(tf.reduce_sum(a * b)) for a, b in zip(clip_before, single)) / (
    float(tf.linalg.global_norm(clip_before)) * float(tf.linalg.global_norm(single)))
print(f"cosine(clip before the all-reduce, one-device gradient) = {cosine:.4f}")

# %% [markdown]
# ## What `clipnorm` and `global_clipnorm` do under `fit`
#
# Older `tf.keras` releases (TensorFlow 2.2, for example) refused optimizer clipping under a
# strategy: "Gradient clipping in the optimizer (by setting clipnorm or clipvalue) is
# currently unsupported when using a distribution strategy". The TensorFlow team explained why
# ([tensorflow#33929](https://github.com/tensorflow/tensorflow/issues/33929)): the
# optimizer clipped *before* aggregating, "usually wrong". Keras 3 accepts the arguments.
# Does it clip in the right place? `gl.compare_fit` runs `fit` twice from the same start
# on the same batches of 16, on one device and under the strategy, and prints the largest
# weight difference after 2 epochs (4 steps):

# %%
runs = {
    "SGD, no clipping": lambda: SGD(0.1),
    "SGD, global_clipnorm=0.5": lambda: SGD(0.1, global_clipnorm=0.5),
    "SGD, clipnorm=0.5": lambda: SGD(0.1, clipnorm=0.5),
    "SGD, global_clipnorm=100": lambda: SGD(0.1, global_clipnorm=100.0),
}
for label, optimizer in runs.items():
    print(gl.compare_fit(strategy, x, y, optimizer, label=label))

# %% [markdown]
# Without clipping, `fit` under the strategy matches one device to float rounding. So does a
# clip that never binds (the gradient norms in this chapter are between 0.4 and 1.7, far from
# 100). A clip that binds does **not** match: in Keras 3.15 the optimizer
# clips the gradients it is given, and its TensorFlow backend sums them across replicas
# only afterwards, in the update step. `fit` hands each replica's gradient to the optimizer
# separately, so `clipnorm` and `global_clipnorm` clip per replica, before the all-reduce,
# exactly the case measured above. The order is in Keras' own source:

# %%
import inspect  # noqa: E402

for method in (SGD._backend_apply_gradients, SGD._backend_update_step):
    lines = [ln.strip() for ln in inspect.getsource(method).splitlines()]
    print(method.__qualname__, "->", [ln for ln in lines if "_clip_gradients(" in ln
                                      or "_all_reduce_sum_gradients(" in ln][-1])

# %% [markdown]
# `gl.GradNormSequential(..., clip_global_norm=0.5)` (chapter 03) clips in its own
# `train_step`. Under a strategy it sums the replicas' gradients first, then measures,
# clips and checks them, and gives the optimizer each replica's share of the result. Its
# `fit` matches one device, clipping included, and its logged `grad_norm` is the
# single-device norm:

# %%
def grad_norm_model():
    return gl.GradNormSequential(gl.toy_model().layers, clip_global_norm=0.5)


print(gl.compare_fit(strategy, x, y, lambda: SGD(0.1), label="GradNormSequential(clip 0.5)",
                     make_model=grad_norm_model))
histories = {}
for name, where in (("one device", tf.distribute.get_strategy()), ("2 replicas", strategy)):
    with where.scope():
        m = grad_norm_model()
        m.compile(optimizer=SGD(0.1), loss="mse")
    h = m.fit(x, y, batch_size=16, epochs=3, shuffle=False, verbose=0).history
    print(f"{name:<11} loss per epoch {np.round(h['loss'], 4)}  "
          f"grad_norm of each epoch's last batch {np.round(h['grad_norm'], 4)}")

# %% [markdown]
# ## Use gradlab's training step under a strategy
#
# `gl.make_train_step` (chapter 03) also works with a model built in `strategy.scope()`: it
# runs the step on every replica with `strategy.run`, splits a global batch evenly, divides
# each replica's loss by the number of replicas, and clips after the all-reduce.
# `gl.train_toy` runs three steps of it with SGD(0.1) and `clip_global_norm=0.5`:

# %%
one = gl.train_toy(None, steps=3)
two = gl.train_toy(strategy, steps=3)
print("one device losses:", np.round(one["losses"], 4), "norms:", np.round(one["grad_norms"], 4))
print("2 replicas losses:", np.round(two["losses"], 4), "norms:", np.round(two["grad_norms"], 4))
diff = gl.max_abs_difference(one["weights"], two["weights"])
print(f"max |w_one_device - w_2_replicas| = {diff:.1g}")  # float rounding

# %% [markdown]
# ## Accumulate gradients
#
# When a batch does not fit in memory, Keras 3 can add the gradients of several smaller
# batches and apply their mean: `gradient_accumulation_steps=k` on the optimizer updates
# the weights every k-th step. On one device, with equal micro-batches, that is the same
# update as one step on the k-times larger batch, for SGD and for Adam:

# %%
for name, opt in (("SGD", lambda **kw: SGD(0.1, **kw)), ("Adam", lambda **kw: keras.optimizers.Adam(0.01, **kw))):
    print(f"{name:<5}", gl.compare_accumulation(x, y, opt, steps=2))

# %% [markdown]
# Under `MirroredStrategy`, Keras 3.15 cannot run it: the optimizer chooses between
# "accumulate" and "update" with a `cond`, and the update branch contains the all-reduce,
# a synchronisation point that `tf.distribute` does not allow inside a `cond` in a replica.
# A hand-written accumulation with a `tf.cond` met the same error in Keras 2
# ([keras#17429](https://github.com/keras-team/keras/issues/17429)):

# %%
print(gl.compare_accumulation(x, y, lambda **kw: SGD(0.1, **kw), steps=2, strategy=strategy))

# %% [markdown]
# Under a strategy, the replicas themselves are an accumulation: a global batch of 32 split
# over 2 replicas gives the gradient of one device on all 32 (the loss-scaling section
# measured it). To accumulate further under a strategy, one way (not shown here) is a custom
# loop that adds each step's *all-reduced* gradients into variables and applies them every
# k steps, with the choice made outside the function that `strategy.run` runs per replica.

# %% [markdown]
# ## Train with two real workers
#
# `MultiWorkerMirroredStrategy` does the same across processes, usually on different
# machines. Each process reads its place in the cluster from the environment variable
# `TF_CONFIG`, a JSON document like this one (worker 0 of two; ports are examples):

# %%
import json  # noqa: E402

tf_config = {"cluster": {"worker": ["127.0.0.1:20000", "127.0.0.1:20001"]},
             "task": {"type": "worker", "index": 0}}
print(json.dumps(tf_config))

# %% [markdown]
# `gl.run_workers(2)` starts two Python processes on this machine (127.0.0.1, two free
# ports), each running `gradlab/distribute_worker.py` with its own `TF_CONFIG`. Each worker
# creates `tf.distribute.MultiWorkerMirroredStrategy()` *before* running any op (collective
# ops must be configured at program start, so the script creates the strategy before
# it imports gradlab, whose import runs an op), runs `gl.train_toy` on its half of every
# global batch of 16, and prints its losses, gradient norms and final weights as JSON. The workers are killed if they take
# longer than the timeout. Then the same training runs here, in one process on one device:

# %%
workers = gl.run_workers(2, steps=3, timeout=120)
print(workers)

# %% [markdown]
# Both workers end with the same weights (they apply the same all-reduced sum), and those
# equal the single-process weights to float rounding: the sum of two half-batch gradients
# is the whole-batch gradient, added in a different order.

# %% [markdown]
# ## What changes at larger scale
#
# Nothing here needs a GPU, but everything carries over:
#
# - **GPUs.** `MirroredStrategy()` without arguments takes every visible GPU and all-reduces
#   with NCCL. Loss scaling and clipping are exactly as above; with mixed precision, Keras'
#   `LossScaleOptimizer` multiplies the loss by a dynamic factor on top (the
#   [distributed training guide](https://www.tensorflow.org/guide/distributed_training)).
# - **Many machines.** `MultiWorkerMirroredStrategy` as in the last section, with one
#   `TF_CONFIG` per machine; the global batch grows with the number of workers, and the
#   learning rate is usually scaled with it, with a warm-up (Goyal et al., 2017,
#   [*Accurate, Large Minibatch SGD*](https://arxiv.org/abs/1706.02677)).
# - **TPUs.** `TPUStrategy` replicates over TPU cores with the same `strategy.run` and the
#   same rules for the loss (the [TPU guide](https://www.tensorflow.org/guide/tpu)).
# - **Parameter servers.** `ParameterServerStrategy` is *asynchronous*: workers fetch the
#   variables, compute a gradient and send it to the parameter servers, which apply it
#   without waiting for the others. A gradient computed on weights that other workers have
#   changed since is *stale*. Asynchronous SGD still trains (Dean et al., 2012,
#   [*Large Scale Distributed Deep Networks*](https://papers.nips.cc/paper/4687-large-scale-distributed-deep-networks)),
#   but staleness acts like added momentum, so the learning rate and momentum that suit
#   synchronous training can be too large (Mitliagkas et al., 2016,
#   [*Asynchrony begets momentum*](https://arxiv.org/abs/1605.09774); see also the
#   [parameter server training tutorial](https://www.tensorflow.org/tutorials/distribute/parameter_server_training)).
#   There is no all-reduce, so "clip after the sum" does not exist: each worker's gradient
#   is clipped and applied alone.

# %% [markdown]
# ## Summary
#
# - A strategy splits the global batch over replicas and sums their gradients. For the
#   sum to be the single-device gradient, each replica's loss must be its sum over the
#   *global* batch size (`tf.nn.compute_average_loss`); a per-replica mean makes gradients
#   as many times too large as there are replicas. Keras 3's `fit` scales correctly.
# - Clip after the all-reduce: the global norm of the summed gradients is the single-device
#   norm. Keras 3.15's `clipnorm` and `global_clipnorm` clip per replica, before the sum, so
#   `fit` with a binding clip differs from one device; `gl.GradNormSequential` and
#   `gl.make_train_step` clip after the sum and match.
# - `gradient_accumulation_steps` equals one larger batch on one device, and fails under
#   `MirroredStrategy` in Keras 3.15.
# - Two real `MultiWorkerMirroredStrategy` workers end with the single-process weights.

# %% [markdown]
# ## Exercises
#
# Each exercise has a stub marked `# your code here` and a self-check. Worked answers are
# in [Solutions](#Solutions) at the end.
#
# **1. Scale a replica's loss.** Write `replica_loss(per_example_loss, global_batch_size)`
# for one replica's share of the batch, so that the replicas' losses add up to the mean
# over the global batch. The check runs it on 2 and on 4 replicas.

# %%
def replica_loss(per_example_loss, global_batch_size):
    return tf.reduce_mean(per_example_loss)  # your code here


print(ch08.check_replica_loss(replica_loss))

# %% [markdown]
# **2. Clip in the right place.** Write `clip_summed(replica_grads, clip_norm)`:
# `replica_grads` holds one list of gradients per replica, each the gradient of that
# replica's share of the global loss, so their *sum* is the gradient one device would
# compute (what the all-reduce adds up). Return the list of gradients one device would
# apply after global-norm clipping at `clip_norm`.

# %%
def clip_summed(replica_grads, clip_norm):
    clipped = [tf.clip_by_global_norm(grads, clip_norm)[0] for grads in replica_grads]
    return [tf.add_n(parts) for parts in zip(*clipped)]  # your code here


print(ch08.check_clip_summed(clip_summed))

# %% [markdown]
# ## Solutions
#
# **1.** Divide the replica's *sum* by the global batch size (what
# `tf.nn.compute_average_loss` does):

# %% tags=["solution"]
def replica_loss(per_example_loss, global_batch_size):
    return tf.reduce_sum(per_example_loss) / global_batch_size


print(ch08.check_replica_loss(replica_loss))

# %% [markdown]
# **2.** Add the replicas' gradients first (the all-reduce), then clip the sum:

# %% tags=["solution"]
def clip_summed(replica_grads, clip_norm):
    summed = [tf.add_n(parts) for parts in zip(*replica_grads)]
    return tf.clip_by_global_norm(summed, clip_norm)[0]


print(ch08.check_clip_summed(clip_summed))
