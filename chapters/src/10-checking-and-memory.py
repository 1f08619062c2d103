# %% [markdown]
# # Check, bend and budget gradients · 梯度的检验、改造与内存

# %% [markdown]
# **What you will learn**
#
# - to check any gradient (a `tf.custom_gradient` from chapter 06, a hand-written backward
#   pass) against finite differences, and why the step matters: the truncation error falls as
#   h², the rounding error grows as ε/h, and the best step is near ε^(1/3);
# - what `tf.test.compute_gradient` returns, and `gl.check_gradient`, which works in float64,
#   names the worst entry and recognises points where the function has a kink;
# - per-example gradients three ways (a loop of tapes, `tf.vectorized_map`, a Jacobian), what
#   each costs, and per-example clipping as DP-SGD does it;
# - a gradient penalty by double backprop (WGAN-GP): nested tapes in the right order, its
#   cost, and the mistakes that give `None` or a silently wrong penalty;
# - to measure memory instead of hoping: `tf.recompute_grad` and gradient accumulation, and
#   the cases where they save nothing or change the result.

# %% [markdown]
# ## Setup
#
# The last sections measure memory with TensorFlow's own allocator statistics. On a CPU
# TensorFlow keeps them only with its BFC allocator, which the environment variable
# `TF_CPU_ALLOCATOR_USE_BFC` selects; TensorFlow reads it once, when it starts, so it is set
# before `import gradlab` (which imports TensorFlow). It changes where tensors live, not
# what is computed.

# %%
import os

os.environ["TF_CPU_ALLOCATOR_USE_BFC"] = "true"  # before the first `import gradlab`

import gradlab as gl  # noqa: E402,I001  (first: it imports TensorFlow quietly)
import timeit  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from gradlab.exercises import ch10  # noqa: E402
from gradlab.topics.memory import measure_peak  # noqa: E402
from gradlab.plots.gradcheck import plot_example_norms, plot_memory, plot_method_times, plot_step_errors  # noqa: E402

gl.setup(seed=0)
np.set_printoptions(precision=4, suppress=True)
print("allocator statistics on the CPU:", gl.topics.memory.allocator_stats_available("CPU:0"))  # True

# %% [markdown]
# ## Check a derivative with finite differences · 用有限差分检验导数
#
# The central difference $\frac{f(x+h) - f(x-h)}{2h}$ approximates $f'(x)$. Taylor's
# theorem gives its two errors: the *truncation* error $\frac{h^2}{6} f'''(x)$, which falls
# as h², and the *rounding* error: $f(x \pm h)$ are each rounded to about $\varepsilon |f|$
# (ε is the machine epsilon, $2^{-23} \approx 1.2 \cdot 10^{-7}$ in float32 and
# $2^{-52} \approx 2.2 \cdot 10^{-16}$ in float64), and their difference is divided by 2h, so
# it grows as ε/h. Their sum is smallest where both are alike, near $h \approx \varepsilon^{1/3}$.
# Measured for $\sin$ at $x = 1$, whose derivative $\cos 1$ is known exactly, over 49 steps:

# %%
steps = np.logspace(-12, 0, 49)
errors = {}
for dtype in (tf.float32, tf.float64):
    x = tf.constant(1.0, dtype)
    h = tf.constant(steps, dtype)
    central = (tf.sin(x + h) - tf.sin(x - h)) / (2 * h)
    errors[dtype.name] = np.abs(central.numpy().astype(np.float64) - np.cos(1.0))
eps = {"float32": float(np.finfo(np.float32).eps), "float64": float(np.finfo(np.float64).eps)}
plot_step_errors(steps, errors, eps)

# %% [markdown]
# The slopes, fitted on each side of the optimum, are those of the two error terms, and the
# smallest error sits within a factor of ten of ε^(1/3):

# %%
for name, err in errors.items():
    best = eps[name] ** (1 / 3)
    right = (steps > 10 * best) & (steps <= 1.0)
    left = (steps < best / 30) & (err < 1e-2)  # leave out steps so small that x + h == x
    slope_right = np.polyfit(np.log10(steps[right]), np.log10(err[right]), 1)[0]
    slope_left = np.polyfit(np.log10(steps[left]), np.log10(err[left]), 1)[0]
    near = abs(np.log10(steps[np.argmin(err)] / best)) <= 1
    print(f"{name}: slope {slope_right:.0f} right of the optimum (h²), {slope_left:.0f} left of it (ε/h); "
          f"best step within 10x of ε^(1/3) = {best:.1g}: {near}")

# %% [markdown]
# In float32 the best error is about $\varepsilon^{2/3} \approx 2 \cdot 10^{-5}$ relative:
# a third of float32's seven digits is gone before you compare anything. That is why a
# gradient check runs in float64. A check is this comparison, made for every entry. A
# custom gradient for $x^2$ whose backward pass forgot the factor 2:

# %%
@tf.custom_gradient
def square_wrong(x):
    return x * x, lambda dy: dy * x  # the derivative is 2x: the factor 2 is missing


x = tf.constant(1.5, tf.float64)
with tf.GradientTape() as tape:
    tape.watch(x)
    y = square_wrong(x)
h = 2.0 ** -17  # a power of two near float64's ε^(1/3)
fd = (square_wrong(x + h) - square_wrong(x - h)) / (2 * h)
print("tape:", float(tape.gradient(y, x)), " central difference:", f"{float(fd):.6f}")  # 1.5 against 3.0

# %% [markdown]
# ## `tf.test.compute_gradient` · TensorFlow 自带的梯度检验
#
# TensorFlow ships this comparison as `tf.test.compute_gradient(f, x, delta=None)`, where
# `x` is a *list* of inputs. It returns two tuples, the theoretical Jacobians (from the tape,
# one backward pass per output element, seeded with a one-hot vector) and the numerical ones
# (central differences, two evaluations of `f` per input element), one 2-D array per input
# with a row per output element and a column per input element:

# %%
theoretical, numerical = tf.test.compute_gradient(square_wrong, [tf.constant([1.0, 2.0, 3.0])])
print(type(theoretical).__name__, len(theoretical), theoretical[0].shape, theoretical[0].dtype)
print("theoretical:\n", theoretical[0])  # diag(x): the tape's wrong gradient
print("numerical:\n", numerical[0])  # about diag(2x)

# %% [markdown]
# It gives no verdict: you compare the two yourself (`tf.test.TestCase.assertAllClose`, or
# the largest difference). Its default step is `delta = 1/1024` (a power of two, "exactly
# representable", says the comment at `tensorflow/python/ops/gradient_checker_v2.py` line 344
# in TF 2.21), and it perturbs the input in its own dtype. On a *correct* gradient, the error
# left in float32 and in float64:

# %%
for dtype in (tf.float32, tf.float64):
    t, n = tf.test.compute_gradient(tf.exp, [tf.constant([0.5, 1.0, 2.0], dtype)])
    gap = np.max(np.abs(t[0] - n[0]))  # rounding-level digits differ between CPUs: print the order of magnitude
    print(f"{dtype.name}: largest |theoretical - numerical| about 1e{round(np.log10(gap))}")

# %% [markdown]
# In float32 the difference is about 1e-4 for a gradient that is right, and it grows with
# the size of the values (rounding is relative to |f|); in float64 the step 1/1024 leaves a
# truncation error of about $h^2 e^2 / 6 \approx 1e{-6}$. Passing float64 inputs and a smaller `delta` is up to you.
#
# ## `gl.check_gradient`: a verdict, where, and why · 结论、位置与原因
#
# `gl.check_gradient(f, *xs, delta=None)` makes the same comparison and returns a result with
# `.ok`, `.max_rel_error`, `.theoretical`, `.numerical` (in `tf.test.compute_gradient`'s
# layout) and `.worst`, the entry that differs most. Float32 inputs are cast to float64 (and
# it says so); the step of each element is $\varepsilon^{1/3} \max(1, |x|)$, rounded to a power
# of two; and an entry is called wrong only when it differs by more than the finite
# differences' own error there, estimated from the rounding ($\varepsilon |f| / h$) and from
# the difference between steps h and 2h (the truncation).

# %%
check = gl.check_gradient(square_wrong, tf.constant([1.0, 2.0, 3.0]))
print(check)
print("ok:", check.ok, " max_rel_error:", f"{check.max_rel_error:.3g}", " worst:", check.worst.label)
tf_theoretical, _ = tf.test.compute_gradient(square_wrong, [tf.constant([1.0, 2.0, 3.0], tf.float64)])
print("same layout and theoretical Jacobian as tf.test.compute_gradient:",
      np.array_equal(check.theoretical[0], tf_theoretical[0]))  # True

# %% [markdown]
# The same check on chapter 06's custom gradients. The stable `log1pexp` passes; a version
# whose backward pass returns $1/(1+e^x) = \sigma(-x)$ fails: that is the derivative of
# $\log\sigma(x) = -\log(1 + e^{-x})$, not of $\log(1 + e^{x})$, whose derivative is
# $\sigma(x) = 1 - 1/(1+e^x)$ (a slip of sign in the exponent); the straight-through `sign`
# fails *by design*: it is not the derivative of `sign` (which is 0 almost everywhere) and was
# never meant to be.

# %%
@tf.custom_gradient
def log1pexp(t):
    e = tf.exp(t)
    return tf.math.log(1.0 + e), lambda dy: dy * (1.0 - 1.0 / (1.0 + e))


@tf.custom_gradient
def log1pexp_slip(t):
    e = tf.exp(t)
    return tf.math.log(1.0 + e), lambda dy: dy / (1.0 + e)  # sigma(-x): the derivative of log sigma(x)


@tf.custom_gradient
def sign_ste(t):
    return tf.sign(t), lambda dy: dy * tf.cast(tf.abs(t) <= 1.0, dy.dtype)


@tf.custom_gradient
def clip_backward(t):
    return tf.identity(t), lambda dy: tf.clip_by_norm(dy, 1.0)


t = tf.constant([-2.0, -0.5, 0.3, 1.5])
for fn in (log1pexp, log1pexp_slip, sign_ste, clip_backward):
    r = gl.check_gradient(fn, t)
    err = "< 1e-9" if r.max_rel_error < 1e-9 else f"{r.max_rel_error:.2g}"  # float64 rounding: a bound
    print(f"{fn.__name__:14s} {gl.i18n.pad(r.verdict_word, 6)} max_rel_error {err}")

# %% [markdown]
# `clip_backward` passes, and that is a lesson about checks: it changes the gradient only
# when the incoming `dy` is longer than 1, and a Jacobian is built from one-hot `dy`s, of
# length 1. A check only tests what it feeds. Put it where it matters, inside a loss that
# sends a large `dy` through it:

# %%
print(gl.check_gradient(lambda t: tf.reduce_sum(100.0 * clip_backward(t)), t).verdict_word)  # wrong: by design

# %% [markdown]
# A correct float32 function raises no false alarm. A Keras layer computes in float32 even
# when it is handed float64, and a function with float32 constants refuses float64 inputs;
# `check_gradient` notices both and checks in float32, with float32's step and tolerance:

# %%
layer = keras.layers.Dense(3, activation="tanh")
layer.build((None, 4))
print(gl.check_gradient(lambda v: layer(v), tf.constant([[0.3, -1.2, 2.5, 0.7]])))
three = tf.constant(3.0)  # a float32 constant: v * three fails for a float64 v
print(gl.check_gradient(lambda v: tf.exp(v * three), tf.constant([0.5, -1.0])))

# %% [markdown]
# Where `f` is not differentiable, there is nothing to check: `relu` at 0 has slope 0 from
# the left and 1 from the right. The tape returns a convention (0), central differences
# return about the mean (0.5); a naive check calls that a bug. `check_gradient` compares the
# one-sided slopes at steps h and 2h (at a kink their gap does not shrink with h) and says so:

# %%
print(gl.check_gradient(tf.nn.relu, tf.constant([-1.0, 0.0, 2.0])))

# %% [markdown]
# A function that draws new random numbers at every call has no slope to measure: Dropout
# with `training=True` keeps a different half of its inputs each time, so the four
# evaluations per element would see four different masks (a naive check reports huge slopes
# or a kink). `check_gradient` evaluates `f` twice at the same point first and, when the two
# differ, says so; the same layer with `training=False` checks:

# %%
drop = keras.layers.Dropout(0.5, seed=0)
print(gl.check_gradient(lambda v: drop(v, training=True), tf.constant([0.3, -1.2, 2.5, 0.7])))
print(gl.check_gradient(lambda v: drop(v, training=False), tf.constant([0.3, -1.2, 2.5, 0.7])).verdict_word)  # ok

# %% [markdown]
# ## Take one gradient per example · 逐样本梯度
#
# The gradient of a batch's mean loss is the mean of its examples' gradients. DP-SGD clips
# each example's gradient before taking that mean; influence estimates and "which example
# makes this batch explode" read them one at a time. Three ways to get them, for a small
# regression model:

# %%
keras.utils.set_random_seed(1)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(1)])
xb = tf.random.stateless_normal([32, 8], seed=[1, 1])
yb = tf.reduce_sum(xb[:, :3], axis=1, keepdims=True) + 0.1 * tf.random.stateless_normal([32, 1], seed=[1, 2])
variables = model.trainable_variables

# %% [markdown]
# **A loop of tapes**: a batch of one example at a time. Each example's loss is the batch
# loss of that batch of one: a mean over the batch divides by B, a batch of one by 1.

# %%
def loop_of_tapes(x, y):
    rows = []
    for i in range(x.shape[0]):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(y[i:i + 1] - model(x[i:i + 1])))
        rows.append(tape.gradient(loss, variables))
    return [tf.stack(column) for column in zip(*rows)]


