"""The one-shot chapter figures issue 20 names: what they draw, read back from the artists."""

from __future__ import annotations

import re

import numpy as np

import gradlab as gl


def test_relu_and_leaky_relu_are_told_apart():
    z, curves = gl.models.mlp.activation_curves(["sigmoid", "tanh", "relu", "leaky_relu"])
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
    surface = gl.topics.rnn_theory.cliff_loss(w_grid, b_grid)
    plain = gl.topics.rnn_theory.descent_path(6.25, -3.9, learning_rate=0.05, iterations=12)
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


# ----------------------------------------------------------------------------- the zh edition
LATIN_WORD = re.compile(r"[A-Za-z]{3,}")
CJK = re.compile(r"[\u4e00-\u9fff]")
#: Labels the test itself passes in (code names, shown as given in every language).
CALLER_NAMES = {"relu", "leaky_relu"}


def english_words(text: str) -> bool:
    """Whether ``text`` has an English word (three letters or more; dLoss is math) and no Chinese."""
    return bool(LATIN_WORD.search(text.replace("dLoss", ""))) and not CJK.search(text)


def figure_texts(fig) -> list[str]:
    """Titles, axis labels, legend entries and annotations of ``fig`` (not its tick labels)."""
    out = [t.get_text() for t in fig.texts]
    for leg in fig.legends:
        out += [t.get_text() for t in leg.get_texts()]
    for ax in fig.axes:
        out += [ax.get_title(loc=loc) for loc in ("left", "center", "right")]
        out += [ax.get_xlabel(), ax.get_ylabel()] + [t.get_text() for t in ax.texts]
        if ax.get_legend() is not None:
            out += [t.get_text() for t in ax.get_legend().get_texts()]
    return [t for t in out if t.strip()]


def chapter_figures() -> dict:
    """The figures of plots/recurrent, tracing, jacobians, gradients and intro, with one-letter labels.

    Every word of three letters or more in them is gradlab's own text, so in Chinese it must
    be Chinese.
    """
    from gradlab.engines.mlp import MLPGradientEngine
    from gradlab.plots import gradients, jacobians, recurrent, tracing
    from gradlab.topics.tracing import StepTiming

    rng = np.random.default_rng(0)
    w_grid, b_grid = np.meshgrid(np.linspace(0, 12, 31), np.linspace(-8, 2, 21))
    path = gl.topics.rnn_theory.descent_path(6.25, -3.9, learning_rate=0.05, iterations=12)
    from gradlab.plots.view import view_figure
    from gradlab.widgets import TracingLab

    x, y = gl.models.rnn.make_sequence_data(8, 12, 8)
    report = gl.time_report(gl.models.rnn.build_rnn("simple_rnn", units=8), x, y, clip=("norm", 0.1))
    return {
        "plot_time_norms": recurrent.plot_time_norms({"A": np.geomspace(1e-4, 1, 20),
                                                      "B": np.r_[0.0, np.geomspace(1e-3, 1, 19)]}),
        "plot_cliff": recurrent.plot_cliff(w_grid, b_grid, gl.topics.rnn_theory.cliff_loss(w_grid, b_grid),
                                           {"A": path}),
        "plot_time_report": recurrent.plot_time_report(report),
        "plot_step_times": tracing.plot_step_times([StepTiming("A", 0.01, 0.002, np.ones(3)),
                                                    StepTiming("B", 0.5, 0.001, np.ones(3))]),
        "plot_grad_norm_history": tracing.plot_grad_norm_history({"A": [1, 0.5, 0.2], "B": [2, 1, 0.4]}),
        "TracingLab view": view_figure(TracingLab(value=0.2).view),
        "plot_block_diagonals": jacobians.plot_block_diagonals(rng.random((2, 3, 2, 4)),
                                                               {"A": rng.random((2, 3, 4))}),
        "plot_losses": gradients.plot_losses({"A": [3, 2, np.nan], "B": [3, 1, 0.5]}, target=0.1, linear=True),
        "ReportPlot": gradients.plot_report(
            MLPGradientEngine(width=8, batch_size=8, max_depth=12).report(12, "sigmoid", clip=("norm", 0.1))),
        "plot_activations": gradients.plot_activations(*gl.models.mlp.activation_curves(["relu", "leaky_relu"])),
        "TangentExplorer view": view_figure(gl.TangentExplorer(w=0.0).view),
    }


def test_figure_texts_are_chinese_in_the_chinese_edition():
    from gradlab.fonts import use_cjk_fonts
    from gradlab.i18n import get_language, set_language

    before = get_language()
    set_language("zh")
    use_cjk_fonts()
    try:
        figures = chapter_figures()
    finally:
        set_language(before)
    english = {name: [t for t in figure_texts(fig) if english_words(t) and t not in CALLER_NAMES]
               for name, fig in figures.items()}
    assert not {k: v for k, v in english.items() if v}, english
    # and the same figures in English do carry those words (the check can see them)
    assert all(any(english_words(t) for t in figure_texts(fig)) for fig in chapter_figures().values())
