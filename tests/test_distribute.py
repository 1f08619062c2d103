"""gradlab.train.distribute and gradlab's training steps under tf.distribute (chapter 08).

The pytest process has imported gradlab with one CPU device, and TensorFlow's devices cannot
change after that. Everything that needs two logical devices runs in one subprocess started
with GRADLAB_LOGICAL_CPUS=2, and the two MultiWorkerMirroredStrategy workers run as real
processes; each compares its numbers with an independent single-device computation.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import gradlab as gl
from gradlab._env import split_cpu_from_env
from gradlab.exercises import ch08

tf = gl.session.quiet_import_tensorflow()
ROOT = Path(__file__).resolve().parents[1]


def _start_python(code: str, env_extra: dict) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2", **env_extra)
    return subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _children() -> set[int]:
    """Process ids of this process's children (Linux /proc)."""
    out = set()
    for task in Path("/proc/self/task").iterdir():
        text = (task / "children").read_text().split()
        out.update(int(t) for t in text)
    return out


def _independent_sgd_run(steps=3, batch=16, lr=0.1, clip=0.5, seed=0):
    """train_toy's training written out with a tape, tf.clip_by_global_norm and assign_sub."""
    x, y = gl.train.distribute.toy_data(n=batch * steps, seed=seed)
    model = gl.train.distribute.toy_model(seed=seed)
    losses = []
    for i in range(steps):
        xb, yb = x[i * batch:(i + 1) * batch], y[i * batch:(i + 1) * batch]
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(yb - model(xb)))
        grads = tape.gradient(loss, model.trainable_variables)
        grads, _ = tf.clip_by_global_norm(grads, clip)
        for v, g in zip(model.trainable_variables, grads, strict=True):
            v.assign_sub(lr * g)
        losses.append(float(loss))
    return losses, [v.numpy() for v in model.trainable_variables]


@pytest.fixture(scope="module", autouse=True)
def mirrored_process():
    """The two-device subprocess, started before this module's first test so that it runs
    while the other tests do; killed at the end if it is still running."""
    proc = _start_python(MIRRORED, {"GRADLAB_LOGICAL_CPUS": "2"})
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.communicate()


# ----------------------------------------------------------------------------- in this process
def test_toy_data_and_model_are_reproducible():
    x1, y1 = gl.train.distribute.toy_data(n=8, seed=3)
    x2, y2 = gl.train.distribute.toy_data(n=8, seed=3)
    assert x1.shape == (8, 4) and y1.shape == (8, 1)
    np.testing.assert_array_equal(x1, x2)
    np.testing.assert_array_equal(y1, y2)
    assert not np.allclose(x1, gl.train.distribute.toy_data(n=8, seed=4)[0])
    a, b = gl.train.distribute.toy_model(seed=1), gl.train.distribute.toy_model(seed=1)
    assert gl.train.distribute.max_abs_difference(a.get_weights(), b.get_weights()) == 0.0


def test_max_abs_difference_and_free_ports():
    assert gl.train.distribute.max_abs_difference([np.zeros(3)], [np.array([0.0, -2.5, 1.0])]) == 2.5
    with pytest.raises(ValueError, match="same number"):
        gl.train.distribute.max_abs_difference([np.zeros(2)], [])
    with pytest.raises(ValueError, match="same shapes"):
        gl.train.distribute.max_abs_difference([np.zeros(2)], [np.zeros(3)])
    ports = gl.train.distribute.free_ports(3)
    assert len(set(ports)) == 3 and all(1024 <= p < 65536 for p in ports)


