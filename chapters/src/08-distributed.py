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
# chapter ran in it). The second variable quiets TensorFlow's C++ log down to fatal errors:
# a batch that does not split evenly over the replicas (a section below needs one) makes
# TF 2.21 log a harmless `NodeDef mentions attribute use_unbounded_threadpool` error line.

# %%
import os

os.environ["GRADLAB_LOGICAL_CPUS"] = "2"  # before the first `import gradlab`
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"  # TensorFlow's C++ log: keep even its ERROR lines out (see below)

import gradlab as gl  # noqa: E402,I001  (first: it imports TensorFlow quietly)
import keras  # noqa: E402
import numpy as np  # noqa: E402
from pathlib import Path  # noqa: E402
import tensorflow as tf  # noqa: E402
from gradlab.exercises import ch08  # noqa: E402
from gradlab.plots.replicas import plot_clip_placement  # noqa: E402

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
# ## Mirror a model on two devices · 在两个设备上镜像模型
#
# `MirroredStrategy` keeps one copy of every variable on each device ("replica") and
# keeps the copies equal: each replica computes gradients on its share of the batch, the
# gradients are summed across replicas (an *all-reduce*), and every replica applies the
# same sum. Here the sum runs between two logical CPU devices, through one device
# (`ReductionToOneDevice`). Between GPUs, `MirroredStrategy` picks NCCL by default, when every
# device is a GPU, each physical GPU is one logical device and TensorFlow has the NCCL kernel;
# otherwise it falls back to one device (`select_cross_device_ops` in TF 2.21's
# `tensorflow/python/distribute/cross_device_ops.py`; not measured here: no GPU).

# %%
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
print("replicas:", strategy.num_replicas_in_sync)  # 2

x, y = gl.train.distribute.toy_data(n=32)  # one global batch of 32 examples, 4 features
with strategy.scope():
    model = gl.train.distribute.toy_model(seed=0)  # Dense(16, tanh) -> Dense(1), seeded weights
print(type(model.layers[0].kernel.value).__name__)  # a variable with one copy per replica
print("x:", x.shape, "y:", y.shape)

# %% [markdown]
# `gl.train.distribute.mirrored_strategy(2)` builds the same strategy, and says what to do when the devices
# are missing. `gl.train.distribute.split_batch(strategy, x, y)` gives replica *i* rows
# `16*i ... 16*i + 15` of the global batch, so every number below can be checked against
# one device running the whole batch.

# %% [markdown]
# ## Scale the loss by the global batch · 按全局批量缩放损失
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


dist_x, dist_y = gl.core.split_batch(strategy, x, y)
with tf.GradientTape() as tape:  # the reference: one device, the whole batch
    loss = tf.reduce_mean(tf.square(y - model(x)))
single = tape.gradient(loss, variables)

for global_mean in (True, False):
    summed = gradient_on_replicas(dist_x, dist_y, global_mean)
    ratio = tf.linalg.global_norm(summed) / tf.linalg.global_norm(single)
    label = "compute_average_loss" if global_mean else "reduce_mean per replica"
    print(f"{label:<24} gradient norm / one-device norm = {float(ratio):.4f}")  # 1, then 2

# %% [markdown]
# `gl.train.distribute.compare_loss_scaling` packages the same measurement (norms in float64, and the
# largest element-wise error against the single-device gradient):

# %%
scaling = gl.train.distribute.compare_loss_scaling(strategy, model, x, y)
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
# another.
#
# Keras 3's `fit` takes each replica's mean loss and divides it by the number of replicas
# (`scale_loss_for_distribution` in `keras/src/losses/loss.py`). That equals the global-batch
# mean only when every replica gets the same number of examples. The last batch of an epoch
# is smaller when the batch size does not divide the data; split over the replicas, it can
# leave them unequal shares. `fit` on one device and under the strategy, batches of 16, 2
# epochs, with 32, 33 and 34 examples (33 ends each epoch with a batch of 1, which one replica
# gets alone; 34 with a batch of 2, one example each):

# %%
def difference(d: float) -> str:
    """A weight difference as printed here: float rounding (below 1e-6) is not worth its digits."""
    return "< 1e-6 (float rounding)" if d < 1e-6 else f"{d:.2g}"


for n in (32, 33, 34):
    xn, yn = gl.train.distribute.toy_data(n=n)
    run = gl.train.distribute.compare_fit(strategy, xn, yn, lambda: SGD(0.1))
    print(f"{n} examples: max |w_one_device - w_distributed| = {difference(run.max_abs_difference)}"
          f"  (weight norm {run.weight_norm:.3g})")