by_loop = loop_of_tapes(xb, yb)
print([tuple(g.shape) for g in by_loop])  # one (32, *variable.shape) per variable

# %% [markdown]
# **`tf.vectorized_map`** runs the same function of one example for the whole batch at once:
# pfor rewrites every op of the forward and the backward pass into its batched form.

# %%
@tf.function
def by_vectorized_map(x, y):
    def one(example):
        xi, yi = example
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(yi[None] - model(xi[None])))
        return tape.gradient(loss, variables)

    return tf.vectorized_map(one, (x, y))


# %% [markdown]
# **A Jacobian**: one forward pass of the batch, the vector of the 32 per-example losses
# (reduced over each example's outputs, *not* over the batch), and `tape.jacobian` of that
# vector with respect to the variables: row i is example i's gradient.

# %%
@tf.function
def by_jacobian(x, y):
    with tf.GradientTape() as tape:
        losses = tf.reduce_mean(tf.square(y - model(x)), axis=1)  # shape (32,): one loss per example
    return tape.jacobian(losses, variables)


for name, grads in (("vectorized_map", by_vectorized_map(xb, yb)), ("jacobian", by_jacobian(xb, yb))):
    diff = max(float(tf.reduce_max(tf.abs(a - b))) for a, b in zip(grads, by_loop))
    print(f"{name:15s} agrees with the loop to 1e-5: {diff < 1e-5}")
with tf.GradientTape() as tape:
    batch_loss = tf.reduce_mean(tf.square(yb - model(xb)))
batch_grads = tape.gradient(batch_loss, variables)
diff = max(float(tf.reduce_max(tf.abs(tf.reduce_mean(g, 0) - b))) for g, b in zip(by_loop, batch_grads))
print("mean of the per-example gradients == batch gradient (1e-6):", diff < 1e-6)

# %% [markdown]
# Had the loss vector been reduced over the batch (a Keras loss with its default
# reduction returns one number), `tape.jacobian` would return the batch gradient, with no
# batch axis. `keras.losses.MeanSquaredError(reduction=None)` returns one loss per example.
#
# `gl.per_example_gradients(model, x, y, *, loss=None, sample_weight=None)` packages this: the
# loss is the model's compiled loss (or `loss`, or the core's mean squared error), taken per
# example with Keras's meaning of `sample_weight` (a weighted loss is $\sum_i w_i l_i / B$, so
# example i's gradient is $w_i \nabla l_i$ and their mean is still the batch gradient); the
# model runs with `training=False` and is left exactly as it was. It picks
# `tf.vectorized_map`, falls back to the Jacobian and then to the loop where pfor cannot
# convert the model, and returns the norms in float64:

# %%
per_example = gl.per_example_gradients(model, xb, yb)
diff = max(float(tf.reduce_max(tf.abs(a - b))) for a, b in zip(per_example, by_loop))
print("method:", per_example.method, " agrees with the loop to 1e-5:", diff < 1e-5)
print("first four norms:", np.round(per_example.norms[:4], 3))

# %% [markdown]
# A model where pfor fails: TF 2.21's `tf.vectorized_map` cannot convert a recurrent layer whose
# input sequence is computed inside the model, here a second SimpleRNN after the first (a Dense
# or Conv1D before it fails the same way; one recurrent layer straight on the input converts):
# a `TypeError` deep inside pfor, about a `variant` tensor. `"auto"` falls back to the
# Jacobian, which vectorizes only the loss and the backward pass; asking for
# `vectorized_map` by name says why it cannot:

# %%
keras.utils.set_random_seed(5)
stacked = keras.Sequential([keras.Input((4, 2)), keras.layers.SimpleRNN(3, return_sequences=True),
                            keras.layers.SimpleRNN(2), keras.layers.Dense(1)])
xs_seq = tf.random.stateless_normal([6, 4, 2], seed=[5, 1])
ys_seq = tf.random.stateless_normal([6, 1], seed=[5, 2])
print("auto chose:", gl.per_example_gradients(stacked, xs_seq, ys_seq).method)  # jacobian
try:
    gl.per_example_gradients(stacked, xs_seq, ys_seq, method="vectorized_map")
except ValueError as err:
    print("ValueError:", str(err).split(" (")[0])

# %% [markdown]
# An `Embedding`'s gradient is `tf.IndexedSlices` (chapter 06); per example it comes back
# dense, one table per example, non-zero only in the rows that example looked up (so mind
# the memory: B times the table):

# %%
keras.utils.set_random_seed(2)
tagger = keras.Sequential([keras.Input((3,), dtype="int32"), keras.layers.Embedding(6, 2),
                           keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1)])
ids = tf.constant([[1, 1, 4], [0, 2, 3]])
table = gl.per_example_gradients(tagger, ids, tf.constant([[1.0], [-1.0]]))[0]
print("shape:", tuple(table.shape))  # (2, 6, 2): examples, vocabulary, dim
print("rows with a gradient:", [np.flatnonzero(np.any(t != 0, axis=1)).tolist() for t in table.numpy()])

# %% [markdown]
# What the three ways cost, against the batch size, measured now (each after one call that
# traced it; the loop is gradlab's, a `tf.function` of one example called B times):

# %% tags=["nbval-ignore-output"]
batch_sizes = (8, 32, 128)
keras.utils.set_random_seed(3)
xs_all = tf.random.stateless_normal([max(batch_sizes), 8], seed=[3, 1])
ys_all = tf.random.stateless_normal([max(batch_sizes), 1], seed=[3, 2])
times = {"loop": [], "vectorized_map": [], "jacobian": []}
for b in batch_sizes:
    for method in times:
        gl.per_example_gradients(model, xs_all[:b], ys_all[:b], method=method, progress=False)  # trace
        call = lambda b=b, method=method: gl.per_example_gradients(  # noqa: E731
            model, xs_all[:b], ys_all[:b], method=method, progress=False)  # no bar inside the timing
        best = min(timeit.repeat(call, number=1, repeat=3))
        times[method].append(best)
for method, values in times.items():
    print(f"{method:15s}", "  ".join(f"B={b}: {v * 1e3:6.1f} ms" for b, v in zip(batch_sizes, values)))
ahead, behind = sorted(("vectorized_map", "jacobian"), key=lambda m: times[m][-1])
print(f"ahead at B={batch_sizes[-1]} in this run: {ahead}, {times[behind][-1] / times[ahead][-1]:.2g}x faster than {behind}")
plot_method_times(batch_sizes, times)