def test_bad_input_raises_value_error_naming_the_argument():
    with pytest.raises(ValueError, match="num_replicas must be at most the 1 logical CPU.*GRADLAB_LOGICAL_CPUS"):
        gl.train.distribute.mirrored_strategy(2)  # this process was started without the split
    with pytest.raises(ValueError, match="strategy must be a tf.distribute.Strategy"):
        gl.core.split_batch("mirrored", np.zeros((4, 1)), np.zeros((4, 1)))
    x, y = gl.train.distribute.toy_data(n=6)
    with pytest.raises(ValueError, match="steps must divide the 6 examples"):
        gl.train.distribute.compare_accumulation(x, y, lambda **kw: tf.keras.optimizers.SGD(0.1, **kw), steps=4)
    with pytest.raises(ValueError, match="clip must be None or a number > 0"):
        gl.train.distribute.train_toy(clip=-1.0)
    with pytest.raises(ValueError, match=r"clip must be a global-norm threshold.*got None"):
        gl.train.distribute.compare_clipping(None, None, x, y, None)
    with pytest.raises(ValueError, match=r"clip must be a global-norm threshold.*'value'"):
        gl.train.distribute.compare_clipping(None, None, x, y, ("value", 0.5))
    with pytest.raises(ValueError, match="batch must be divisible by num_workers=2"):
        gl.train.distribute.run_workers(2, batch=15)


@pytest.mark.parametrize("fn", ["compare_clipping", "train_toy", "run_workers"])
def test_the_old_clip_norm_spelling_names_clip(fn):
    # one clip keyword across gradlab (issue 27): clip_norm= is answered before any work starts
    with pytest.raises(TypeError, match=rf"{fn}\(\) takes clip= instead of clip_norm="):
        getattr(gl.train.distribute, fn)(clip_norm=0.5)
    assert "clip_norm" not in inspect.signature(getattr(gl.train.distribute, fn)).parameters


def test_single_device_gradients_against_a_hand_derivative():
    x, y = gl.train.distribute.toy_data(n=8)
    model = gl.train.distribute.toy_model(seed=0)
    w1, b1, w2, b2 = (v.numpy().astype(np.float64) for v in model.trainable_variables)
    h = np.tanh(x @ w1 + b1)
    err = h @ w2 + b2 - y  # d(mean sq err)/d(pred) = 2 err / n
    d_pred = 2 * err / len(x)
    expected_w2 = h.T @ d_pred
    d_h = d_pred @ w2.T * (1 - h**2)
    expected_w1 = x.T @ d_h
    got = gl.train.distribute.single_device_gradients(model, x, y)
    np.testing.assert_allclose(got[0], expected_w1, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got[2], expected_w2, rtol=1e-4, atol=1e-6)


def test_gradient_accumulation_equals_one_larger_batch_on_one_device():
    x, y = gl.train.distribute.toy_data(n=16)
    for make in (lambda **kw: tf.keras.optimizers.SGD(0.1, **kw),
                 lambda **kw: tf.keras.optimizers.Adam(0.01, **kw)):
        result = gl.train.distribute.compare_accumulation(x, y, make, steps=2)
        assert result.error is None
        assert result.update_norm > 1e-3  # a real update happened
        assert result.max_abs_difference < 1e-6


def test_reference_run_equals_an_independent_loop():
    ref = gl.train.distribute.reference_run(steps=3)
    losses, weights = _independent_sgd_run(steps=3)
    assert ref["replicas"] == 1
    np.testing.assert_allclose(ref["losses"], losses, rtol=1e-6)
    assert gl.train.distribute.max_abs_difference(ref["weights"], weights) < 1e-6
    assert max(ref["grad_norms"]) > 0.5  # the clip at 0.5 really binds in this run


def test_exercise_checks_accept_answers_and_explain_wrong_ones():
    assert ch08.check_replica_loss(lambda p, b: tf.nn.compute_average_loss(p, global_batch_size=b))
    wrong = ch08.check_replica_loss(lambda p, b: tf.reduce_mean(p))
    assert not wrong and "number of replicas" in wrong.feedback
    assert not ch08.check_replica_loss(None)

    def good(replica_grads, clip):
        return tf.clip_by_global_norm([tf.add_n(p) for p in zip(*replica_grads, strict=True)], clip)[0]

    def before(replica_grads, clip):
        clipped = [tf.clip_by_global_norm(g, clip)[0] for g in replica_grads]
        return [tf.add_n(p) for p in zip(*clipped, strict=True)]

    assert ch08.check_clip_summed(good)
    bad = ch08.check_clip_summed(before)
    assert not bad and "Add first, then clip" in bad.feedback
    pair = ch08.check_clip_summed(lambda g, c: tf.clip_by_global_norm([tf.add_n(p) for p in zip(*g, strict=True)], c))
    assert not pair and "pair" in pair.feedback


