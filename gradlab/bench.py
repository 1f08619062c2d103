"""Latency benchmark of the GradientExplorer: ``python -m gradlab.bench`` (``make bench``).

For every mode of chapter 05 (plain, residual, batch norm, layer norm, residual + layer
norm, float16 with a loss scale, bfloat16) it times, at depth 100 (width 64, batch 128):

* one control change in the explorer (recompute + theory curve + blitted re-render of the
  figure + PNG), alternating the activation and the clip threshold, p50 and p95;
* a depth drag (99, 100, 99, ...), which reuses the cached background;
* the naive way of doing the same change in the same run: rebuild a Keras model, take an
  eager tape (``gradient_report``), draw a new figure and encode it.

It prints one table with the ratio naive p50 / explorer p50 per mode, then the same
comparison for chapter 07's TimeExplorer at 100 steps (:mod:`gradlab.bench_time`). A benchmark reports
numbers; it does not pass or fail (``--modes`` picks a subset, ``--changes`` the sample size).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

#: name → explorer settings of each benchmarked mode.
MODES: dict[str, dict] = {
    "plain": dict(),
    "residual": dict(residual=True),
    "batch norm": dict(norm="batch"),
    "layer norm": dict(norm="layer"),
    "residual+layer": dict(residual=True, norm="layer"),
    "float16 ×2^15": dict(dtype="float16", loss_scale=2**15),
    "bfloat16": dict(dtype="bfloat16"),
}


def _percentiles(samples):
    a = np.asarray(samples) * 1e3
    return float(np.percentile(a, 50)), float(np.percentile(a, 95))


def time_explorer(depth: int, changes: int = 20, **mode) -> tuple[list[float], list[float], object]:
    """Seconds per control change at ``depth`` in ``mode``, and per depth-drag step."""
    from .widgets import GradientExplorer

    ex = GradientExplorer(depth=depth, activation="sigmoid", **mode)
    acts = ("sigmoid", "tanh")
    for a in acts:  # warm-up: one trace per activation, weights cached
        ex.activation.value = a
    ex.clip_mode.value = "global_norm"
    samples = []
    for i in range(changes):
        t0 = time.perf_counter()
        if i % 2:
            ex.clip_norm.value = 10 ** ((i % 5) - 2)
        else:
            ex.activation.value = acts[(i // 2) % len(acts)]
        samples.append(time.perf_counter() - t0)
    drag = []
    for i in range(changes):
        t0 = time.perf_counter()
        ex.depth.value = depth - (i % 2)
        drag.append(time.perf_counter() - t0)
    return samples, drag, ex


def time_naive(depth: int, changes: int = 3, **mode) -> list[float]:
    """Seconds per change done naively: new Keras model, eager tape, new figure each time."""
    import keras

    from .grads import gradient_report
    from .mlp import build_mlp, make_data
    from .plots import figure_png, plot_report

    x, y = make_data(128, 64, 0)
    dtype = mode.get("dtype", "float32")
    samples = []
    for i in range(changes):
        t0 = time.perf_counter()
        if dtype != "float32":
            keras.mixed_precision.set_global_policy(f"mixed_{dtype}")
        try:
            model = build_mlp(depth, activation=("sigmoid", "tanh")[i % 2], seed=0,
                              residual=mode.get("residual", False), norm=mode.get("norm"))
            report = gradient_report(model, x, y, clip=("global_norm", 1.0))
        finally:
            keras.mixed_precision.set_global_policy("float32")
        figure_png(plot_report(report))
        samples.append(time.perf_counter() - t0)
    return samples


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--changes", type=int, default=20, help="control changes per mode (default 20)")
    ap.add_argument("--naive-changes", type=int, default=3, help="naive rebuilds per mode (default 3)")
    ap.add_argument("--depth", type=int, default=100, help="network depth (default 100)")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of: " + ", ".join(MODES))
    ap.add_argument("--time-steps", type=int, default=100,
                    help="also time the TimeExplorer (chapter 07) at this many steps; 0 skips it")
    args = ap.parse_args(argv)
    if args.changes < 2 or args.naive_changes < 1:
        ap.error("--changes must be >= 2 and --naive-changes >= 1")
    if args.time_steps and not 5 <= args.time_steps <= 200:
        ap.error("--time-steps must be 0 (skip) or 5 to 200")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad:
        ap.error(f"unknown mode(s) {bad}; allowed: {', '.join(MODES)}")
    import gradlab

    gradlab.setup(seed=0)
    print(f"GradientExplorer at depth {args.depth} (width 64, batch 128): one control change = "
          "recompute + theory + blitted re-render + PNG; naive = Keras rebuild + eager tape + new figure")
    print(f"{'mode':<16} {'p50 ms':>7} {'p95 ms':>7} {'drag p50':>9} {'naive p50':>10} {'speed-up':>9}"
          f" {'full draws':>10}")
    for name in modes:
        samples, drag, ex = time_explorer(args.depth, args.changes, **MODES[name])
        p50, p95 = _percentiles(samples)
        d50, _ = _percentiles(drag)
        n50, _ = _percentiles(time_naive(args.depth, args.naive_changes, **MODES[name]))
        print(f"{name:<16} {p50:7.1f} {p95:7.1f} {d50:9.1f} {n50:10.0f} {n50 / p50:8.1f}x"
              f" {ex._plot.full_draws:>10}", flush=True)
    print("target: speed-up >= 20x in every mode, measured in the same run")
    if args.time_steps:
        from .bench_time import bench_time_explorer

        print()
        bench_time_explorer(steps=args.time_steps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