# %% [markdown]
# The loop makes one call per example, so its work grows in proportion to B;
# `vectorized_map` and the Jacobian run batched passes whose work grows far more slowly, so
# at large B the loop falls behind by a wide margin. Which of the two batched ways wins
# depends on the model, on B and on the machine (the Jacobian pays for a second pfor, over the
# rows of the loss vector): the cell's last line names this run's winner at B = 128. On this
# small Dense model the Jacobian was often ahead while this chapter was written; on an LSTM the
# two traded places from run to run. Each
# number is the fastest of three calls; on a busy machine even that can break the order
# between neighbouring sizes. What does not depend on the clock: all three give the same
# numbers.

# %%
agree = []
for b in batch_sizes:
    ref = gl.per_example_gradients(model, xs_all[:b], ys_all[:b], method="loop", progress=False)
    for method in ("vectorized_map", "jacobian"):
        got = gl.per_example_gradients(model, xs_all[:b], ys_all[:b], method=method, progress=False)
        agree.append(max(float(tf.reduce_max(tf.abs(g - r))) for g, r in zip(got, ref)) < 1e-5)
print("every method agrees with the loop at every batch size:", all(agree))

# %% [markdown]
# ## Clip each example, as DP-SGD does · 像 DP-SGD 那样逐样本裁剪
#
# DP-SGD (Abadi et al. 2016, [arXiv:1607.00133](https://arxiv.org/abs/1607.00133),
# Algorithm 1) bounds each example's influence: clip each per-example gradient to norm C,
# $\bar g_i = g_i / \max(1, \lVert g_i \rVert / C)$, add Gaussian noise
# $\mathcal N(0, \sigma^2 C^2 I)$ to the sum, divide by the batch size. Clipping the *batch*
# gradient (chapter 01) is a different thing. A batch of 32 in which example 7 has a target
# far off:

# %%
y_out = tf.tensor_scatter_nd_update(yb, [[7, 0]], [40.0])
grads = gl.per_example_gradients(model, xb, y_out)
C = float(np.median(grads.norms))
plot_example_norms(grads.norms, C)

# %% [markdown]
# Both clippings, side by side, in plain TensorFlow (norms in float64). The comparison is
# with the gradient of the 31 ordinary examples, and with example 7's own:

# %%
def flat(gs):
    return tf.concat([tf.reshape(tf.cast(g, tf.float64), [-1]) for g in gs], 0)


def cosine(a, b):
    return float(tf.reduce_sum(a * b) / (tf.norm(a) * tf.norm(b)))


B = int(xb.shape[0])
batch = [tf.reduce_mean(g, 0) for g in grads]
batch_clipped, _ = tf.clip_by_global_norm(batch, C)  # chapter 01: one norm for the whole batch
scale = tf.constant(np.minimum(1.0, C / grads.norms))  # DP-SGD: one factor per example (float64)
dp = [tf.reduce_mean(tf.cast(g, tf.float64) * tf.reshape(scale, [B] + [1] * (g.shape.rank - 1)), 0) for g in grads]
others = flat([tf.reduce_mean(tf.concat([g[:7], g[8:]], 0), 0) for g in grads])
outlier = flat([g[7] for g in grads])
for name, g in (("no clipping", batch), ("batch clipped", batch_clipped), ("per-example clipped", dp)):
    f = flat(g)
    print(f"{name:20s} norm {float(tf.norm(f)):7.3f}  cosine with the 31 others {cosine(f, others):5.2f}  "
          f"with example 7 {cosine(f, outlier):5.2f}")

# %% [markdown]
# Clipping the batch gradient barely changes it here: its norm, 10.278, is just above C, the
# median example's norm (10.202), and it keeps its direction, which example 7 sets. Clipping
# each example caps example 7's share of the gradient at C/B like everyone else's, and the
# step points where the other 31 examples point. What it changes: the result is no longer
# the gradient of the loss (it is biased towards the typical example), every example moves
# the weights by at most lr·C/B in an SGD step of learning rate lr (its share of the
# gradient is at most C/B), which is what lets calibrated noise hide any single example, and
# it needs the per-example gradients, with their cost above. Example 7's move in one SGD step
# of its share alone, eagerly and in `tf.function`:

# %%
lr = 0.1
share_7 = [tf.cast(g[7], tf.float64) * scale[7] / B for g in grads]   # example 7's part of the DP-SGD gradient


def move_of(share, step_fn):
    weights = [tf.Variable(tf.zeros_like(s)) for s in share]
    step_fn(keras.optimizers.SGD(lr), share, weights)
    return float(tf.norm(flat(weights)))


def sgd_step(opt, share, weights):
    opt.apply_gradients(zip(share, weights))


print(f"C = {C:.5g}, B = {B}; example 7's share has norm {float(tf.norm(flat(share_7))):.5g} = C/B = {C / B:.5g}")
print(f"one SGD step (lr {lr:g}) moves the weights by {move_of(share_7, sgd_step):.5g} eagerly, "
      f"{move_of(share_7, tf.function(sgd_step)):.5g} in tf.function; lr·C/B = {lr * C / B:.5g}")

# %% [markdown]
# The noise step, with a stateless seed (σ = 1):

# %%
sigma = 1.0
noise = [tf.random.stateless_normal(g.shape, seed=[10, i], dtype=tf.float64) * sigma * C / B for i, g in enumerate(dp)]
private = [g + n for g, n in zip(dp, noise)]
print(f"noise std per coordinate σ·C/B = {sigma * C / B:.3g}; cosine of the noisy step with the 31 others: "
      f"{cosine(flat(private), others):.2f}")

# %% [markdown]
# ## Differentiate a gradient: a gradient penalty · 对梯度求导：梯度惩罚
#
# WGAN-GP (Gulrajani et al. 2017, [arXiv:1704.00028](https://arxiv.org/abs/1704.00028),
# Algorithm 1) adds to the critic's loss $\lambda\, \mathbb E\big[(\lVert \nabla_{\hat x} D(\hat x)
# \rVert_2 - 1)^2\big]$ with $\lambda = 10$, at points $\hat x = \epsilon x + (1 - \epsilon)\tilde x$
# between real and generated samples, $\epsilon \sim U[0, 1]$. The penalty contains a
# gradient, and the update needs *its* gradient with respect to the weights: double backprop.

# %%
keras.utils.set_random_seed(4)
critic = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, activation="tanh"),
                           keras.layers.Dense(32, activation="tanh"), keras.layers.Dense(1)])
real = tf.random.stateless_normal([64, 8], seed=[4, 1]) + 1.0
fake = tf.random.stateless_normal([64, 8], seed=[4, 2])
epsilon = tf.random.stateless_uniform([64, 1], seed=[4, 3])
x_hat = epsilon * real + (1.0 - epsilon) * fake

# %% [markdown]
# Nested tapes, in this order: the *outer* tape (for the weights) is opened first and is still
# recording when the *inner* tape's gradient is taken, so that the ops computing
# $\nabla_{\hat x} D$ are recorded and can be differentiated in turn. One norm per example
# (`axis=1`), and $\sqrt{\cdot + 10^{-12}}$ because `tf.norm` at a zero gradient has a NaN
# gradient (chapter 06):