def test_bad_logical_cpu_setting_is_a_clear_error(monkeypatch):
    for bad in ("two", "0", "-1", "65"):
        monkeypatch.setenv("GRADLAB_LOGICAL_CPUS", bad)
        with pytest.raises(ValueError, match=f"GRADLAB_LOGICAL_CPUS must be an int from 1 to 64; got '{bad}'"):
            split_cpu_from_env(tf)
    monkeypatch.setenv("GRADLAB_LOGICAL_CPUS", "1")
    split_cpu_from_env(tf)  # one device: nothing to split, nothing raised although TF is initialized


# ----------------------------------------------------------------------------- two worker processes
def test_two_real_workers_match_one_process(capsys):
    before = _children()
    run = gl.train.distribute.run_workers(2, steps=3, timeout=600, progress=True)
    out = capsys.readouterr().out  # the bar: one stage per worker, then the run in this process
    assert out.rsplit("\r", 1)[-1] == "multi-worker training ▕" + "█" * 20 + "▏ 3/3\n"
    assert "▏ 1/3 worker 0\r" in out and "▏ 2/3 worker 1\r" in out and "▏ 3/3 one process\r" in out
    assert [w["task"]["index"] for w in run.workers] == [0, 1]
    assert all(w["replicas"] == 2 for w in run.workers)
    assert run.workers_agree
    losses, weights = _independent_sgd_run(steps=3)
    for w in run.workers:
        np.testing.assert_allclose(w["losses"], losses, rtol=1e-5)
        assert gl.train.distribute.max_abs_difference(w["weights"], weights) < 1e-5
    assert run.max_abs_difference < 1e-5
    assert _children() <= before  # every worker was reaped


def test_workers_are_killed_at_the_timeout():
    before = _children()
    with pytest.raises(RuntimeError, match="did not finish within timeout=0.5 s"):
        gl.train.distribute.run_workers(2, timeout=0.5, progress=False)
    assert _children() <= before


