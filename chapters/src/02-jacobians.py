# %% [markdown]
# # Non-scalar targets and Jacobians · 非标量求导的维度匹配问题

# %% [markdown]
# **What you will learn**
#
# - what `tape.gradient` returns when the target is a vector or a matrix, and why its result
#   always has the source's shape;
# - to build a Jacobian with `tape.jacobian`, and one block per example with
#   `tape.batch_jacobian`, which gives wrong numbers without any error when examples interact;
# - what `persistent=True` keeps alive, and when `del tape` matters;
# - why a gradient comes back `None`, seven ways, each with its fix, and what the common
#   shape errors mean;
# - optionally, going deeper: vector-Jacobian and Jacobian-vector products, forward vs
#   reverse mode, how `tape.jacobian` vectorises (pfor), and Hessians; and the
#   **JacobianViewer** to explore Jacobians live.

# %% [markdown]
# ## Setup

# %%
import gradlab as gl  # noqa: I001  (first: it imports TensorFlow quietly)
import numpy as np
import tensorflow as tf
from gradlab.exercises import ch02

gl.setup(seed=0)

# %% [markdown]
# ## Take the gradient of a vector · 非标量求导
#
# The source text opens this section with:
#
# > 当对非标量（如向量或矩阵）求导时，梯度的维度需要与原始变量匹配。TensorFlow自动处理这一点，但开发者需注意维度一致。
# >
# > (When you differentiate a non-scalar such as a vector or a matrix, the gradient's
# > dimensions must match the original variable. TensorFlow handles this automatically, but
# > developers should watch the dimensions.)
#
# What does "handles this automatically" mean? A gradient answers "how does one number
# change when I nudge each element of `x`?". With a vector target `y` there are several
# numbers. `tape.gradient` then quietly differentiates their **sum**:

# %%
x = tf.Variable([1.0, 2.0, 3.0])

with tf.GradientTape(persistent=True) as tape:
    y = x**2  # a vector of 3 numbers
    y_sum = tf.reduce_sum(y)  # one number

print("gradient of y:      ", tape.gradient(y, x).numpy())  # 2*x = [2. 4. 6.]
print("gradient of sum(y): ", tape.gradient(y_sum, x).numpy())  # the same
del tape

# %% [markdown]
# A list of targets is treated the same way: you get the gradient of their sum, not one
# gradient per target.

# %%
with tf.GradientTape() as tape:
    y1 = x**2
    y2 = 10.0 * x

print("gradient of [y1, y2]:", tape.gradient([y1, y2], x).numpy())  # 2*x + 10 = [12. 14. 16.]

# %% [markdown]
# So the result of `tape.gradient` always has the **source's** shape, whatever the target's
# shape is. Here the source is a 2×3 matrix and the target a vector of 4:

# %%
w = tf.Variable(tf.ones([2, 3]))
with tf.GradientTape() as tape:
    target = tf.reduce_sum(w) * tf.constant([1.0, 2.0, 3.0, 4.0])  # shape (4,)

print("target shape:  ", target.shape)  # (4,)
print("gradient shape:", tape.gradient(target, w).shape)  # (2, 3), like w

# %% [markdown]
# That is what the source's "dimensions match" means: the gradient matches the *variable*.
# The price is that the per-element information is gone: from `[2. 4. 6.]` you cannot tell
# which element of `y` moved. When you need it, you need the **Jacobian**: one row per
# element of the target, one column per element of the source.
#
# The three tape methods give three different answers. `gl.topics.jacobians.shape_table()` calls each one on
# a grid of target and source shapes and reports what really came back:

# %%
print(gl.topics.jacobians.format_shape_table(gl.topics.jacobians.shape_table()))

# %% [markdown]
# Read it column by column:
#
# - `gradient`: always the source's shape (the target is summed away);
# - `jacobian`: target shape followed by source shape, every element against every element;
# - `batch_jacobian`: needs target and source to share the first (batch) axis, and returns
#   `(batch,) + target.shape[1:] + source.shape[1:]`: one Jacobian per example. Every other
#   combination is an error.

# %% [markdown]
# ## Build a Jacobian · 示例：计算Jacobian矩阵
#
# The source text builds the Jacobian of $y = x^2$ with a loop over the elements of `y`.
# Here is its code exactly as written:

# %% tags=["raises-exception"]
# 定义变量和函数
x = tf.Variable([1.0, 2.0, 3.0])

with tf.GradientTape(persistent=True) as tape:
    y = x**2  # y是一个向量，形状为[3]

# 计算Jacobian矩阵：每个输出元素对每个输入元素的梯度
jacobian = []
for i in range(len(y)):
    grad = tape.gradient(y[i], x)  # grad形状与x相同，为[3]
    jacobian.append(grad)
jacobian = tf.stack(jacobian)  # 形状为[3, 3]
print("Jacobian矩阵形状:", jacobian.shape)

# %% [markdown]
# It never reaches the `print`. `tf.stack` raised before its result could be assigned, so
# the name `jacobian` still holds the Python list that the loop built. The comment says each
# `grad` has shape `[3]`; look at what the list really holds:

# %%
print("grads in the list:", jacobian)  # [None, None, None]: the list, never reassigned

# %% [markdown]
# Every gradient is `None`, and `tf.stack` cannot stack `None`. The reason is *where*
# `y[i]` is computed. Slicing is an operation like any other, and it runs after the `with`
# block has closed, so the tape never recorded it. From the tape's point of view `y[i]` is a
# brand-new tensor with no recorded path back to `x`, and "no path" means `None`.
#
# Repairing the loop is exercise 2. The loop is also slow: one `tape.gradient` call per
# element of the target. `tape.jacobian` does the whole job in one call:

# %%
with tf.GradientTape() as tape:
    y = x**2

print(tape.jacobian(y, x).numpy())  # diag(2x) = diag([2, 4, 6])

# %% [markdown]
# How can one call compute every row? `tape.jacobian` uses **pfor** ("parallel for"),
# TensorFlow's automatic vectoriser: instead of running the backward pass once per row, it
# rewrites the backward pass once so that it processes all rows together, as one batched
# computation. The optional section at the end of the chapter shows what pfor does when it
# cannot vectorise an op, and what it costs.
#
# ### One Jacobian per example: `batch_jacobian`
#
# A layer applied to a batch maps `x` of shape `(batch, n)` to `y` of shape
# `(batch, units)`. Its full Jacobian has shape `(batch, units, batch, n)`. Here is one for a
# `Dense(3, activation="tanh")` layer on a batch of 4 examples with 5 features:

# %%
layer = tf.keras.layers.Dense(3, activation="tanh", kernel_initializer=tf.keras.initializers.GlorotUniform(seed=1))
xb = tf.random.stateless_normal([4, 5], seed=[0, 1])
full = gl.topics.jacobians.jacobian(layer, xb)
print("full Jacobian shape:", full.shape)  # (4, 3, 4, 5)

# %%
gl.plots.plot_jacobian(full, title="Dense(3, tanh) on a batch of 4")

# %% [markdown]
# Flattened to a 12 × 20 matrix it is **block diagonal**: example 1's outputs depend only on
# example 1's inputs, so every off-diagonal block is zero. `tape.jacobian` computed those
# zeros anyway. `tape.batch_jacobian` computes only the diagonal blocks:

# %%
bj = gl.topics.jacobians.batch_jacobian(layer, xb)
print("batch_jacobian shape:", bj.shape)  # (4, 3, 5)
print("equals the diagonal blocks:", np.allclose(bj, gl.topics.jacobians.diagonal_blocks(full), atol=1e-6))  # True

# %% [markdown]
# How does it get them so cheaply? For output unit $j$ it differentiates
# $\sum_b y_{b,j}$, the sum over the batch, with respect to the whole batch `x`. Row $b$ of
# that gradient is $\sum_{b'} \partial y_{b',j}/\partial x_b$. This equals the block
# $\partial y_{b,j}/\partial x_b$ **only if** no other example $b'$ depends on $x_b$.
#
# If the examples are coupled, `batch_jacobian` still returns an array of the right shape,
# with wrong numbers and no error. Centering a batch (subtracting the batch mean, the first
# step of batch normalization) couples all examples:

# %%
def center(x):
    return x - tf.reduce_mean(x, axis=0)  # every output depends on every example


xc = tf.reshape(tf.range(12, dtype=tf.float32), [4, 3])
full_c = gl.topics.jacobians.jacobian(center, xc)
true_blocks = gl.topics.jacobians.diagonal_blocks(full_c)
bj_c = gl.topics.jacobians.batch_jacobian(center, xc)
print("true block of example 0:\n", true_blocks[0])  # (1 - 1/4) * I = 0.75 * I
print("batch_jacobian's block 0:\n", bj_c[0])  # all zeros: wrong
print("largest error:", np.abs(bj_c - true_blocks).max())  # 0.75

# %% [markdown]
# The picture puts all three side by side, each drawn as the full 12 × 12 Jacobian: the
# per-example blocks sit on the diagonal where they belong, and the grey cells are the
# entries `batch_jacobian` never computes. Every cell shows its number.

# %%
gl.plots.plot_block_diagonals(full_c, {"true diagonal blocks": true_blocks, "batch_jacobian": bj_c})

# %% [markdown]
# In the full Jacobian every off-diagonal block holds $-1/4$ on its diagonal. For each
# example, `batch_jacobian` added its own block ($0.75$) to the three cross-example blocks
# ($-0.25$ each) and got $0$: its panel is all zeros. Before you trust `batch_jacobian`,
# check on a small batch that the cross-example entries are zero:

# %%
print("Dense layer, largest cross-example entry:", gl.topics.jacobians.cross_example_max(full))  # 0.0: safe
print("centering,   largest cross-example entry:", gl.topics.jacobians.cross_example_max(full_c))  # 0.25: unsafe

# %% [markdown]
# ## Use persistent tapes with care · persistent=True 与 del tape
#
# The source text:
#
# > 使用persistent=True：允许多次求导，但需手动释放资源以避免内存泄漏，使用后调用del tape。
# >
# > (`persistent=True` allows taking gradients several times, but you must release the
# > resources by hand to avoid a memory leak: call `del tape` after use.)
#
# The first half is true: [chapter 00](00-introduction.ipynb) showed that an ordinary tape
# answers one `gradient` call and raises `RuntimeError` on the second, and the section on
# vector targets above read a persistent tape twice.
#
# What does a persistent tape keep alive? Every intermediate tensor that some gradient
# needs. Below, `a = x * 2` is needed by the gradient of `sin(a)`. We drop our own name for
# `a` and keep only a *weak reference*, which does not keep it alive; it reports whether
# anything else still does:

# %%
import weakref

with tf.GradientTape(persistent=True) as tape:
    a = x * 2
    a_ref = weakref.ref(a)
    y = tf.sin(a)
del a  # our own reference is gone

print("a still alive while the tape exists:", a_ref() is not None)  # True
del tape
print("a still alive after del tape:       ", a_ref() is not None)  # False

