"""Latency benchmark of the GradientExplorer: ``python -m gradlab.bench`` (``make bench``).

For depth 10, 50 and 100 (width 64, batch 128) it times one control change, i.e. the
recompute and the re-render of the figure, and reports p50 and p95. It also times the naive
way of doing the same (rebuild a Keras model, take an eager tape, draw a new figure) at
depth 100, and prints both from the same run with their ratio. A benchmark reports numbers;
it does not pass or fail.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def _percentiles(samples):
    a = np.asarray(samples) * 1e3
    return float(np.percentile(a, 50)), float(np.percentile(a, 95))


def time_explorer(depth: int, changes: int = 40) -> list[float]:
    """Seconds per control change at ``depth``: alternate the clip threshold and activation."""
    from .widgets import GradientExplorer

    ex = GradientExplorer(depth=depth, activation="sigmoid")
    acts = ("sigmoid", "tanh", "relu", "gelu")
    for a in acts:  # warm-up: one trace per activation, weights cached
        ex.activation.value = a
    samples = []
    for i in range(changes):
        t0 = time.perf_counter()
        if i % 2:
            ex.clip_norm.value = 10 ** ((i % 5) - 2)
        else:
            ex.activation.value = acts[(i // 2) % len(acts)]
        samples.append(time.perf_counter() - t0)
    return samples


def time_naive(depth: int, changes: int = 8) -> list[float]:
    """Seconds per change done naively: new Keras model, eager tape, new figure each time."""
    from .grads import gradient_report
    from .mlp import build_mlp, make_data
    from .plots import figure_png, plot_report

    x, y = make_data(128, 64, 0)
    samples = []
    for i in range(changes):
        t0 = time.perf_counter()
        model = build_mlp(depth, activation=("sigmoid", "tanh")[i % 2], seed=0)
        fig = plot_report(gradient_report(model, x, y))
        figure_png(fig)
        samples.append(time.perf_counter() - t0)
    return samples


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--changes", type=int, default=40, help="control changes per depth (default 40)")
    ap.add_argument("--naive-changes", type=int, default=8, help="naive rebuilds at depth 100 (default 8)")
    args = ap.parse_args(argv)
    if args.changes < 2 or args.naive_changes < 1:
        ap.error("--changes must be >= 2 and --naive-changes >= 1")
    import gradlab

    gradlab.setup(seed=0)
    print("GradientExplorer: one control change = recompute + re-render (width 64, batch 128)")
    print(f"{'depth':>6} {'p50 ms':>8} {'p95 ms':>8}")
    p100 = None
    for depth in (10, 50, 100):
        p50, p95 = _percentiles(time_explorer(depth, args.changes))
        print(f"{depth:>6} {p50:8.1f} {p95:8.1f}", flush=True)
        if depth == 100:
            p100 = (p50, p95)
    n50, n95 = _percentiles(time_naive(100, args.naive_changes))
    print(f"naive (Keras rebuild + eager tape + new figure), depth 100: p50 {n50:.0f} ms, p95 {n95:.0f} ms")
    print(f"speed-up at depth 100: p50 {n50 / p100[0]:.1f}x, p95 {n95 / p100[1]:.1f}x")
    print("target: p50 <= 50 ms and p95 <= 100 ms at depth 100 on a 2-core CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