# ----------------------------------------------------------------------------- two logical devices
MIRRORED = textwrap.dedent(
    """
    import json
    import numpy as np
    import gradlab as gl
    import keras
    import tensorflow as tf

    gl.setup(seed=0, plots=False)
    s = gl.train.distribute.mirrored_strategy(2)
    x, y = gl.train.distribute.toy_data(n=32)
    model = gl.train.distribute.toy_model()
    r = {"devices": len(tf.config.list_logical_devices("CPU")), "replicas": s.num_replicas_in_sync}

    # an independent single-device gradient (its own tape, float64 norm)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(y - model(x)))
    ref = [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]
    ref_norm = float(np.sqrt(sum(np.sum(np.square(g.astype(np.float64))) for g in ref)))
    for red in ("global", "per_replica"):
        local, summed = gl.train.distribute.replica_gradients(s, model, x, y, loss_reduction=red)
        r[red + "_error"] = gl.train.distribute.max_abs_difference(summed, ref)
        r[red + "_ratio"] = float(np.sqrt(sum(np.sum(np.square(g.astype(np.float64))) for g in summed))) / ref_norm
        r[red + "_local_sum_error"] = gl.train.distribute.max_abs_difference([a + b for a, b in zip(*local)], summed)
    ls = gl.train.distribute.compare_loss_scaling(s, model, x, y)
    r["scaling_ratio"] = ls.ratio
    c = gl.train.distribute.compare_clipping(s, model, x, y, 0.5)
    r["clip"] = dict(after=c.clip_after_error, before=c.clip_before_error, after_norm=c.clip_after_norm,
                     before_norm=c.clip_before_norm, summed=c.summed_norm, single=c.single_norm, ref_norm=ref_norm,
                     replicas=list(c.replica_norms))

    # sample weights across replicas, against an independent weighted tape (Keras: sum(w * l) / B)
    w = np.linspace(0.0, 2.0, 32).astype("float32")
    with tf.GradientTape() as tape:
        wl = tf.reduce_sum(tf.reduce_mean(tf.square(y - model(x)), axis=-1) * w) / 32
    wref = [g.numpy() for g in tape.gradient(wl, model.trainable_variables)]
    _l, wsum = gl.train.distribute.replica_gradients(s, model, x, y, sample_weight=w)
    r["weighted_error"] = gl.train.distribute.max_abs_difference(wsum, wref)
    r["weighted_vs_unweighted"] = gl.train.distribute.max_abs_difference(wref, ref)

    # make_train_step with a compiled loss under the strategy: Keras's losses divide by the replicas
    # themselves, so the step must not divide again
    with s.scope():
        cm = gl.train.distribute.toy_model()
        cm.compile(optimizer="sgd", loss="mse")
        copt = keras.optimizers.SGD(0.1)
    om = gl.train.distribute.toy_model()
    om.compile(optimizer="sgd", loss="mse")
    co = gl.make_train_step(cm, copt)(x[:16], y[:16])
    oo = gl.make_train_step(om, keras.optimizers.SGD(0.1))(x[:16], y[:16])
    r["compiled_step"] = dict(loss=float(co["loss"]), one_loss=float(oo["loss"]),
                              moved=gl.train.distribute.max_abs_difference([v.numpy() for v in cm.trainable_variables],
                                                                     [v.numpy() for v in om.trainable_variables]))

    # make_train_step under the strategy (the test compares it with one device), a NaN batch
    # skipped on both replicas
    r["step"] = gl.train.distribute.train_toy(s, steps=3)
    with s.scope():
        m = gl.train.distribute.toy_model()
        opt = keras.optimizers.SGD(0.1)
    step = gl.make_train_step(m, opt, clip=0.5)
    before = [v.numpy() for v in m.trainable_variables]
    bad_y = y[:16].copy()
    bad_y[3] = np.nan  # on replica 0 only: replica 1 must skip too
    out = step(x[:16], bad_y)
    r["nan_step"] = dict(applied=bool(out["applied"]), finite=bool(out["finite"]),
                         moved=gl.train.distribute.max_abs_difference(before, [v.numpy() for v in m.trainable_variables]))
    for i in range(3):
        step(x[:16], y[:16])
    r["traces"] = gl.tracing_count(step)

    # GradNormSequential: fit under the strategy (the test compares it with one device)
    with s.scope():
        gm = gl.GradNormSequential(gl.train.distribute.toy_model().layers, clip=0.5)
        gm.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    h = gm.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0).history
    r["gns"] = dict(loss=h["loss"], grad_norm=h["grad_norm"], skipped=h["skipped_steps"],
                    weights=[v.numpy().tolist() for v in gm.trainable_variables])
    with s.scope():
        gm = gl.GradNormSequential(gl.train.distribute.toy_model().layers, clip=0.5)
        gm.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    start = [v.numpy() for v in gm.trainable_variables]
    y_nan = y.copy()
    y_nan[20] = np.nan  # one bad example on replica 1 of the second batch
    h = gm.fit(x, y_nan, batch_size=16, epochs=1, shuffle=False, verbose=0).history
    r["gns_nan"] = dict(skipped=h["skipped_steps"], moved=gl.train.distribute.max_abs_difference(start, [v.numpy() for v in gm.trainable_variables]))

    # Keras 3 optimizer clipping under fit, and accumulation under the strategy
    SGD = keras.optimizers.SGD
    r["fit"] = {k: gl.train.distribute.compare_fit(s, x, y, f).max_abs_difference for k, f in (
        ("plain", lambda: SGD(0.1)), ("global_clipnorm", lambda: SGD(0.1, global_clipnorm=0.5)))}
    r["accum_error"] = gl.train.distribute.compare_accumulation(x, y, lambda **k: SGD(0.1, **k), strategy=s).error
    print(json.dumps(r))
    """
)