# %% [markdown]
# With 33 examples the weights differ from one device by 0.023 (of a weight norm of 2.9).
# The last batch holds one example, and one replica gets it alone: that replica's mean is
# that example's loss, divided by 2 replicas, and the empty replica adds 0. So the step on
# that batch is half the one-device step. One epoch under the strategy against one device
# that takes its last step at half the learning rate:

# %%
x33, y33 = gl.train.distribute.toy_data(n=33)
with strategy.scope():
    distributed = gl.train.distribute.toy_model(seed=0)
    distributed.compile(optimizer=SGD(0.1), loss="mse")
distributed.fit(x33, y33, batch_size=16, epochs=1, shuffle=False, verbose=0)
weights_distributed = [v.numpy() for v in distributed.trainable_variables]
for last_lr in (0.1, 0.05):
    one = gl.train.distribute.toy_model(seed=0)
    one.compile(optimizer=SGD(0.1), loss="mse")
    one.fit(x33[:32], y33[:32], batch_size=16, epochs=1, shuffle=False, verbose=0)  # the two full batches
    with tf.GradientTape() as tape:
        last_loss = tf.reduce_mean(tf.square(one(x33[32:]) - y33[32:]))  # the one-example batch
    for v, g in zip(one.trainable_variables, tape.gradient(last_loss, one.trainable_variables), strict=True):
        v.assign_sub(last_lr * g)
    d = gl.train.distribute.max_abs_difference([v.numpy() for v in one.trainable_variables], weights_distributed)
    print(f"one device, last step at lr {last_lr}: max |w - w_distributed| = {difference(d)}")

# %% [markdown]
# Give every replica an equal share: drop the remainder
# (`tf.data.Dataset.batch(..., drop_remainder=True)`), or choose a dataset size and batch size
# that the number of replicas divides. In a custom loop, divide by the true global batch with
# `tf.nn.compute_average_loss` as above, and for a ragged last batch pass its real size.

# %%
def fit_dataset(where, drop_remainder: bool):
    with where.scope():
        m = gl.train.distribute.toy_model(seed=0)
        m.compile(optimizer=SGD(0.1), loss="mse")
    data = tf.data.Dataset.from_tensor_slices((x33, y33)).batch(16, drop_remainder=drop_remainder)
    m.fit(data, epochs=2, shuffle=False, verbose=0)
    return [v.numpy() for v in m.trainable_variables]


for drop in (False, True):
    one_device = fit_dataset(tf.distribute.get_strategy(), drop)
    two_replicas = fit_dataset(strategy, drop)
    print(f"33 examples, drop_remainder={drop!s:5}: max |w_one_device - w_distributed| = "
          f"{difference(gl.train.distribute.max_abs_difference(one_device, two_replicas))}")

# %% [markdown]
# ## Clip after the all-reduce · 在全归约之后裁剪
#
# Global-norm clipping rescales the gradient when its norm exceeds `clip_norm`. On one
# device the gradient is one vector. Across replicas, each replica holds only a part of it.
# Clipping must be applied to the *sum*, after the all-reduce: the sum is the
# single-device gradient, so its global norm is the single-device global norm. Each
# replica's own norm is a different number:

# %%
local, summed = gl.train.distribute.replica_gradients(strategy, model, x, y)
print("global norm, one device:         ", f"{float(tf.linalg.global_norm(single)):.4g}")
print("global norm of the summed grads: ", f"{float(tf.linalg.global_norm(summed)):.4g}")
for i, grads in enumerate(local):
    print(f"global norm on replica {i} alone:  ", f"{float(tf.linalg.global_norm(grads)):.4g}")

# %% [markdown]
# Clipping each replica's part to 0.5 before summing makes two vectors of length at most
# 0.5 and adds them: the applied gradient is longer than 0.5 (0.885 here, 77% too long) and
# points in a slightly different direction than the single-device one (a cosine below 1):

# %%
clipping = gl.train.distribute.compare_clipping(strategy, model, x, y, clip=0.5)
print(clipping)
clip_before = [tf.add_n(parts) for parts in zip(*[tf.clip_by_global_norm(g, 0.5)[0] for g in local])]
cosine = sum(float(tf.reduce_sum(a * b)) for a, b in zip(clip_before, single)) / (
    float(tf.linalg.global_norm(clip_before)) * float(tf.linalg.global_norm(single)))
print(f"cosine(clip before the all-reduce, one-device gradient) = {cosine:.4f}")

# %% [markdown]
# The same vectors in a picture. Each replica's gradient is one vector (all its tensors
# together); the plane through the two replica gradients contains every vector drawn, so
# lengths and angles are true. Replica 0's gradient (norm 0.44) is inside the circle of
# radius 0.5 and is not clipped, replica 1's (0.96) is shortened to 0.5, and their sum points
# off the one-device direction and is longer than 0.5:

# %%
plot_clip_placement(gl.train.distribute.clip_placement(local, 0.5))