# %% [markdown]
# So `del tape` does free the recorded tensors. But it is not a leak in the usual sense:
# Python frees the tape as soon as nothing refers to it any more. Leaving a function whose
# local variable was the tape has the same effect:

# %%
def gradient_twice(x):
    with tf.GradientTape(persistent=True) as t:
        a = x * 2
        a_ref = weakref.ref(a)
        y = tf.sin(a)
    return t.gradient(y, x), t.gradient(a, x), a_ref


g1, g2, a_ref = gradient_twice(x)
print("two gradients from one tape:", np.round(g1.numpy(), 4), g2.numpy())
print("a alive after the function returned:", a_ref() is not None)  # False

# %% [markdown]
# `del tape` matters where the name lives long: at the top level of a notebook or script,
# or inside a long training loop. There the tape and everything it recorded stay in memory
# until the name is deleted or rebound.

# %% [markdown]
# ## Find out why a gradient is `None`
#
# `tape.gradient` returns `None` when it finds no recorded path from the target back to the
# source. It does not raise an error, so the `None` often surfaces much later, e.g. in
# `optimizer.apply_gradients`, which skips that variable with only a warning and raises only
# when *every* gradient is `None` ([chapter 06](06-none-and-nan.ipynb) shows both). Here are
# seven common causes, each next to its fix.
#
# **1. An integer dtype.** Only floating-point tensors have gradients:

# %%
xi = tf.constant(3)
with tf.GradientTape() as tape:
    tape.watch(xi)
    y = xi * xi
print("int32:  ", tape.gradient(y, xi))  # None

xf = tf.constant(3.0)
with tf.GradientTape() as tape:
    tape.watch(xf)
    y = xf * xf
print("float32:", tape.gradient(y, xf).numpy())  # 2*3 = 6.0

# %% [markdown]
# **2. A NumPy round-trip.** `.numpy()` leaves TensorFlow; the tape cannot see what NumPy
# does:

# %%
with tf.GradientTape() as tape:
    y = tf.constant(np.square(x.numpy()))  # computed by NumPy
print("through NumPy:", tape.gradient(y, x))  # None

with tf.GradientTape() as tape:
    y = tf.square(x)  # computed by TensorFlow
print("through TF:   ", tape.gradient(y, x).numpy())  # 2x = [2. 4. 6.]

# %% [markdown]
# **3. `v = v + 1` on a variable.** The tape watches *variables* automatically. `v + 1` is a
# new plain tensor, and rebinding the name `v` to it means the next step watches nothing:

# %%
v = tf.Variable(2.0)
for step in range(2):
    with tf.GradientTape() as tape:
        y = v * v
    print(f"step {step}: v is a {type(v).__name__:<11} gradient {tape.gradient(y, v)}")
    v = v + 1  # now a plain tensor, no longer a Variable

# %%
v = tf.Variable(2.0)
for step in range(2):
    with tf.GradientTape() as tape:
        y = v * v
    print(f"step {step}: gradient {tape.gradient(y, v).numpy()}")  # 2v: 4.0 then 6.0
    v.assign_add(1.0)  # updates the variable in place

# %% [markdown]
# **4. An unwatched tensor.** Constants are not watched unless you ask:

# %%
c = tf.constant(3.0)
with tf.GradientTape() as tape:
    y = c * c
print("unwatched:", tape.gradient(y, c))  # None

with tf.GradientTape() as tape:
    tape.watch(c)
    y = c * c
print("watched:  ", tape.gradient(y, c).numpy())  # 6.0

# %% [markdown]
# **5. A state change.** `assign_add` changes a variable's state; the tape does not
# differentiate through state changes, so the path from `x0` into `x1` is lost:

# %%
x0 = tf.Variable(3.0)
x1 = tf.Variable(0.0)
with tf.GradientTape() as tape:
    x1.assign_add(x0)  # x1 = x1 + x0, as a state change
    y = x1**2
print("through assign_add:", tape.gradient(y, x0))  # None

with tf.GradientTape() as tape:
    y = (x1 + x0) ** 2  # the same value as an ordinary expression (x1 is now 3.0)
print("through +:         ", tape.gradient(y, x0).numpy())  # 2*(3+3) = 12.0

# %% [markdown]
# **6. Work done outside the tape.** This is the source's loop again: anything computed
# before the `with` block opens or after it closes is invisible to the tape:

# %%
y = x**2  # before the tape
with tf.GradientTape() as tape:
    z = tf.reduce_sum(y)
print("y computed outside:", tape.gradient(z, x))  # None

with tf.GradientTape() as tape:
    y = x**2
    z = tf.reduce_sum(y)
print("y computed inside: ", tape.gradient(z, x).numpy())  # [2. 4. 6.]

# %% [markdown]
# **7. A source that truly does not matter.** Sometimes `None` is the right answer: the
# target does not depend on the source at all. If you want zeros instead (for instance to
# feed an optimizer a full list), say so:

# %%
unused = tf.Variable([1.0, 1.0])
with tf.GradientTape(persistent=True) as tape:
    y = tf.reduce_sum(x**2)
print("default:", tape.gradient(y, unused))  # None
print("ZERO:   ", tape.gradient(y, unused, unconnected_gradients=tf.UnconnectedGradients.ZERO).numpy())  # [0. 0.]
del tape

# %% [markdown]
# Use `ZERO` only when you *know* the source is unused. It also hides the six bugs above.

# %% [markdown]
# ## Read the shape error messages · 维度不匹配错误
#
# The source text's advice on mismatched dimensions:
#
# > 确保在调用tape.gradient时，目标变量与损失函数关联正确。……如果损失是非标量，需指定grad_ys参数。
# >
# > (Make sure that the target is correctly related to the loss when you call
# > `tape.gradient`. ... If the loss is non-scalar, you need to specify the `grad_ys`
# > argument.)
#
# Run the second half as stated, on a non-scalar `y`:

# %% tags=["raises-exception"]
with tf.GradientTape() as tape:
    y = x**2

tape.gradient(y, x, grad_ys=tf.ones(3))

# %% [markdown]
# `grad_ys` is the name of this argument in `tf.gradients`, the TensorFlow 1 function that
# differentiates a graph. Called eagerly, which is how TensorFlow 2 runs by default, it
# refuses to run at all:

# %%
try:
    tf.gradients(tf.square(x), x, grad_ys=tf.ones(3))
except RuntimeError as err:
    print("RuntimeError:", err)

# %% [markdown]
# Inside a `tf.function`, where the code is traced into a graph (chapter 03), `tf.gradients`
# still works, `grad_ys` included:

# %%
@tf.function
def graph_gradients(x):
    return tf.gradients(tf.square(x), x, grad_ys=tf.constant([1.0, -3.0, 0.5]))[0]


print("tf.gradients in a tf.function:", graph_gradients(x).numpy())  # grad_ys * 2x = [2. -12. 3.]

# %% [markdown]
# `GradientTape.gradient` calls the argument **`output_gradients`**. It is also not
# *required*: without it the tape weights every output by 1, which is the "gradient of the
# sum" from the start of the chapter. A vector $v$ of the target's shape weights the outputs
# instead, and the tape returns the gradient of $\sum_i v_i y_i$:

# %%
with tf.GradientTape() as tape:
    y = x**2
print("weighted:", tape.gradient(y, x, output_gradients=tf.constant([1.0, -3.0, 0.5])).numpy())  # [2. -12. 3.]

# %% [markdown]
# In practice, shape problems announce themselves in a few recurring messages.
#
# **`Attempt to convert a value (None) ...`**: a `None` gradient reached a TensorFlow
# function. We met it at the source's `tf.stack`. Look for one of the seven causes above.
#
# **`Incompatible shapes`**: `output_gradients` must have the target's shape:

# %% tags=["raises-exception"]
with tf.GradientTape() as tape:
    y = x**2  # shape (3,)
tape.gradient(y, x, output_gradients=tf.ones(4))

# %% [markdown]
# Worse, a shape that *broadcasts* raises nothing. A column of shape `(3, 1)` broadcast
# against `y`'s `(3,)` makes a 3 × 3 grid, and the "gradient" comes back with a shape that is
# not even `x`'s:

# %%
with tf.GradientTape() as tape:
    y = x**2
g = tape.gradient(y, x, output_gradients=tf.ones([3, 1]))
print("x shape:", x.shape, " 'gradient' shape:", g.shape)  # (3,) vs (3, 3)

# %% [markdown]
# So "the gradient has the source's shape" holds only when `output_gradients` has the
# target's exact shape. Check `v.shape == y.shape` yourself (`gl.topics.jacobians.vjp` does).
#
# **`Shape (3,) must have rank at least 2`**: `batch_jacobian` needs a batch axis on both
# sides:

# %% tags=["raises-exception"]
with tf.GradientTape() as tape:
    y = x**2
tape.batch_jacobian(y, x)

# %% [markdown]
# Use `tape.jacobian` for a single vector, or add a batch axis of one (`x[None]`).
#
# **`Matrix size-incompatible`**: the forward pass itself is wrong, long before any
# gradient. The message names both shapes; here a `(2, 3)` times a `(2, 3)`:

# %% tags=["raises-exception"]
tf.matmul(tf.ones([2, 3]), tf.ones([2, 3]))

# %% [markdown]
# ## Go deeper (optional) · 进阶
#
# The rest of the chapter is for a second reading: what `output_gradients` computes in the
# language of linear algebra, forward mode, how `tape.jacobian` vectorises and what that
# costs, and second derivatives. Exercise 3 uses the first subsection; the others are not
# needed for chapters 03 and 04.
#
# ### Multiply by the Jacobian without building it · VJP and JVP
#
# The weighted gradient above is the **vector-Jacobian product** $J^\top v$: the Jacobian
# $J$ is never built. Check it on a function with 3 inputs and 2 outputs:

# %%
def f(x):
    return tf.tanh(tf.linalg.matvec(tf.constant([[1.0, -2.0, 0.5], [0.3, 0.8, -1.0]]), x))


x3 = tf.constant([0.5, -0.2, 1.0])
v = tf.constant([1.0, -3.0])
with tf.GradientTape() as tape:
    tape.watch(x3)
    y = f(x3)
vjp = tape.gradient(y, x3, output_gradients=v)
J = gl.topics.jacobians.jacobian(f, x3)
print("J shape:", J.shape)  # (2, 3): 2 outputs, 3 inputs
print("output_gradients=v:", np.round(vjp.numpy(), 4))
print("J.T @ v:           ", np.round(J.T @ v.numpy(), 4))  # the same

# %% [markdown]
# `v` must have the target's shape and the result has the source's shape, so one backward
# pass gives one weighted combination of the Jacobian's **rows**. Reverse mode therefore
# needs one pass per *output* to build the full Jacobian.
#
# Forward mode goes the other way. `tf.autodiff.ForwardAccumulator` carries a direction $u$
# in input space forward through the computation and returns the **Jacobian-vector
# product** $J u$: one combination of the Jacobian's **columns** per pass. Its two
# arguments have names from the forward-mode literature: the **primals** are the point
# where you differentiate (here `x3`), the **tangents** the direction $u$ you push through,
# one per primal and of the same shape.

