"""Latency benchmark of the TimeExplorer (chapter 07): ``python -m gradlab.bench_time``.

At 100 time steps (32 units, 8 inputs, batch 32) it times one control change of the
TimeExplorer (recompute with the engine's ``tf.function``, re-render the figure) and, in the
same run, the naive way of doing the same: build a new Keras model, take an eager tape over
it, draw a new figure. It prints p50 and p95 of both and their ratio (the issue asks for at
least 5x). A benchmark reports numbers; it does not pass or fail.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

__all__ = ["bench_time_explorer", "main"]


def _percentiles(samples) -> tuple[float, float]:
    a = np.asarray(samples) * 1e3
    return float(np.percentile(a, 50)), float(np.percentile(a, 95))


def time_time_explorer(steps: int = 100, changes: int = 30) -> list[float]:
    """Seconds per control change at ``steps``: alternate the cell, the input scale and the clip threshold."""
    from .widgets import TimeExplorer

    ex = TimeExplorer(cell="simple_rnn", steps=steps)
    cells = ("simple_rnn", "gru", "lstm")
    for c in cells:  # warm-up: one trace per cell, weights cached
        ex.cell.value = c
    ex.set(clip_mode="global_norm")
    samples = []
    for i in range(changes):
        t0 = time.perf_counter()
        if i % 3 == 0:
            ex.cell.value = cells[(i // 3) % 3]
        elif i % 3 == 1:
            ex.input_scale.value = (0.5, 1.0, 2.0)[(i // 3) % 3]
        else:
            ex.clip_norm.value = 10.0 ** ((i % 5) - 2)
        samples.append(time.perf_counter() - t0)
    return samples


def time_naive(steps: int = 100, changes: int = 6) -> list[float]:
    """Seconds per change done naively: new Keras model, eager tape, new figure each time."""
    from .plots import figure_png
    from .plots.recurrent import plot_time_report
    from .recurrent import build_rnn, make_sequence_data, time_report

    x, y = make_sequence_data(32, steps, 8, 0)
    cells = ("simple_rnn", "gru", "lstm")
    samples = []
    for i in range(changes):
        t0 = time.perf_counter()
        model = build_rnn(cells[i % 3], 32, 8, seed=0)
        figure_png(plot_time_report(time_report(model, x, y, clip=("global_norm", 1.0))))
        samples.append(time.perf_counter() - t0)
    return samples


def bench_time_explorer(steps: int = 100, changes: int = 30, naive_changes: int = 6,
                        *, verbose: bool = True) -> dict[str, float]:
    """Time the TimeExplorer against rebuilding a Keras model per change, in the same run.

    Returns ``{"steps", "explorer_p50_ms", "explorer_p95_ms", "naive_p50_ms", "naive_p95_ms",
    "speedup_p50", "speedup_p95"}`` and, with ``verbose``, prints them.
    """
    e50, e95 = _percentiles(time_time_explorer(steps, changes))
    n50, n95 = _percentiles(time_naive(steps, naive_changes))
    out = {"steps": steps, "explorer_p50_ms": e50, "explorer_p95_ms": e95, "naive_p50_ms": n50,
           "naive_p95_ms": n95, "speedup_p50": n50 / e50, "speedup_p95": n95 / e95}
    if verbose:
        print(f"TimeExplorer, {steps} steps (32 units, 8 inputs, batch 32): one control change = "
              "recompute + re-render")
        print(f"  explorer: p50 {e50:.1f} ms, p95 {e95:.1f} ms ({changes} changes)")
        print(f"  naive (new Keras model + eager tape + new figure): p50 {n50:.0f} ms, "
              f"p95 {n95:.0f} ms ({naive_changes} changes)")
        print(f"  speed-up: p50 {n50 / e50:.1f}x, p95 {n95 / e95:.1f}x (target: at least 5x)", flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=100, help="sequence length (default 100)")
    ap.add_argument("--changes", type=int, default=30, help="explorer control changes (default 30)")
    ap.add_argument("--naive-changes", type=int, default=6, help="naive rebuilds (default 6)")
    args = ap.parse_args(argv)
    if args.changes < 2 or args.naive_changes < 1 or not 5 <= args.steps <= 200:
        ap.error("--changes must be >= 2, --naive-changes >= 1, --steps 5 to 200")
    import gradlab

    gradlab.setup(seed=0)
    bench_time_explorer(args.steps, args.changes, args.naive_changes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