# %%
def penalty_and_grads(x_hat):
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            inner.watch(x_hat)  # a tensor, not a variable: watch it
            d = critic(x_hat)
        g = inner.gradient(d, x_hat)  # inside the outer tape: recorded
        norm = tf.sqrt(tf.reduce_sum(tf.square(g), axis=1) + 1e-12)  # one norm per example
        penalty = tf.reduce_mean(tf.square(norm - 1.0))
    return penalty, outer.gradient(penalty, critic.trainable_variables)


values = {}
for mode, fn in (("eager", penalty_and_grads), ("tf.function", tf.function(penalty_and_grads)),
                 ("jit_compile", tf.function(penalty_and_grads, jit_compile=True))):
    penalty, pgrads = fn(x_hat)
    values[mode] = (float(penalty), float(gl.true_global_norm(pgrads)))
    print(f"{mode:12s} penalty {values[mode][0]:.4f}  gradient norm {values[mode][1]:.4f}")

# %% [markdown]
# Summing $D$ over the batch before the inner gradient is right here: example j's output
# depends only on example j's input, so $\nabla_{x_j} \sum_i D(x_i) = \nabla D(x_j)$. Is the
# second-order path right too? `check_gradient` can tell, for a critic small enough to
# perturb every weight (float64, plain TensorFlow; the weights are the inputs):

# %%
x_small = tf.cast(x_hat[:5, :3], tf.float64)


def small_penalty(w1, w2):
    with tf.GradientTape() as inner:
        inner.watch(x_small)
        d = tf.tanh(x_small @ w1) @ w2
    g = inner.gradient(d, x_small)
    return tf.reduce_mean(tf.square(tf.sqrt(tf.reduce_sum(tf.square(g), axis=1) + 1e-12) - 1.0))


w1 = tf.random.stateless_normal([3, 4], seed=[5, 1], dtype=tf.float64)
w2 = tf.random.stateless_normal([4, 1], seed=[5, 2], dtype=tf.float64)
print(gl.check_gradient(small_penalty, w1, w2))

# %% [markdown]
# ### The mistakes · 常见错误
#
# **The inner gradient taken after the outer tape has closed.** Nothing records the ops of
# $\nabla_{\hat x} D$, so the penalty has no gradient at all; added to the Wasserstein loss,
# the same mistake is silent: the step then ignores the penalty.

# %%
def penalty_outside(x_hat):
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            inner.watch(x_hat)
            d = critic(x_hat)
    g = inner.gradient(d, x_hat)  # the outer tape no longer records
    penalty = tf.reduce_mean(tf.square(tf.sqrt(tf.reduce_sum(tf.square(g), axis=1) + 1e-12) - 1.0))
    return penalty, outer.gradient(penalty, critic.trainable_variables)


print("gradients:", penalty_outside(x_hat)[1])  # [None, None, ...]

# %% [markdown]
# Not every `None` is a mistake. In the right version above, the output layer's bias has no
# gradient either: adding a constant to $D$ does not change $\nabla_{\hat x} D$, so the penalty
# does not depend on it, and the tape says so:

# %%
print([v.path for v, g in zip(critic.trainable_variables, penalty_and_grads(x_hat)[1]) if g is None])

# %% [markdown]
# **No `inner.watch(x_hat)`.** `x_hat` is a tensor, not a variable, so the inner tape does
# not watch it, and `inner.gradient(d, x_hat)` is `None` (chapter 02); the next op fails.
#
# **One norm over the whole batch** (`tf.norm(g)` without `axis`): a penalty that runs, and is
# wrong, with nothing to warn you:

# %%
with tf.GradientTape() as unwatched:
    d = critic(x_hat)
print("without inner.watch, inner.gradient(d, x_hat) is None:", unwatched.gradient(d, x_hat) is None)  # True
with tf.GradientTape() as inner:
    inner.watch(x_hat)
    d = critic(x_hat)
g = inner.gradient(d, x_hat)
print("per example:", f"{float(tf.reduce_mean(tf.square(tf.norm(g, axis=1) - 1.0))):.4f}",
      " one norm for the batch:", f"{float(tf.square(tf.norm(g) - 1.0)):.4f}")

# %% [markdown]
# **BatchNorm in the critic.** In training mode it normalizes each example with the batch's
# statistics, so example j's output depends on every input, the sum over the batch no
# longer separates, and "each example's gradient norm" is not what the inner tape returns.
# The paper drops batch normalization from the critic for this reason (it recommends layer
# normalization). Measured: change the *other* examples, and example 0's input gradient moves.

# %%
keras.utils.set_random_seed(6)
bn_critic = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.BatchNormalization(),
                              keras.layers.Activation("tanh"), keras.layers.Dense(1)])


def first_example_gradient(c, batch):
    with tf.GradientTape() as tape:
        tape.watch(batch)
        d = c(batch, training=True)
    return tape.gradient(d, batch)[0]


shuffled_others = tf.concat([x_hat[:1], fake[1:]], 0)
for name, c in (("tanh critic", critic), ("BatchNorm critic", bn_critic)):
    moved = float(tf.reduce_max(tf.abs(first_example_gradient(c, x_hat) - first_example_gradient(c, shuffled_others))))
    print(f"{name:17s} example 0's input gradient moves by {moved:.2g} when the others change")

# %% [markdown]
# What the penalty costs: a full training step of a critic (two `Dense(128)` layers, batches
# of 512) with it, against the same step without it, both `tf.function`, measured now, in
# alternation so that a busy machine slows both alike:

# %% tags=["nbval-ignore-output"]
keras.utils.set_random_seed(9)
big_critic = keras.Sequential([keras.Input((8,)), keras.layers.Dense(128, activation="tanh"),
                               keras.layers.Dense(128, activation="tanh"), keras.layers.Dense(1)])
big_real = tf.random.stateless_normal([512, 8], seed=[9, 1]) + 1.0
big_fake = tf.random.stateless_normal([512, 8], seed=[9, 2])
big_epsilon = tf.random.stateless_uniform([512, 1], seed=[9, 3])
optimizer = keras.optimizers.SGD(1e-3)
optimizer.build(big_critic.trainable_variables)
weights = big_critic.trainable_variables


@tf.function
def plain_step(real, fake):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(big_critic(fake)) - tf.reduce_mean(big_critic(real))
    optimizer.apply_gradients(zip(tape.gradient(loss, weights), weights))
    return loss


@tf.function
def penalty_step(real, fake):
    x_hat = big_epsilon * real + (1.0 - big_epsilon) * fake
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            inner.watch(x_hat)
            d = big_critic(x_hat)
        g = inner.gradient(d, x_hat)
        norm = tf.sqrt(tf.reduce_sum(tf.square(g), axis=1) + 1e-12)
        wasserstein = tf.reduce_mean(big_critic(fake)) - tf.reduce_mean(big_critic(real))
        loss = wasserstein + 10.0 * tf.reduce_mean(tf.square(norm - 1.0))
    optimizer.apply_gradients(zip(outer.gradient(loss, weights), weights))
    return loss