# %%
u = tf.constant([1.0, 0.0, 2.0])
with tf.autodiff.ForwardAccumulator(primals=x3, tangents=u) as acc:
    y = f(x3)

print("ForwardAccumulator jvp:", np.round(acc.jvp(y).numpy(), 4))
print("J @ u:                 ", np.round(J @ u.numpy(), 4))  # the same

# %% [markdown]
# ### Forward vs reverse mode, measured
#
# `gl.topics.jacobians.vjp(f, x, v)` and `gl.topics.jacobians.jvp(f, x, u)` wrap both. Which one builds a full Jacobian faster?
# Reverse mode needs one pass per output, forward mode one pass per input. So for a function
# with **many inputs and few outputs** (a loss: millions of weights, one number) reverse mode
# should win, and for **few inputs and many outputs** forward mode should. The next cell
# measures it for $y = \tanh(Wx)$, building the full Jacobian both ways (each vectorised, as
# `tape.jacobian` is), once with many inputs and 4 outputs and once the other way round.
# Both axes of the plot are logarithmic. The numbers depend on your machine, so this cell's
# output (and the next one's, which is computed from it) is not compared when the notebook
# is tested.

# %% tags=["nbval-ignore-output"]
timing = gl.topics.jacobian_timing.time_forward_reverse(sizes=(4, 16, 64, 256, 1024), fixed=4)
gl.plots.plot_forward_reverse(timing)

# %% [markdown]
# At small sizes fixed overheads dominate and the two modes are hard to tell apart. As a
# side grows, the mode that needs one pass per element of that side should fall behind. The
# next cell reads your measurement at the largest size and says which mode won each way
# round. Expect reverse mode to win with 1024 inputs and forward mode with 1024 outputs; on
# a busy machine a single measurement can still come out the other way, so re-run the
# timing cell if it does.

# %% tags=["nbval-ignore-output"]
wide_in, wide_out = timing.wide_inputs, timing.wide_outputs
print("1024 inputs,  4 outputs: reverse faster?", bool(wide_in["reverse"][-1] < wide_in["forward"][-1]))  # expected True
print("4 inputs, 1024 outputs: forward faster?", bool(wide_out["forward"][-1] < wide_out["reverse"][-1]))  # expected True

# %% [markdown]
# This is why training uses reverse mode (back-propagation): a loss is one number. Forward
# mode earns its place when there are few inputs, for example the sensitivity of a whole
# output image to one scalar parameter.
#
# ### How `tape.jacobian` works: pfor, its fallback and its cost
#
# `tape.jacobian(..., experimental_use_pfor=False)` switches pfor off and computes the rows
# one at a time in a `tf.while_loop`. Each row reads the tape again, and a non-persistent
# tape may only be read once, so eagerly this fails:

# %% tags=["raises-exception"]
with tf.GradientTape() as tape:
    y = x**2

tape.jacobian(y, x, experimental_use_pfor=False)

# %% [markdown]
# The message says *with eager execution enabled*, and it means it. Inside a `tf.function`
# the loop becomes part of the graph, which computes every row from the same recorded
# forward pass, and the same code works with an ordinary tape:

# %%
@tf.function
def jacobian_by_loop(x):
    with tf.GradientTape() as tape:  # not persistent
        y = x**2
    return tape.jacobian(y, x, experimental_use_pfor=False)


print(jacobian_by_loop(x).numpy())  # diag([2, 4, 6])

# %% [markdown]
# Eagerly, a persistent tape makes the loop work too:

# %%
with tf.GradientTape(persistent=True) as tape:
    y = x**2

print(tape.jacobian(y, x, experimental_use_pfor=False).numpy())  # diag([2, 4, 6])
del tape

# %% [markdown]
# **What if pfor cannot vectorise an op?** pfor has a conversion rule for most ops, not all.
# For an op without one, `tape.jacobian` does not raise: pfor quietly runs that op in a
# `tf.while_loop` over the rows (its `fallback_to_while_loop` option, on by default, which
# `tape.jacobian` leaves on) and logs `Using a while_loop for converting ...` only at DEBUG level, which you
# never see. The gradient of `tf.image.resize` (the op `ResizeBilinearGrad`) is one such
# op. The Jacobian comes back, right, without a word:

# %%
def upscale(v):  # a 4-vector as a 2 × 2 image, resized to 3 × 3 and flattened
    return tf.reshape(tf.image.resize(tf.reshape(v, [1, 2, 2, 1]), [3, 3]), [-1])


v4 = tf.constant([0.5, 1.0, 2.0, 1.5])
with tf.GradientTape(persistent=True) as tape:
    tape.watch(v4)
    up = upscale(v4)
j_pfor = tape.jacobian(up, v4)  # nothing printed, no warning
j_loop = tape.jacobian(up, v4, experimental_use_pfor=False)
del tape
print("shape:", j_pfor.shape, " same as the loop:", np.allclose(j_pfor, j_loop))  # (9, 4) True

# %% [markdown]
# `gl.topics.jacobians.pfor_fallbacks(f, x)` computes the same Jacobian with TensorFlow's logger at DEBUG
# level, collected into a list instead of the screen, and returns the fallback messages:

# %%
_, fallbacks = gl.topics.jacobians.pfor_fallbacks(upscale, v4)
print(fallbacks)  # the op that fell back to a while_loop
_, fallbacks = gl.topics.jacobians.pfor_fallbacks(f, x3)
print(fallbacks)  # [] for tanh(W x): fully vectorised

