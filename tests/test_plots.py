"""The one-shot chapter figures issue 20 names: what they draw, read back from the artists."""

from __future__ import annotations

import numpy as np

import gradlab as gl


def test_relu_and_leaky_relu_are_told_apart():
    z, curves = gl.mlp.activation_curves(["sigmoid", "tanh", "relu", "leaky_relu"])
    fig = gl.plots.plot_activations(z, curves)
    lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines()}
    relu = lines["relu"]
    (leaky_label,) = [k for k in lines if k.startswith("leaky_relu")]
    leaky = lines[leaky_label]
    # where they coincide (z > 0) the later one is dashed on top of the solid one: both show
    assert relu.get_linestyle() == "-" and leaky.get_linestyle() == "--"
    assert leaky.get_zorder() > relu.get_zorder() and leaky.get_linewidth() < relu.get_linewidth()
    assert "relu" in leaky_label.split("leaky_relu", 1)[1]  # the legend says which line it covers
    for name in ("sigmoid", "tanh"):
        assert lines[name].get_linestyle() == "-"


def test_target_line_sits_above_the_x_axis():
    broken = list(np.geomspace(100, 1e35, 36)) + [np.inf]
    for kwargs in (dict(), dict(linear=True)):
        fig = gl.plots.plot_losses({"broken setup": broken, "fixed": np.geomspace(20, 1e-3, 40)},
                                   target=0.1, **kwargs)
        for ax in fig.axes:
            (line,) = [ln for ln in ax.get_lines() if ln.get_label().startswith("target")]
            y = ax.transLimits.transform(ax.transScale.transform((0, 0.1)))[1]  # axes fraction
            assert 0.03 < y < 1, (kwargs, y)


def test_cliff_paths_stay_inside_their_panel():
    w_grid, b_grid = np.meshgrid(np.linspace(0, 12, 61), np.linspace(-8, 2, 51))
    surface = gl.rnn_theory.cliff_loss(w_grid, b_grid)
    plain = gl.rnn_theory.descent_path(6.25, -3.9, learning_rate=0.05, iterations=12)
    assert np.any(plain["points"][:, 1] < -8)  # the plain path does jump off the surface
    fig = gl.plots.plot_cliff(w_grid, b_grid, surface, {"plain": plain})
    ax = fig.axes[0]
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    for line in ax.get_lines():
        x, y = line.get_data()
        if len(x):
            assert np.all((x >= x0) & (x <= x1) & (y >= y0) & (y <= y1)), line.get_label()
    texts = [t.get_text() for t in ax.texts]
    assert any("leaves the panel" in t and "iteration" in t for t in texts), texts