plain_step(big_real, big_fake)
penalty_step(big_real, big_fake)
t_plain, t_penalty = [], []
for _ in range(7):
    t_plain.append(timeit.timeit(lambda: plain_step(big_real, big_fake).numpy(), number=10) / 10)
    t_penalty.append(timeit.timeit(lambda: penalty_step(big_real, big_fake).numpy(), number=10) / 10)
print(f"plain step {min(t_plain) * 1e3:.2f} ms, with the gradient penalty {min(t_penalty) * 1e3:.2f} ms: "
      f"{min(t_penalty) / min(t_plain):.1f}x")

# %% [markdown]
# The penalty step runs the critic on three batches instead of two and back-propagates
# through the backward pass of one of them: more work by a small factor, not by orders of
# magnitude (the ratio above measures it on this machine; while this chapter was written it
# came out between 2× and 3× on a quiet moment, and nearer 1× when other processes competed
# for the CPU or the model was tiny, where per-call overhead dominates).
#
# ## Measure memory · 测量内存
#
# **The method.** `gl.topics.memory.measure_peak(fn)` calls `fn` once (to trace it), then resets
# TensorFlow's allocator statistics (`tf.config.experimental.reset_memory_stats`), calls it
# again and reads `tf.config.experimental.get_memory_info(device)["peak"]`: the largest number
# of bytes TensorFlow's allocator had handed out at once during the call, above what was
# allocated before it. That counts every tensor (activations kept for the backward pass,
# gradients, temporaries, XLA's buffers), not Python objects and not memory the allocator
# reserved but did not use. The function's docstring says it "currently only supports GPU
# and TPU. If called on a CPU device, an exception will be raised" [[1]](#References-for-measuring-memory). `measure_peak` reads the device `"CPU:0"` unless told otherwise, so on a
# GPU machine pass `device="GPU:0"` to measure where the layers run (not measured here: no GPU
# was at hand). On the CPU, measured: without `TF_CPU_ALLOCATOR_USE_BFC=true` the
# exception comes ("Allocator stats not available for device 'CPU:0'"); with it, the
# statistics are there. The process's resident memory (RSS), the other common measure,
# includes TensorFlow's own code and every cache, and rarely goes down.
#
# ### `tf.recompute_grad` · 重计算
#
# A deep stack keeps every layer's activation until the backward pass reaches it.
# `tf.recompute_grad(f)` keeps only the input of `f` and runs `f` again during the backward
# pass (gradient checkpointing; Chen et al. 2016, [arXiv:1604.06174](https://arxiv.org/abs/1604.06174),
# put checkpoints every √n of n layers). A stack of 16 `Dense(128, tanh)` layers on a batch of
# 2048, so that one activation is exactly 1 MiB:

# %%
depth, width, batch_size = 16, 128, 2048
keras.utils.set_random_seed(7)
stack = [keras.layers.Dense(width, activation="tanh") for _ in range(depth)]
x_deep = tf.random.stateless_normal([batch_size, width], seed=[7, 1])
h_deep = x_deep
for dense in stack:
    h_deep = dense(h_deep)  # builds the layers
stack_variables = [v for dense in stack for v in dense.trainable_variables]
print(f"one activation: {batch_size * width * 4 / 2**20:.0f} MiB, all weights: "
      f"{sum(int(np.prod(v.shape)) for v in stack_variables) * 4 / 2**20:.2f} MiB")


def forward(segment):
    """The stack with every `segment` layers wrapped in tf.recompute_grad (0: none)."""
    def run(h, layers):
        for dense in layers:
            h = dense(h)
        return h

    if segment == 0:
        return lambda h: run(h, stack)
    blocks = [tf.recompute_grad(lambda h, b=stack[i:i + segment]: run(h, b)) for i in range(0, depth, segment)]

    def fwd(h):
        for block in blocks:
            h = block(h)
        return h

    return fwd


def training_gradient(segment, jit_compile=False):
    fwd = forward(segment)

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(fwd(x_deep)))
        return tape.gradient(loss, stack_variables)

    return tf.function(step, jit_compile=jit_compile)


# %% tags=["nbval-ignore-output"]
segments = {0: "none", 1: "every layer", 4: "4 layers", 16: "all 16"}  # layers per recompute_grad segment: label
memory = {s: measure_peak(training_gradient(s), repeats=3) for s in segments}
for s, m in memory.items():
    print(f"recompute {gl.i18n.pad(segments[s], 12)} peak {m.peak_mib:5.1f} MiB  time {m.seconds * 1e3:6.1f} ms")
plot_memory([f"recompute:\n{segments[s]}" for s in memory], [m.peak_mib for m in memory.values()],
            [m.seconds for m in memory.values()])

# %% [markdown]
# The verdicts, which do not depend on the clock:

# %%
plain_peak, four = memory[0].peak_bytes, memory[4].peak_bytes
print("segments of 4 save at least 40 % of the plain peak:", four < 0.6 * plain_peak)
for s in (1, 16):
    print(f"{gl.i18n.pad(segments[s], 12)} peaks at least 1.5x as high as segments of 4: {memory[s].peak_bytes > 1.5 * four}")

# %% [markdown]
# Segments of 4 (√16) cut the peak roughly in half. Wrapping **every layer** saves little or
# nothing: a layer's input is the one tensor its backward pass needs (tanh's derivative is
# computed from its output, the next layer's input), and recompute_grad keeps exactly that
# input, so nothing is dropped and the work is done twice. Wrapping **everything in one**
# saves as little: the backward pass recomputes all 16 activations at once. (Against the
# plain stack the two save nothing when TensorFlow runs the graph on two threads here, and
# about a quarter when the process is pinned to one core, whose plain peak is higher; either
# way they peak about twice as high as segments of 4.) These are the threads in
# TensorFlow's tracker: "`recompute_grad` does not save memory" [[2]](#References-for-measuring-memory) (every block of a
# DenseNet wrapped, TF 2.1, on a GPU; a fix for TF 2 was merged in May 2020 [[3]](#References-for-measuring-memory), whose
# author adds that you still have to split the model into segments yourself to see a saving);
# "a layer's ReLU is recomputed anyway, wrap a *sequence* of layers, but not too many"
# [[4]](#References-for-measuring-memory); and "how do I even tell whether it saves anything" [[5]](#References-for-measuring-memory): measure, as above. The price is one extra forward pass of the recomputed part, in work;
# the times printed above are too noisy on a shared CPU to show it reliably.
#
# With `jit_compile=True` XLA plans the buffers itself, and its plan for the plain stack
# peaks higher than TensorFlow's executor does; segments of 4 help there too:

# %% tags=["nbval-ignore-output"]
xla = {s: measure_peak(training_gradient(s, jit_compile=True), repeats=2) for s in (0, 4)}
for s, m in xla.items():
    print(f"jit_compile, recompute {gl.i18n.pad(segments[s], 9)} peak {m.peak_mib:5.1f} MiB  time {m.seconds * 1e3:6.1f} ms")

# %%
print("XLA without recompute_grad peaks higher than the graph executor:",
      xla[0].peak_bytes > memory[0].peak_bytes)
print("with XLA, segments of 4 save at least half:", xla[4].peak_bytes < xla[0].peak_bytes / 2)

# %% [markdown]
# ### Accumulate gradients on one device · 单设备上的梯度累加
#
# The other answer when a batch does not fit: split it into k micro-batches, add their
# gradients, divide by k, apply once. With a mean loss and equal micro-batches, that is the
# gradient of the whole batch (so any optimizer takes the same step;
# [chapter 08](08-distributed.ipynb) measured SGD and Adam with Keras's
# `gradient_accumulation_steps`, and why it fails under `MirroredStrategy`):

# %%
def accumulated_gradient(x, k, training=False, model=None):
    model = model or stack_model
    parts = [tf.zeros_like(v) for v in model.trainable_variables]
    for xm in tf.split(x, k):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xm, training=training)))
        parts = [p + g for p, g in zip(parts, tape.gradient(loss, model.trainable_variables))]
    return [p / k for p in parts]


stack_model = keras.Sequential([keras.Input((width,)), *stack])
whole = accumulated_gradient(x_deep, 1)
four = accumulated_gradient(x_deep, 4)
print("4 micro-batches == the whole batch (relative 1e-5):",
      max(float(tf.reduce_max(tf.abs(a - b)) / tf.reduce_max(tf.abs(b))) for a, b in zip(four, whole)) < 1e-5)

# %% [markdown]
# With unequal micro-batches, weight each micro-batch's mean loss by its share of the
# examples instead of dividing by k. BatchNorm in training mode breaks the equality
# outright: each micro-batch is normalized with its own statistics, so the accumulated
# gradient is that of a *different* loss (and the moving statistics are updated k times):

# %%
keras.utils.set_random_seed(8)
bn_model = keras.Sequential([keras.Input((width,)), keras.layers.Dense(32), keras.layers.BatchNormalization(),
                             keras.layers.Activation("tanh"), keras.layers.Dense(1)])
bn_model(x_deep[:2])
saved = gl.core.snapshot(bn_model)
moving_mean = bn_model.layers[1].moving_mean
for training in (False, True):
    bn_whole = accumulated_gradient(x_deep, 1, training, bn_model)
    before = moving_mean.numpy().copy()
    bn_four = accumulated_gradient(x_deep, 4, training, bn_model)
    moved = not np.array_equal(before, moving_mean.numpy())
    rel = max(float(tf.reduce_max(tf.abs(a - b)) / tf.reduce_max(tf.abs(b))) for a, b in zip(bn_four, bn_whole))
    print(f"BatchNorm, training={training!s:5}: 4 micro-batches == the whole batch (relative 1e-5): {rel < 1e-5};"
          f" the 4 passes moved the moving mean: {moved}")
gl.core.restore(saved)

# %% [markdown]
# What accumulation saves is the activations of all but one micro-batch, *if the micro-batches
# run one after another*. Inside a `tf.function`, a Python loop is unrolled into four
# independent forward and backward passes, and TensorFlow's executor may run them at the same
# time, holding their activations together. A `tf.while_loop` with `parallel_iterations=1`
# runs them in order (autograph turns `for i in tf.range(k)` into a `tf.while_loop` with its
# default of 10 [[6]](#References-for-measuring-memory), unless the loop body calls
# `tf.autograph.experimental.set_loop_options(parallel_iterations=1)`). Measured for the
# stack, without recompute_grad:

# %%
def sequential_accumulation(x, k):
    micro = tf.reshape(x, [k, -1, x.shape[1]])

    def body(i, parts):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(stack_model(micro[i])))
        return i + 1, [p + g for p, g in zip(parts, tape.gradient(loss, stack_model.trainable_variables))]

    start = [tf.zeros_like(v) for v in stack_model.trainable_variables]
    _, parts = tf.while_loop(lambda i, parts: i < k, body, (0, start), parallel_iterations=1)
    return [p / k for p in parts]


# %% tags=["nbval-ignore-output"]
ways = {  # key: (label, gradient function)
    "one": ("one batch of 2048", tf.function(lambda: accumulated_gradient(x_deep, 1))),
    "unrolled": ("4 x 512, unrolled in tf.function", tf.function(lambda: accumulated_gradient(x_deep, 4))),
    "while_loop": ("4 x 512, tf.while_loop(parallel_iterations=1)",
                   tf.function(lambda: sequential_accumulation(x_deep, 4))),
    "eager": ("4 x 512, eagerly", lambda: accumulated_gradient(x_deep, 4)),
}
acc = {key: measure_peak(fn, repeats=1, warmup=False) if key == "eager" else measure_peak(fn, repeats=2)
       for key, (_label, fn) in ways.items()}  # eagerly there is nothing to trace, and each call is slow
for key, m in acc.items():
    print(f"{gl.i18n.pad(ways[key][0], 46)} peak {m.peak_mib:5.1f} MiB  time {m.seconds * 1e3:6.1f} ms")

# %%
one = acc["one"].peak_bytes
in_order = acc["while_loop"].peak_bytes
print("sequential micro-batches need less than half the peak of one batch:", in_order < one / 2)
print("eagerly too:", acc["eager"].peak_bytes < one / 2)
print("the unrolled loop in tf.function needs more than the sequential one:",
      acc["unrolled"].peak_bytes > 1.2 * in_order)
same = max(float(tf.reduce_max(tf.abs(a - b))) for a, b in zip(sequential_accumulation(x_deep, 4), four))
print("and the while_loop gives the same gradient (1e-6):", same < 1e-6)

# %% [markdown]
# #### References for measuring memory
#
# 1. The docstring of `tf.config.experimental.get_memory_info`,
#    `tensorflow/python/framework/config.py`, line 603 in TF 2.21.
# 2. [tensorflow#36981](https://github.com/tensorflow/tensorflow/issues/36981), "recompute_grad
#    does not save memory".
# 3. [tensorflow#39042](https://github.com/tensorflow/tensorflow/pull/39042), the fix for TF 2
#    (merged May 2020).
# 4. Allen Lavoie in [tensorflow#11171](https://github.com/tensorflow/tensorflow/issues/11171).
# 5. [tensorflow#57205](https://github.com/tensorflow/tensorflow/issues/57205), how to tell
#    whether recompute_grad saves memory.
# 6. `tf.while_loop`'s `parallel_iterations=10`, `tensorflow/python/ops/while_loop.py`,
#    line 260 in TF 2.21.