# %% [markdown]
# A fallback costs speed, not correctness. What does pfor buy when it works? The next cell
# times `tape.jacobian` of $\tanh(Wx)$ with $W$ of size $n \times n$, with pfor and with the
# while_loop, inside a `tf.function` and eagerly (machine-dependent, so not compared):

# %% tags=["nbval-ignore-output"]
pfor_timing = gl.topics.jacobian_timing.time_pfor_vs_loop(sizes=(16, 64, 256), repeats=5)
speedups = pfor_timing.speedups()
print("n:                                ", pfor_timing.sizes)
print("eager, pfor, ms:                  ", np.round(1e3 * pfor_timing.eager["pfor"], 2))
print("eager, while_loop, ms:            ", np.round(1e3 * pfor_timing.eager["while_loop"], 2))
print("speed-up of pfor, tf.function (×):", np.round(speedups["graph"], 2))
print("speed-up of pfor, eager (×):      ", np.round(speedups["eager"], 2))

# %% [markdown]
# Inside a `tf.function` pfor is at least as fast as the loop, and its lead grows with $n$
# (at $n = 256$ between 3× and 28× across seven runs on the machine that built this
# notebook: on a shared machine the exact factor varies a lot from run to run). Called eagerly, `tape.jacobian`
# converts the backward pass with pfor anew on *every* call, which costs tens to hundreds of
# milliseconds whatever the size (the first row of times). So for a small Jacobian the plain
# loop was faster there (a speed-up below 1 at $n = 16$), and pfor pulled ahead only as the
# Jacobian grew. "pfor is faster" holds for large Jacobians and for compiled code.
#
# The price of vectorising is memory: all rows are in flight at once. The knob for that is
# `parallel_iterations`: it caps how many rows are computed together, and pfor then works
# through the rows in chunks of that many. The result is the same:

# %%
with tf.GradientTape(persistent=True) as tape:
    y = x**2
print(tape.jacobian(y, x, parallel_iterations=2).numpy())  # rows in chunks of 2: diag([2, 4, 6])
del tape

# %% [markdown]
# ### Go to second order · Hessian
#
# You can call `gradient` **inside** the `with` block of a persistent tape. The tape then
# also records the gradient computation itself. That is wasteful for a first derivative,
# and TensorFlow warns about it (the warning shows when the log level lets warnings
# through), but it is exactly what a second derivative needs:

# %%
tf.get_logger().setLevel("WARNING")
with tf.GradientTape(persistent=True) as tape:
    y = x**3
    dy = tape.gradient(y, x)  # inside: recorded
print("dy/dx:  ", dy.numpy())  # 3x² = [3. 12. 27.]
print("d²y/dx²:", tape.gradient(dy, x).numpy())  # 6x = [6. 12. 18.]
del tape
tf.get_logger().setLevel("ERROR")

# %% [markdown]
# Two nested tapes are the cleaner way. The Hessian of a scalar function is the Jacobian of
# its gradient: compute the gradient with an inner tape *while an outer tape records*, then
# ask the outer tape for the Jacobian. For $f(x) = \tfrac12 x^\top A x$ the Hessian is $A$:

# %%
A = tf.constant([[2.0, 1.0, 0.0], [1.0, 3.0, -1.0], [0.0, -1.0, 4.0]])
xq = tf.constant([1.0, -2.0, 0.5])

with tf.GradientTape() as outer:
    outer.watch(xq)
    with tf.GradientTape() as inner:
        inner.watch(xq)
        fq = 0.5 * tf.tensordot(xq, tf.linalg.matvec(A, xq), 1)
    g = inner.gradient(fq, xq)  # A x, shape (3,)
H = outer.jacobian(g, xq)
print("gradient:", g.numpy())  # A @ x = [ 0.  -5.5  4. ]
print("Hessian:\n", H.numpy())  # A

# %% [markdown]
# A Hessian has $n^2$ entries: for a model with a million weights that is $10^{12}$
# numbers. Optimisers and curvature estimates usually need only a **Hessian-vector
# product** $Hv$. Push a forward-mode tangent $v$ through the gradient computation
# (forward over reverse):

# %%
vq = tf.constant([1.0, 2.0, -1.0])
with tf.autodiff.ForwardAccumulator(primals=xq, tangents=vq) as acc:
    with tf.GradientTape() as tape:
        tape.watch(xq)
        fq = 0.5 * tf.tensordot(xq, tf.linalg.matvec(A, xq), 1)
    g = tape.gradient(fq, xq)
print("Hv by forward over reverse:", acc.jvp(g).numpy())  # A @ v = [ 4.  8. -6.]
print("H @ v:                     ", (H.numpy() @ vq.numpy()))

# %% [markdown]
# `gl.topics.jacobians.hessian(f, x)` and `gl.topics.jacobians.hvp(f, x, v)` wrap both; `gl.topics.jacobians.hvp(..., method="reverse_over_reverse")`
# instead differentiates $g \cdot v$ with an outer tape, which gives the same vector.

# %%
def quad(x):
    return 0.5 * tf.tensordot(x, tf.linalg.matvec(A, x), 1)


print("forward over reverse:", gl.topics.jacobians.hvp(quad, xq, vq))  # [ 4.  8. -6.]
print("reverse over reverse:", gl.topics.jacobians.hvp(quad, xq, vq, method="reverse_over_reverse"))  # the same

# %% [markdown]
# How much does an HVP cost? A rule of thumb says "about two gradients": forward over
# reverse carries a tangent along the gradient computation, reverse over reverse runs a
# second backward pass through it. The next cell times a two-layer loss as a function of
# its first layer's 65 536 weights ($256 \times 256$),
# its gradient and both HVPs, each compiled. The four are called in turn, 30 rounds, and the
# cell prints each one's time as a multiple of the gradient's in the same round (the
# median over rounds; machine-dependent, so not compared):

