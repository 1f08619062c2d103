"""Latency of every explorer against the naive way, in one run: ``python -m benchmarks.explorers``.

``make bench`` runs it. For each explorer (and every mode of chapter 05's GradientExplorer) it
times one control change to a setting not computed before (recompute + the view the page is
sent, what a slider move costs in the kernel; no picture: the page draws) p50 and p95, and in the same run the naive way of doing that change: a new Keras model
(or a new ``tf.function``), an eager tape, a new figure, a full PNG. It prints one table with
the ratio naive p50 / explorer p50 and the load average, because the machine may be shared and
only ratios measured in the same run compare. Targets (issue 19): the TimeExplorer at least
10×, every GradientExplorer mode at least 20×. A benchmark reports; it does not pass or fail.
``--only`` picks rows (``gradient``, ``time``, ``jacobian``, ``tracing``, ``tangent``, or an
explorer another chapter registers in :data:`ROWS`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: name → GradientExplorer settings of each benchmarked mode (chapter 05).
MODES: dict[str, dict] = {
    "plain": dict(),
    "residual": dict(residual=True),
    "batch norm": dict(norm="batch"),
    "layer norm": dict(norm="layer"),
    "residual+layer": dict(residual=True, norm="layer"),
    "float16 ×2^15": dict(dtype="float16", loss_scale=2**15),
    "bfloat16": dict(dtype="bfloat16"),
}


def percentiles(samples) -> tuple[float, float]:
    """(p50, p95) in milliseconds of ``samples`` in seconds."""
    a = np.asarray(samples) * 1e3
    return float(np.percentile(a, 50)), float(np.percentile(a, 95))


def timed(changes) -> list[float]:
    """Seconds each callable in ``changes`` takes."""
    out = []
    for change in changes:
        t0 = time.perf_counter()
        change()
        out.append(time.perf_counter() - t0)
    return out


# ----------------------------------------------------------------------------- GradientExplorer
def gradient_rows(depth: int = 100, changes: int = 20, naive_changes: int = 3):
    import keras

    import gradlab as gl
    from gradlab.models.mlp import build_mlp, make_data
    from gradlab.plots import figure_png, plot_report
    from gradlab.reports.gradients import gradient_report

    x, y = make_data(128, 64, 0)
    for name, mode in MODES.items():
        ex = gl.GradientExplorer(depth=depth, activation="sigmoid", advanced=True, **mode)
        for a in ("tanh", "sigmoid"):  # warm-up: one trace per activation, weights cached
            ex.activation.value = a
        ex.clip_mode.value = "global_norm"
        traces = ex.tracing_count()

        def change(i, ex=ex):
            # a setting not computed before each time (the explorer caches the reports it made)
            if i % 2:
                ex.clip_norm.value = 10 ** ((i % 5) - 2) * (1 + 1e-3 * i)
            else:
                ex.set(activation=("sigmoid", "tanh")[(i // 2) % 2], clip_norm=2 + 1e-3 * i)

        fast = timed([lambda i=i: change(i) for i in range(changes)])
        drag = timed([lambda i=i, ex=ex: setattr(ex.depth, "value", depth - 1 - i) for i in range(changes)])
        dtype = mode.get("dtype", "float32")

        def naive(i, mode=mode, dtype=dtype):
            if dtype != "float32":
                keras.mixed_precision.set_global_policy(f"mixed_{dtype}")
            try:
                model = build_mlp(depth, activation=("sigmoid", "tanh")[i % 2], seed=0,
                                  residual=mode.get("residual", False), norm=mode.get("norm"))
                report = gradient_report(model, x, y, clip=("global_norm", 1.0))
            finally:
                keras.mixed_precision.set_global_policy("float32")
            figure_png(plot_report(report))

        slow = timed([lambda i=i: naive(i) for i in range(naive_changes)])
        yield (f"GradientExplorer {name}", fast, slow, ex.tracing_count() - traces,
               f"new depth p50 {percentiles(drag)[0]:.0f} ms")


# ----------------------------------------------------------------------------- TimeExplorer
def time_rows(steps: int = 100, changes: int = 30, naive_changes: int = 6):
    import gradlab as gl
    from gradlab.models.rnn import build_rnn, make_sequence_data
    from gradlab.plots import figure_png
    from gradlab.plots.recurrent import plot_time_report
    from gradlab.reports.time import time_report

    ex = gl.TimeExplorer(cell="simple_rnn", steps=steps)
    cells = ("simple_rnn", "gru", "lstm")
    for c in cells:  # warm-up: one trace per cell, weights cached
        ex.cell.value = c
    ex.set(clip_mode="global_norm")
    traces = ex.tracing_count()

    def change(i):
        if i % 3 == 0:
            ex.cell.value = cells[(i // 3) % 3]
        elif i % 3 == 1:
            ex.input_scale.value = (0.5, 1.0, 2.0)[(i // 3) % 3]
        else:
            ex.clip_norm.value = 10.0 ** ((i % 5) - 2) * (1 + 1e-3 * i)  # never computed before

    fast = timed([lambda i=i: change(i) for i in range(changes)])
    x, y = make_sequence_data(32, steps, 8, 0)

    def naive(i):
        model = build_rnn(cells[i % 3], 32, 8, seed=0)
        figure_png(plot_time_report(time_report(model, x, y, clip=("global_norm", 1.0))))

    slow = timed([lambda i=i: naive(i) for i in range(naive_changes)])
    yield (f"TimeExplorer {steps} steps", fast, slow, ex.tracing_count() - traces, "")


# ----------------------------------------------------------------------------- TransformerExplorer
def transformer_rows(changes: int = 30, naive_changes: int = 4):
    """Chapter 09: per-block norms at 6 blocks, one change = a new depth or norm position."""
    from gradlab.models.transformer import build_transformer
    from gradlab.plots import figure_png
    from gradlab.plots.transformer import plot_block_norms
    from gradlab.reports.transformer import block_gradient_report
    from gradlab.widgets.transformer_explorer import TransformerExplorer

    ex = TransformerExplorer(num_layers=6)
    for position in ("post", "pre"):  # warm-up: the engine's one function traced once
        ex.norm_position.value = position
    traces = ex.tracing_count()
    settings = [(6, "post"), (6, "pre"), (5, "pre"), (6, "pre"), (5, "post"), (6, "post")]

    def change(i):
        depth, position = settings[i % len(settings)]
        ex._reports.clear()  # a report is a pure function of (blocks, position): time the computation
        ex.set(num_layers=depth, norm_position=position)

    fast = timed([lambda i=i: change(i) for i in range(changes)])
    x, y = ex.data

    def naive(i):
        depth, position = settings[i % len(settings)]
        model = build_transformer(depth, norm_position=position)
        report = block_gradient_report(model, x, y)
        figure_png(plot_block_norms({position: report}))

    slow = timed([lambda i=i: naive(i) for i in range(naive_changes)])
    yield ("TransformerExplorer 6 blocks", fast, slow, ex.tracing_count() - traces, "")


# ----------------------------------------------------------------------------- the small explorers
def jacobian_rows(changes: int = 20, naive_changes: int = 6):
    import gradlab as gl
    from gradlab.plots import figure_png, plot_jacobian
    from gradlab.topics.jacobians import JACOBIAN_FUNCTIONS
    from gradlab.topics.tracing import tf

    v = gl.JacobianViewer(function="softmax", size=16)
    for n in (15, 16, 17):
        v.size.value = n
    traces = v.tracing_count()
    fast = timed([lambda i=i: setattr(v.size, "value", 15 + i % 3) for i in range(changes)])
    spec = JACOBIAN_FUNCTIONS["softmax"]

    def naive(i):
        x, params = spec.inputs(15 + i % 3)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = spec(x, *params)
        figure_png(plot_jacobian(tape.jacobian(y, x).numpy()))

    slow = timed([lambda i=i: naive(i) for i in range(naive_changes)])
    yield ("JacobianViewer softmax n≈16", fast, slow, v.tracing_count() - traces,
           "each change also times all three methods")


def tracing_rows(changes: int = 20, naive_changes: int = 6):
    import gradlab as gl
    from gradlab.plots import figure_png
    from gradlab.plots.view import view_figure
    from gradlab.topics.tracing import tf

    lab = gl.TracingLab(value=0.1, mode="tensor")
    lab.value.value = 0.2
    traces = lab.tracing_count()
    fast = timed([lambda i=i: setattr(lab.value, "value", round(0.3 + 0.01 * i, 2)) for i in range(changes)])

    def naive(i):
        fn = tf.function(lambda lr: lr * 2.0)  # a new tf.function per call: a trace each time
        fn(tf.constant(0.1 * i))
        figure_png(view_figure(lab.view))  # the picture of the same view

    slow = timed([lambda i=i: naive(i) for i in range(naive_changes)])
    yield ("TracingLab tensor mode", fast, slow, lab.tracing_count() - traces, "")


def tangent_rows(changes: int = 20, naive_changes: int = 6):
    import gradlab as gl
    from gradlab.plots import figure_png
    from gradlab.plots.view import view_figure
    from gradlab.topics.intro import slope_and_step, toy_loss

    t = gl.TangentExplorer()
    fast = timed([lambda i=i: setattr(t.w, "value", round(-0.5 + 0.05 * i, 2)) for i in range(changes)])
    ws = np.linspace(-1.0, 5.0, 241, dtype=np.float32)

    def naive(i):
        w = -0.5 + 0.05 * i
        loss, slope, w_next = slope_and_step(w, 0.3)
        float(toy_loss(np.float32(w_next)).numpy()), toy_loss(ws).numpy()
        figure_png(view_figure(t.view))  # a new figure of the same view

    slow = timed([lambda i=i: naive(i) for i in range(naive_changes)])
    yield ("TangentExplorer", fast, slow, 0, "")


#: The rows ``--only`` can pick; another explorer adds its own generator here.
ROWS = {"gradient": gradient_rows, "time": time_rows, "jacobian": jacobian_rows,
        "tracing": tracing_rows, "tangent": tangent_rows, "transformer": transformer_rows}
TARGETS = {"GradientExplorer": 20.0, "TimeExplorer": 10.0, "TransformerExplorer": 10.0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=",".join(ROWS), help="comma-separated rows: " + ", ".join(ROWS))
    ap.add_argument("--depth", type=int, default=100, help="GradientExplorer depth (default 100)")
    ap.add_argument("--steps", type=int, default=100, help="TimeExplorer steps (default 100)")
    args = ap.parse_args(argv)
    only = [r.strip() for r in args.only.split(",") if r.strip()]
    bad = [r for r in only if r not in ROWS]
    if bad:
        ap.error(f"unknown row(s) {bad}; allowed: {', '.join(ROWS)}")
    import gradlab

    gradlab.setup(seed=0)
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())} on {os.cpu_count()} CPUs")
    print(f"{'explorer / mode':<34} {'p50 ms':>7} {'p95 ms':>7} {'naive p50':>10} {'naive p95':>10}"
          f" {'speed-up':>9} {'retraces':>9}  notes")
    for row in only:
        kwargs = {"gradient": dict(depth=args.depth), "time": dict(steps=args.steps)}.get(row, {})
        for name, fast, slow, retraces, note in ROWS[row](**kwargs):
            p50, p95 = percentiles(fast)
            n50, n95 = percentiles(slow)
            target = next((v for k, v in TARGETS.items() if name.startswith(k)), None)
            mark = "" if target is None else (" ok" if n50 / p50 >= target else f" < {target:g}x")
            print(f"{name:<34} {p50:7.1f} {p95:7.1f} {n50:10.0f} {n95:10.0f} {n50 / p50:8.1f}x"
                  f" {retraces:>9}  {note}{mark}", flush=True)
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print("targets: TimeExplorer >= 10x, every GradientExplorer mode >= 20x (naive p50 / explorer p50)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