# %% [markdown]
# ## Summary
#
# | Question | What this chapter measured | Use |
# |---|---|---|
# | Which step for finite differences? | Error ∝ h² right of the optimum, ∝ ε/h left of it, best near ε^(1/3): about 5e-3 in float32, 6e-6 in float64; float32 keeps about ε^(2/3) ≈ 2e-5. | Check in float64. |
# | `tf.test.compute_gradient` | Theoretical and numerical Jacobians, `(output size, input size)` per input; `delta = 1/1024`; the input's own dtype; no verdict (a right float32 gradient of `exp` differs by about 1e-4). | Float64 inputs, your own tolerance. |
# | Is my custom gradient right? | `gl.check_gradient` catches the missing factor 2, a sign slip in `log1pexp`, and the straight-through `sign` (by design); one-hot seeds do not exercise `clip_by_norm(dy)`; a Keras layer in float32 passes; `relu` at 0 is a kink, not a bug; Dropout with `training=True` is random (two evaluations differ), not a kink. | `gl.check_gradient(f, *xs)` |
# | Per-example gradients | Loop, `vectorized_map`, Jacobian agree to 1e-5; their mean is the batch gradient; the loop grows as B, the other two slowly; pfor fails on an RNN fed by another layer, e.g. stacked RNNs (the Jacobian works). | `gl.per_example_gradients` |
# | DP-SGD | Per-example clipping caps an outlier's share at C/B and turns the step towards the other examples; batch clipping keeps the outlier's direction. | Clip each example, then noise σC/B. |
# | Gradient penalty | Nested tapes, outer first, inner gradient taken inside it: same values eagerly, in `tf.function` and with XLA, verified by `check_gradient`; closing the outer tape first gives `None`; one norm for the batch or BatchNorm in the critic is silently wrong. | One norm per example, no BatchNorm in the critic. |
# | `tf.recompute_grad` | Segments of √n about halve the peak; every layer alone or all in one save little or nothing. | Measure with `gl.topics.memory.measure_peak`. |
# | Gradient accumulation | Equal micro-batches give the whole batch's gradient; BatchNorm in training mode does not; 4 micro-batches in sequence need less than half the peak, but unrolled in a `tf.function` they may run at once and save much less, depending on how many cores the executor runs them on. | Divide by k (or weight by size); `tf.while_loop(..., parallel_iterations=1)` or eager. |

# %% [markdown]
# ## Exercises
#
# Each exercise has a stub marked `# your code here` and a self-check. As shipped, the stubs
# are empty or wrong and the checks say what is missing; worked answers are in
# [Solutions](#Solutions) at the end.
#
# **1. A central difference.** Write `central_difference(f, x, h)`, the symmetric difference
# quotient of `f` at `x` with step `h`.

# %%
def central_difference(f, x, h):
    return (f(x + h) - f(x)) / h  # your code here: this is the forward difference


print(ch10.check_central_difference(central_difference))

# %% [markdown]
# **2. Repair a custom gradient.** `cube` computes $x^3$, and its backward pass is wrong.
# Fix `grad` so that `gl.check_gradient` accepts it (the check runs it).

# %%
@tf.custom_gradient
def cube(x):
    def grad(dy):
        return 3.0 * x * dy  # your code here

    return x ** 3, grad


print(ch10.check_cube_gradient(cube))

# %% [markdown]
# **3. Clip each example.** `grads` is a list with one tensor per variable, each with a
# leading batch axis (what `gl.per_example_gradients` returns). Write
# `clip_per_example(grads, clip_norm)` returning the same list with each example's gradient,
# taken over all variables together, scaled down to norm `clip_norm` when it is longer.

# %%
def clip_per_example(grads, clip_norm):
    return grads  # your code here


print(ch10.check_clip_per_example(clip_per_example))

# %% [markdown]
# **4. A gradient penalty.** Write `gradient_penalty(critic, x)`: the mean over the batch of
# $(\lVert \nabla_x D(x_i) \rVert_2 - 1)^2$, such that its gradient reaches the critic's
# weights (the check takes it with its own tape around your function).

# %%
def gradient_penalty(critic, x):
    return None  # your code here


print(ch10.check_gradient_penalty(gradient_penalty))

# %% [markdown]
# **5. Accumulate.** Write `accumulate(model, x, y, k)`: split the batch into `k` equal
# micro-batches, take the gradient of the mean squared error on each, and return their mean,
# one tensor per trainable variable.

# %%
def accumulate(model, x, y, k):
    return None  # your code here


print(ch10.check_accumulate(accumulate))

# %% [markdown]
# ## Solutions
#
# **1.** Step to both sides and divide by the distance between them, 2h:

# %% tags=["solution"]
def central_difference(f, x, h):
    return (f(x + h) - f(x - h)) / (2 * h)


print(ch10.check_central_difference(central_difference))

# %% [markdown]
# **2.** The derivative of $x^3$ is $3x^2$, times the incoming `dy`:

# %% tags=["solution"]
@tf.custom_gradient
def cube(x):
    def grad(dy):
        return 3.0 * x * x * dy

    return x ** 3, grad


print(ch10.check_cube_gradient(cube))

# %% [markdown]
# **3.** One norm per example over all variables (in float64), one factor per example:

# %% tags=["solution"]
def clip_per_example(grads, clip_norm):
    batch = grads[0].shape[0]
    squares = [tf.reduce_sum(tf.reshape(tf.square(tf.cast(g, tf.float64)), [batch, -1]), axis=1) for g in grads]
    norms = tf.sqrt(tf.add_n(squares))
    scale = tf.minimum(1.0, clip_norm / tf.maximum(norms, 1e-300))
    return [g * tf.cast(tf.reshape(scale, [batch] + [1] * (g.shape.rank - 1)), g.dtype) for g in grads]


print(ch10.check_clip_per_example(clip_per_example))

# %% [markdown]
# **4.** The inner tape watches `x`; its gradient is taken while the caller's tape records:

# %% tags=["solution"]
def gradient_penalty(critic, x):
    with tf.GradientTape() as inner:
        inner.watch(x)
        d = critic(x)
    g = inner.gradient(d, x)
    norm = tf.sqrt(tf.reduce_sum(tf.square(g), axis=1) + 1e-12)
    return tf.reduce_mean(tf.square(norm - 1.0))


print(ch10.check_gradient_penalty(gradient_penalty))

# %% [markdown]
# **5.** Add the micro-batch gradients, then divide by k:

# %% tags=["solution"]
def accumulate(model, x, y, k):
    total = [tf.zeros_like(v) for v in model.trainable_variables]
    for xm, ym in zip(tf.split(x, k), tf.split(y, k)):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(ym - model(xm)))
        total = [t + g for t, g in zip(total, tape.gradient(loss, model.trainable_variables))]
    return [t / k for t in total]


print(ch10.check_accumulate(accumulate))