# %% tags=["nbval-ignore-output"]
hvp_timing = gl.topics.jacobian_timing.time_gradient_vs_hvp(n=256, repeats=30)
labels = {"loss": "the loss", "gradient": "the gradient", "hvp forward_over_reverse": "HVP, forward over reverse",
          "hvp reverse_over_reverse": "HVP, reverse over reverse"}
for name, ratio in hvp_timing.relative().items():
    print(f"{gl.i18n.pad(labels[name], 29)} {ratio:5.2f} × the gradient's time")

# %% [markdown]
# On the machine that built this notebook, over several runs, both HVPs took about 1.3 to
# 2.5 times as long as one gradient: the rule of thumb holds. What matters more is the memory:
# an HVP needs vectors the size of the 65 536 weights, never the $65\,536 \times 65\,536$ Hessian.

# %% [markdown]
# ## Explore Jacobians interactively
#
# The **JacobianViewer** computes the Jacobian of one of four functions with all three
# methods and shows it as a heatmap (red positive, blue negative, white zero) with its shape:
#
# - `square`: $y = x^2$ elementwise; $J = \mathrm{diag}(2x)$, only a diagonal;
# - `matvec_tanh`: $y = \tanh(Wx)$; $J = \mathrm{diag}(1 - \tanh^2(Wx))\,W$, dense;
# - `softmax`: $J = \mathrm{diag}(s) - s s^\top$, dense, each row sums to 0;
# - `dense_batch`: a `Dense(3, tanh)` layer over a batch of 4; $J$ is block diagonal.
#
# Pick a function and a size `n`. The status line under the plot says how long
# `tape.jacobian`, `tape.batch_jacobian` and the element-by-element loop took. The compiled
# functions accept any size, so moving the slider does not retrace them (the cell after the
# viewer counts it).

# %%
viewer = gl.JacobianViewer(function="softmax", size=8)
viewer

# %% [markdown]
# The controls are ordinary attributes, so a cell can drive the viewer too. The cells below
# drive a copy, `lab = viewer.copy()` (it shares the compiled functions), so the viewer above
# keeps its settings. Setting a value recomputes everything before the assignment returns.
# `lab.snapshot()` stores a picture of the new state, so a saved copy of the notebook shows it too:

# %%
lab = viewer.copy()
lab.function.value = "dense_batch"
lab.size.value = 6
print(lab.description_text)  # dense_batch · n=6 → jacobian shape (4, 3, 4, 6)
print("rows of the heatmap:", int(np.prod(lab.jacobian.shape[:2])))  # 4 examples × 3 units = 12
lab.snapshot()

# %% [markdown]
# `lab.tracing_count()` counts the traces of the viewer's compiled functions. Each
# function is traced once for `tape.jacobian` and once for `tape.batch_jacobian` the first
# time it is chosen; after that, new sizes reuse the graphs:

# %%
before = lab.tracing_count()
for n in [3, 12, 5, 16]:
    lab.size.value = n  # what moving the slider does
print("traces before the size changes:", before)  # 4: softmax and dense_batch, 2 each
print("traces after 4 new sizes:      ", lab.tracing_count())  # still 4
lab.size.value = 6

# %% [markdown]
# The timings of the current setting (they vary from machine to machine and run to run, so
# this output is not compared):

# %% tags=["nbval-ignore-output"]
print(lab.status_text)

# %% [markdown]
# Try the sizes yourself. On most machines the loop is the slowest of the three and falls
# further behind as `n` grows, because it makes one eager `tape.gradient` call per output
# element.
#
# ## Summary
#
# - `tape.gradient` of a non-scalar target returns the gradient of the **sum** of its
#   elements, in the **source's** shape; a list of targets gives the sum of their gradients.
# - A Jacobian holds every output element against every input element. Build it with
#   `tape.jacobian` rather than a Python loop, and slice *inside* the tape if you loop.
# - `tape.batch_jacobian` returns only the per-example blocks. It is correct **only** when
#   examples do not interact (not after batch-wise operations such as centering or batch
#   normalization), and otherwise gives wrong numbers silently.
# - A persistent tape keeps its intermediates until nothing refers to it; `del tape` is the
#   explicit way to drop it.
# - A `None` gradient means "no recorded path": an integer dtype, a NumPy round-trip,
#   rebinding a variable, an unwatched tensor, a state change, work outside the tape, or a
#   source that really is unused.
# - `output_gradients=v` (not `grad_ys`) weights the outputs and must have the target's
#   exact shape; one that broadcasts gives a "gradient" of the wrong shape without an error.
# - Going deeper: `output_gradients` gives $J^\top v$, `ForwardAccumulator` gives $Jv$;
#   reverse mode wins for many inputs and few outputs. `tape.jacobian` vectorises with pfor,
#   falls back to a loop silently for ops it cannot convert, and bounds its memory with
#   `parallel_iterations`. Hessians come from nested tapes; a Hessian-vector product costs a
#   small multiple of a gradient and never builds the Hessian.
#
# ### What the notebook showed about each claim of the source section
#
# | Source claim | What running it showed |
# |---|---|
# | For a non-scalar target the gradient's dimensions match the variable; TensorFlow handles it. | True: `gradient` returns the source's shape by summing the target. Exception: an `output_gradients` that broadcasts gives a gradient of another shape. |
# | The loop `tape.gradient(y[i], x)` gives a `[3]` gradient per row and a `[3, 3]` Jacobian. | False as written: `y[i]` is computed after the tape closed, every gradient is `None`, and `tf.stack` raises `ValueError`. `tape.jacobian` does it in one call; repairing the loop is exercise 2. |
# | With a non-scalar loss you must pass `grad_ys`. | `GradientTape.gradient` has no `grad_ys` (`TypeError`); the argument is `output_gradients`, and it is optional: the default weights every output by 1. `grad_ys` belongs to `tf.gradients`, which raises `RuntimeError` eagerly and works inside a `tf.function`. |
# | `persistent=True` allows several gradient calls. | True; a plain tape raises `RuntimeError` on the second call (chapter 00). |
# | A persistent tape must be released with `del tape` to avoid a memory leak. | Half true: the tape keeps its intermediates alive and `del tape` frees them, but so does any loss of the last reference (e.g. returning from a function). It matters for long-lived names. |
# | Make sure the target is correctly related to the loss. | Made concrete: the seven causes of `None` and four shape error messages above. |