# %% [markdown]
# ## What `clipnorm` and `global_clipnorm` do under `fit` · `fit` 中的裁剪参数
#
# Older `tf.keras` releases (TensorFlow 2.2, for example) refused optimizer clipping under a
# strategy: "Gradient clipping in the optimizer (by setting clipnorm or clipvalue) is
# currently unsupported when using a distribution strategy". The TensorFlow team explained why
# ([tensorflow#33929](https://github.com/tensorflow/tensorflow/issues/33929)): the
# optimizer clipped *before* aggregating, "usually wrong". Keras 3 accepts the arguments.
# Does it clip in the right place? `gl.train.distribute.compare_fit` runs `fit` twice from the same start
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
    print(gl.train.distribute.compare_fit(strategy, x, y, optimizer, label=label))

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
# `gl.GradNormSequential(..., clip=0.5)` (chapter 03) clips in its own
# `train_step`. Under a strategy it sums the replicas' gradients first, then measures,
# clips and checks them, and gives the optimizer each replica's share of the result. Its
# `fit` matches one device, clipping included, and its logged `grad_norm` is the
# single-device norm:

# %%
def grad_norm_model():
    return gl.GradNormSequential(gl.train.distribute.toy_model().layers, clip=0.5)


print(gl.train.distribute.compare_fit(strategy, x, y, lambda: SGD(0.1), label="GradNormSequential(clip 0.5)",
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
# ## Use gradlab's training step under a strategy · 在分布式策略下使用 gradlab 的训练步
#
# `gl.make_train_step` (chapter 03) also works with a model built in `strategy.scope()`: it
# runs the step on every replica with `strategy.run`, splits a global batch evenly, divides
# each replica's loss by the number of replicas, and clips after the all-reduce.
# `gl.train.distribute.train_toy` runs three steps of it with SGD(0.1) and `clip=0.5`:

# %%
one = gl.train.distribute.train_toy(None, steps=3)
print("one device losses:", np.round(one["losses"], 4), "norms:", np.round(one["grad_norms"], 4))
two = gl.train.distribute.train_toy(strategy, steps=3)
print("2 replicas losses:", np.round(two["losses"], 4), "norms:", np.round(two["grad_norms"], 4))
diff = gl.train.distribute.max_abs_difference(one["weights"], two["weights"])
print(f"max |w_one_device - w_2_replicas| = {difference(diff)}")

# %% [markdown]
# ## Accumulate gradients · 梯度累加
#
# When a batch does not fit in memory, Keras 3 can add the gradients of several smaller
# batches and apply their mean: `gradient_accumulation_steps=k` on the optimizer updates
# the weights every k-th step. On one device, with equal micro-batches, that is the same
# update as one step on the k-times larger batch, for SGD and for Adam:

# %%
for name, opt in (("SGD", lambda **kw: SGD(0.1, **kw)), ("Adam", lambda **kw: keras.optimizers.Adam(0.01, **kw))):
    print(f"{name:<5}", gl.train.distribute.compare_accumulation(x, y, opt, steps=2))

# %% [markdown]
# Under `MirroredStrategy`, Keras 3.15 cannot run it: the optimizer chooses between
# "accumulate" and "update" with a `cond`, and the update branch contains the all-reduce,
# a synchronisation point that `tf.distribute` does not allow inside a `cond` in a replica.
# A hand-written accumulation with a `tf.cond` met the same error in Keras 2
# ([keras#17429](https://github.com/keras-team/keras/issues/17429)):

# %%
print(gl.train.distribute.compare_accumulation(x, y, lambda **kw: SGD(0.1, **kw), steps=2, strategy=strategy))

# %% [markdown]
# Under a strategy, the replicas themselves are an accumulation: a global batch of 32 split
# over 2 replicas gives the gradient of one device on all 32 (the loss-scaling section
# measured it). To accumulate further under a strategy, one way (not shown here) is a custom
# loop that adds each step's *all-reduced* gradients into variables and applies them every
# k steps, with the choice made outside the function that `strategy.run` runs per replica.

# %% [markdown]
# ## Train with two real workers · 用两个真实进程训练
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
# `gl.train.distribute.run_workers(2)` starts two Python processes on this machine (127.0.0.1, two free
# ports), each running `gradlab/distribute_worker.py` with its own `TF_CONFIG`. Each worker
# creates `tf.distribute.MultiWorkerMirroredStrategy()` *before* running any op (collective
# ops must be configured at program start, so the script creates the strategy before
# it imports gradlab, whose import runs an op), runs `gl.train.distribute.train_toy` on its half of every
# global batch of 16, and prints its losses, gradient norms and final weights as JSON. The workers are killed if they take
# longer than the timeout. Then the same training runs here, in one process on one device:

# %%
workers = gl.train.distribute.run_workers(2, steps=3, timeout=600)  # generous: a busy machine is slow to start TF
print(workers)

# %% [markdown]
# Both workers end with the same weights (they apply the same all-reduced sum), and those
# equal the single-process weights to float rounding: the sum of two half-batch gradients
# is the whole-batch gradient, added in a different order.

# %% [markdown]
# ## What changes at larger scale · 更大规模时的变化
#
# Nothing here needs a GPU, but everything carries over, with one trap that shows up only
# with mixed precision.
#
# ### Dynamic loss scaling looks at one replica
#
# With `mixed_float16`, `LossScaleOptimizer.apply_gradients` checks whether the gradients are
# finite: if they are, it unscales and applies them; if not, it skips the step and halves the
# scale (chapter 05). Under `MirroredStrategy` each replica hands it its *own* gradients (the
# inner optimizer all-reduces them later, in the update step), and Keras 3.15 decides from the
# first replica's alone. One replica's gradient holds an inf, the other's is finite
# ($2^{14}$ in each element); the inf is on replica 0, then on replica 1, inside a
# `tf.function` as in `fit`, on the two logical CPUs:

# %%
def lso_step(bad_replica):
    with strategy.scope():
        v = keras.Variable([1.0, 2.0])
        lso = keras.mixed_precision.LossScaleOptimizer(SGD(1.0))
        lso.build([v])

    @tf.function
    def step():
        def replica_fn():
            replica = tf.distribute.get_replica_context().replica_id_in_sync_group
            g = tf.where(tf.equal(replica, bad_replica), tf.constant([np.inf, 1.0]), tf.constant([16384.0, 16384.0]))
            lso.apply_gradients([(g, v)])

        strategy.run(replica_fn)

    step()
    weights = [w.numpy() for w in strategy.experimental_local_results(v.value)]
    return weights, int(lso.iterations.numpy()), float(lso.dynamic_scale.numpy())


for bad in (0, 1):
    weights, steps, scale = lso_step(bad)
    print(f"inf on replica {bad}: weights on the replicas {[np.round(w, 4).tolist() for w in weights]}, "
          f"steps {steps}, scale {scale:g}")

# %% [markdown]
# With the inf on replica 0 the step is skipped and the scale halves, as on one device. With
# the inf on replica 1 the check passes, the sum of the two replicas' gradients holds the inf,
# and it is applied: the first weight becomes `-inf` on both replicas, the second moves by
# $(1 + 2^{14})/2^{15} \approx 0.5$, the step counts, and the scale stays.
# Under `fit` the replicas' shares differ, so replica 1 can overflow while replica 0 does not.
# The source says why:

# %%
lso_source = Path(keras.__file__).parent / "src" / "optimizers" / "loss_scale_optimizer.py"
lso_lines = lso_source.read_text().splitlines()
start = next(i for i, line in enumerate(lso_lines) if "def _handle_cross_replica" in line)
print(f"keras/src/optimizers/loss_scale_optimizer.py, lines {start + 1}-{start + 12}:")
for number in range(start, start + 12):
    print(f"{number + 1:6d}  {lso_lines[number].rstrip()}")

# %% [markdown]
# The comment assumes that `grads` were already all-reduced, which is not what `fit` and
# `apply_gradients` hand it. In a custom loop, all-reduce first and give every replica its
# share of the sum, so that replica 0's check sees the global gradient: `gl.make_train_step`
# does that (it sums the replicas' gradients, then hands each replica the sum divided by the
# number of replicas).
#
# ### Other scales
#
# - **GPUs.** `MirroredStrategy()` without arguments takes every visible GPU (and the CPU
#   when there is none: `all_local_devices` in TF 2.21's
#   `tensorflow/python/distribute/mirrored_strategy.py`) and all-reduces with NCCL under the
#   conditions of the first section. Loss scaling and clipping are exactly as above; with mixed precision, Keras'
#   `LossScaleOptimizer` multiplies the loss by a dynamic factor on top (the
#   [distributed training guide](https://www.tensorflow.org/guide/distributed_training)),
#   with the one-replica check above.
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
# ## Summary · 总结
#
# - A strategy splits the global batch over replicas and sums their gradients. For the
#   sum to be the single-device gradient, each replica's loss must be its sum over the
#   *global* batch size (`tf.nn.compute_average_loss`); a per-replica mean makes gradients
#   as many times too large as there are replicas. Keras 3's `fit` divides each replica's mean
#   by the number of replicas, which is right only when every replica gets as many examples
#   (33 examples in batches of 16: weights 0.023 off; `drop_remainder=True` fixes it).
# - Under `MirroredStrategy`, Keras 3.15's `LossScaleOptimizer` decides from replica 0's
#   gradients alone: an inf on replica 1 is applied (`-inf` weights) instead of skipped.
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