@pytest.fixture(scope="module")
def mirrored(mirrored_process):
    try:
        out, err = mirrored_process.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        pytest.fail("the two-device subprocess did not finish within 180 s")
    assert mirrored_process.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def test_logical_devices_from_the_environment(mirrored):
    assert mirrored["devices"] == 2 and mirrored["replicas"] == 2


def test_loss_scaling_factor_is_the_number_of_replicas(mirrored):
    assert mirrored["global_error"] < 1e-6
    assert abs(mirrored["global_ratio"] - 1.0) < 1e-6
    assert abs(mirrored["per_replica_ratio"] - 2.0) < 1e-5
    assert abs(mirrored["scaling_ratio"] - 2.0) < 1e-5
    assert mirrored["per_replica_error"] > 1e-2
    assert mirrored["global_local_sum_error"] < 1e-6  # the all-reduce is the sum of the replicas


def test_clipping_after_the_all_reduce_matches_one_device(mirrored):
    c = mirrored["clip"]
    assert abs(c["summed"] - c["ref_norm"]) < 1e-5 * c["ref_norm"]
    assert abs(c["single"] - c["ref_norm"]) < 1e-5 * c["ref_norm"]
    assert all(abs(n - c["ref_norm"]) > 0.1 for n in c["replicas"])
    assert c["after"] < 1e-6 and abs(c["after_norm"] - 0.5) < 1e-6
    assert c["before"] > 1e-2 and c["before_norm"] > 0.6


def test_make_train_step_under_the_strategy(mirrored):
    st = mirrored["step"]
    losses, weights = _independent_sgd_run(steps=3)
    assert st["replicas"] == 2
    assert gl.train.distribute.max_abs_difference(st["weights"], weights) < 1e-6
    np.testing.assert_allclose(st["losses"], losses, rtol=1e-5)
    np.testing.assert_allclose(st["grad_norms"], gl.train.distribute.reference_run(steps=3)["grad_norms"], rtol=1e-5)
    nan = mirrored["nan_step"]
    assert nan == {"applied": False, "finite": False, "moved": 0.0}
    assert mirrored["traces"] == 1


def test_grad_norm_train_step_under_the_strategy(mirrored):
    g = mirrored["gns"]
    x, y = gl.train.distribute.toy_data(n=32)
    one = gl.GradNormSequential(gl.train.distribute.toy_model().layers, clip=0.5)
    one.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
    h = one.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0).history
    assert gl.train.distribute.max_abs_difference(g["weights"], one.get_weights()) < 1e-6
    np.testing.assert_allclose(g["loss"], h["loss"], rtol=1e-5)
    np.testing.assert_allclose(g["grad_norm"], h["grad_norm"], rtol=1e-5)
    assert g["skipped"] == [0.0, 0.0]
    assert mirrored["gns_nan"]["skipped"] == [1.0]
    assert mirrored["gns_nan"]["moved"] > 1e-3  # the first, finite batch was applied


def test_keras_fit_clips_before_the_all_reduce(mirrored):
    """Documents Keras 3.15: a binding global_clipnorm differs under a strategy (chapter 08 says so)."""
    fit = mirrored["fit"]
    assert fit["plain"] < 1e-6
    assert fit["global_clipnorm"] > 1e-3
    assert "merge_call" in mirrored["accum_error"]


def test_sample_weights_and_a_compiled_loss_under_the_strategy(mirrored):
    assert mirrored["weighted_error"] < 1e-6 and mirrored["weighted_vs_unweighted"] > 1e-3
    c = mirrored["compiled_step"]
    assert c["loss"] == pytest.approx(c["one_loss"], rel=1e-6)  # the global-batch loss, not half of it
    assert c["moved"] < 1e-6  # the same update as one device


def test_reports_print_float_rounding_as_a_bound():
    assert gl.train.distribute.rounding_bound(6e-8) == "< 1e-6" and gl.train.distribute.rounding_bound(0.0082) == "0.0082"
    fit = gl.train.distribute.FitComparison("plain SGD", 6e-8, 1.5)
    assert "< 1e-6" in str(fit) and "6e-08" not in str(fit)