# %% [markdown]
# ## Exercises
#
# Each exercise has a stub marked `# your code here` and a self-check from
# `gradlab.exercises.ch02`. As shipped, the stubs are empty and the checks say what is
# missing; worked answers are in [Solutions](#Solutions) at the end, collapsed.
#
# **1. The softmax Jacobian.** Compute the Jacobian of `tf.nn.softmax` at `z` with
# `tape.jacobian`. By this chapter's convention row $i$ holds the derivatives of output
# $s_i$ and column $j$ those with respect to input $z_j$. Every **row** should sum to zero:
# adding the same constant to every input leaves a softmax unchanged, so moving all inputs
# together changes no output. Every **column** sums to zero too, for another reason: the
# outputs always add up to 1, so nudging one input cannot change their total. (The softmax
# Jacobian is symmetric, so here the two facts coincide.)

# %%
z = tf.constant(ch02.SOFTMAX_Z)  # [0.5, -1.0, 2.0, 0.0]

j_softmax = None  # your code here

print(ch02.check_softmax_jacobian(j_softmax))

# %% [markdown]
# **2. Repair the source's loop.** Here is the source text's loop again (it is run near the
# top of this chapter, where every row comes back `None`):
#
# ```python
# with tf.GradientTape(persistent=True) as tape:
#     y = x**2
# jacobian = []
# for i in range(len(y)):
#     grad = tape.gradient(y[i], x)
#     jacobian.append(grad)
# jacobian = tf.stack(jacobian)
# ```
#
# Rewrite it so that it really produces the 3 × 3 Jacobian of `x**2`, keeping one
# `tape.gradient` call per element of `y`. The check tells you what your result holds if it
# is not yet right.

# %%
x = tf.Variable([1.0, 2.0, 3.0])

my_jacobian = None  # your code here

print(ch02.check_loop_jacobian(my_jacobian))

# %% [markdown]
# **3. One row of a Jacobian without the Jacobian.** For `f` and `x3` from the optional VJP
# section, get the second row of the Jacobian (row 1, the gradient of the second output)
# with a single `tape.gradient` call and a suitable `output_gradients`.

# %%
row_1 = None  # your code here

print(ch02.check_jacobian_row(row_1, f, x3))

# %% [markdown]
# **4. Is `batch_jacobian` safe here?** Read the function `layer_norm` below: which axis
# do its mean and variance run over? Decide whether `batch_jacobian` gives the right blocks
# for it (`True` or `False`), then confirm with `gl.topics.jacobians.cross_example_max`.

# %%
def layer_norm(x):
    mean, var = tf.nn.moments(x, axes=[1], keepdims=True)
    return (x - mean) / tf.sqrt(var + 1e-3)


my_answer = None  # your code here: True or False

print(ch02.check_batch_jacobian_safe(my_answer, layer_norm))

# %% [markdown]
# ## Solutions
#
# **1.** Watch `z` (a constant), compute the softmax inside the tape, and ask for the
# Jacobian:

# %% tags=["solution"]
with tf.GradientTape() as tape:
    tape.watch(z)
    s = tf.nn.softmax(z)
j_softmax = tape.jacobian(s, z)
print(ch02.check_softmax_jacobian(j_softmax))

# %% [markdown]
# **2.** Take the slices while the tape is recording (a persistent tape, because it is read
# once per row):

# %% tags=["solution"]
with tf.GradientTape(persistent=True) as tape:
    y = x**2
    elements = [y[i] for i in range(len(y))]  # sliced while recording
my_jacobian = tf.stack([tape.gradient(e, x) for e in elements])
del tape
print(ch02.check_loop_jacobian(my_jacobian))

# %% [markdown]
# **3.** Weight the outputs with the **one-hot** vector $(0, 1)$, a vector of zeros with a
# single 1 at the position of the output you want: $J^\top e_1$ is row 1 of $J$:

# %% tags=["solution"]
with tf.GradientTape() as tape:
    tape.watch(x3)
    y = f(x3)
row_1 = tape.gradient(y, x3, output_gradients=tf.constant([0.0, 1.0]))
print(ch02.check_jacobian_row(row_1, f, x3))

# %% [markdown]
# **4.** Safe: each example's mean and variance come from its own features only, so no
# output depends on another example, and the cross-example blocks are zero:

# %% tags=["solution"]
print("largest cross-example entry:",
      gl.topics.jacobians.cross_example_max(gl.topics.jacobians.jacobian(layer_norm, tf.random.stateless_normal([3, 4], seed=[0, 2]))))  # 0.0
print(ch02.check_batch_jacobian_safe(True, layer_norm))
