"""Paper presets for the GradientExplorer: a published setting, its claim, and our measurement (chapter 05).

Pure computation (no widgets). Each :class:`Preset` names explorer settings (depth,
activation, initializer, residual, norm, dtype, loss scale) that reproduce an experiment or
argument from the initialization and normalization literature, the number the paper gives
or implies, and which quantity of a :class:`~gradlab.reports.gradients.GradientReport` to compare it
with. :func:`compare_preset` puts the two side by side; :func:`run_preset` computes a preset
headless with :class:`~gradlab.engines.mlp.MLPGradientEngine`.

Our networks are width 64, batch 128, standard normal data and a regression loss, not the
papers' architectures and data, so a measured number is expected to match the paper's order
of magnitude and direction, not its digits. Where the paper gives no single number, the
paper value is the one its equation implies, and ``paper_text`` says so. The numbers were
checked against the papers' derivations as summarized here; equation and section numbers are
left out on purpose.
"""

from __future__ import annotations

import dataclasses
import html
import math

import numpy as np

from .._validate import check_choice as _check_choice
from ..i18n import N_, _
from .mlp import MLPGradientEngine

__all__ = ["PRESETS", "Preset", "PresetResult", "compare_preset", "run_preset"]

#: What each preset measures (marked for translation: show it through ``_()``).
QUANTITIES = {
    "ratio": N_("signal ratio layer 1 / last layer"),
    "gain": N_("per-layer gain of the signal"),
    "std_last": N_("forward activation std at the last layer"),
    "zero_layers": N_("layers whose signal is exactly 0"),
}


@dataclasses.dataclass(frozen=True)
class Preset:
    """One paper's setting and claim (see the module docstring); ``title``, ``paper_text`` and
    ``note`` are marked for translation (show them through ``_()``), the ``reference`` stays as
    published; :attr:`citation` is the reference with its translated note."""

    title: str
    reference: str
    settings: dict
    quantity: str
    paper_value: float
    paper_text: str
    #: What the cited paper is cited for, when the title does not say it (marked for translation).
    note: str = ""

    @property
    def citation(self) -> str:
        """The reference as published, followed by its note in the current language."""
        if not self.note:
            return self.reference
        return _("{reference} ({note})").format(reference=self.reference, note=_(self.note))

    def measure(self, report) -> float:
        """This preset's quantity, read from ``report``."""
        if self.quantity == "ratio":
            return float(report.ratio)
        if self.quantity == "gain":
            return float(report.gain)
        if self.quantity == "std_last":
            return float(report.activation_stds[-1])
        return float(np.sum(np.asarray(report.signal_norms) == 0))


def _s(depth, activation, initializer, *, residual=False, norm="none", dtype="float32", loss_scale=1.0,
       clip_mode="off"):
    return dict(depth=depth, activation=activation, initializer=initializer, residual=residual,
                norm=norm, dtype=dtype, loss_scale=loss_scale, clip_mode=clip_mode)


HE2015 = ("He, Zhang, Ren & Sun (2015), Delving deep into rectifiers: surpassing human-level "
          "performance on ImageNet classification, ICCV")
HE2015_NOTE = N_("the initialization of rectifier layers")
GLOROT2010 = ("Glorot & Bengio (2010), Understanding the difficulty of training deep feedforward "
              "neural networks, AISTATS")
MICIK2018 = "Micikevicius et al. (2018), Mixed precision training, ICLR"
MICIK2018_NOTE = N_("loss scaling")

#: The presets, in the order the explorer offers them.
PRESETS: dict[str, Preset] = {
    "he2015_xavier": Preset(
        N_("He et al. 2015 · ReLU, Xavier, 30 layers"), HE2015, _s(30, "relu", "glorot_uniform"), "ratio",
        2.0**-14.5,
        N_("with Var W = 1/n a ReLU layer halves the variance (the factor ½ of their derivation), so over the "
           "29 layers from layer 30 back to layer 1 the signal shrinks by (1/√2)^29 = 2^-14.5 ≈ 4.3e-5 "
           "(derived from the paper's variance argument; the paper shows a 30-layer ReLU net stalling with "
           "Xavier)"),
        note=HE2015_NOTE,
    ),
    "he2015_he": Preset(
        N_("He et al. 2015 · ReLU, He init, 30 layers"), HE2015, _s(30, "relu", "he_normal"), "ratio", 1.0,
        N_("with Var W = 2/n every factor ½·n·Var W is 1 (the paper's condition): the signal keeps its size, "
           "ratio ≈ 1 (derived from the paper's variance argument)"),
        note=HE2015_NOTE,
    ),
    "glorot2010_standard": Preset(
        N_("Glorot & Bengio 2010 · tanh, standard U[±1/√n], 5 layers"), GLOROT2010,
        _s(5, "tanh", "standard_uniform"), "gain", 1 / math.sqrt(3),
        N_("the 'standard' initialization gives n·Var W = 1/3, so in the linear regime the back-propagated "
           "variance is multiplied by 1/3 per layer: a norm gain of 1/√3 ≈ 0.577 (the gain is derived from the "
           "paper's variance argument; n·Var W = 1/3 is the paper's)"),
    ),
    "glorot2010_normalized": Preset(
        N_("Glorot & Bengio 2010 · tanh, normalized init, 5 layers"), GLOROT2010,
        _s(5, "tanh", "glorot_uniform"), "gain", 1.0,
        N_("the 'normalized' initialization Var W = 2/(n_in + n_out) makes n·Var W = 1 for square layers: gain 1 "
           "in the linear regime (tanh'(0) = 1), derived from the paper's variance argument"),
    ),
    "saxe2014": Preset(
        N_("Saxe et al. 2014 · deep linear, orthogonal, 100 layers"),
        "Saxe, McClelland & Ganguli (2014), Exact solutions to the nonlinear dynamics of learning in "
        "deep linear neural networks, ICLR",
        _s(100, "linear", "orthogonal"), "ratio", 1.0,
        N_("a product of orthogonal matrices is orthogonal: all singular values of the input-output Jacobian are "
           "exactly 1, so the back-propagated norm is preserved exactly (ratio 1)"),
    ),
    "pennington2017": Preset(
        N_("Pennington et al. 2017 · tanh, orthogonal, 100 layers"),
        "Pennington, Schoenholz & Ganguli (2017), Resurrecting the sigmoid in deep learning through "
        "dynamical isometry, NeurIPS",
        _s(100, "tanh", "orthogonal"), "gain", 1.0,
        N_("a norm gain measures χ = σ_w²·E[φ'(h)²], the mean squared singular value of one layer's Jacobian; "
           "χ = 1 is criticality (Poole et al. 2016, Schoenholz et al. 2017), which orthogonal weights with "
           "σ_w = 1 approach for tanh as the pre-activations shrink. Dynamical isometry, the paper's point, is "
           "about the whole spectrum of singular values, which one norm per layer cannot see; the gain 1 is "
           "derived from the variance argument"),
    ),
    "klambauer2017": Preset(
        N_("Klambauer et al. 2017 · SELU + LeCun normal, 100 layers"),
        "Klambauer, Unterthiner, Mayr & Hochreiter (2017), Self-normalizing neural networks, NeurIPS",
        _s(100, "selu", "lecun_normal"), "std_last", 1.0,
        N_("with λ ≈ 1.0507, α ≈ 1.6733 and Var W = 1/n the activations' mean and variance have the stable fixed "
           "point (0, 1): the forward std stays 1 at any depth. The backward pass is not fixed: at that point "
           "E[selu'(u)²] ≈ 1.072, so mean field predicts a gradient that grows √1.072 ≈ 1.035× per layer (about "
           "30× over 100 layers); the paper's 'vanishing and exploding gradients are impossible' needs this caveat"),
    ),
    "he2016_residual": Preset(
        N_("He et al. 2016 / Balduzzi et al. 2017 · residual sigmoid, 50 layers"),
        "He, Zhang, Ren & Sun (2016), Identity mappings in deep residual networks, ECCV; "
        "Balduzzi et al. (2017), The shattered gradients problem, ICML",
        _s(50, "sigmoid", "glorot_uniform", residual=True), "ratio", 1.0,
        N_("∂E/∂x_l = ∂E/∂x_L·(1 + ∂/∂x_l Σ F): the 1 carries the gradient to every layer unchanged, so it cannot "
           "vanish multiplicatively (the same net without the skip: ratio ~1e-31). Ratio 1 is the identity term "
           "alone, derived from the paper's equation; Balduzzi et al. add that skips keep gradients correlated "
           "(not shattered)"),
    ),
    "micikevicius2018_fp16": Preset(
        N_("Micikevicius et al. 2018 · float16, no loss scale, 14 layers"), MICIK2018,
        _s(14, "sigmoid", "glorot_uniform", dtype="float16"), "zero_layers", 1.0,
        N_("float16 cannot hold magnitudes below 2^-24 ≈ 6e-8: smaller activation gradients become 0 (the paper "
           "value here, at least one layer of exact zeros, is our yes/no version of the paper's point, not a "
           "number from the paper)"),
        note=MICIK2018_NOTE,
    ),
    "micikevicius2018_scaled": Preset(
        N_("Micikevicius et al. 2018 · float16, loss scale 2^15, 14 layers"), MICIK2018,
        _s(14, "sigmoid", "glorot_uniform", dtype="float16", loss_scale=2.0**15), "zero_layers", 0.0,
        N_("multiplying the loss by S shifts every gradient S times up into float16's range; the weight gradients "
           "are divided by S in float32 afterwards: no layer is lost (0 zero layers; the paper used scale factors "
           "from 8 to 32K = 2^15)"),
        note=MICIK2018_NOTE,
    ),
}


@dataclasses.dataclass(frozen=True)
class PresetResult:
    """A preset's paper number beside the measured one."""

    key: str
    preset: Preset
    measured: float

    def text(self) -> str:
        p = self.preset
        return _("preset {title}: {quantity}: paper {paper}, measured {measured} · {citation}").format(
            title=_(p.title), quantity=_(QUANTITIES[p.quantity]), paper=self.format(p.paper_value),
            measured=self.format(self.measured), citation=p.citation)

    def html(self) -> str:
        p = self.preset
        return _("<b>{title}</b>: {quantity}: paper <b>{paper}</b>, measured <b>{measured}</b><br><small>{text}"
                 "<br><i>{citation}</i></small>").format(
            title=html.escape(_(p.title)), quantity=html.escape(_(QUANTITIES[p.quantity])),
            paper=html.escape(self.format(p.paper_value)), measured=html.escape(self.format(self.measured)),
            text=html.escape(_(p.paper_text)), citation=html.escape(p.citation))

    def format(self, v: float) -> str:
        """``v`` as this preset's quantity is printed (a count, or 3 significant digits)."""
        return f"{v:.0f}" if self.preset.quantity == "zero_layers" else f"{v:.3g}"


def compare_preset(key: str, report) -> PresetResult:
    """The paper's number for preset ``key`` beside ``report``'s measured one."""
    _check_choice("preset", key, tuple(PRESETS))
    return PresetResult(key, PRESETS[key], PRESETS[key].measure(report))


def run_preset(key: str, engine=None):
    """Compute preset ``key`` with an :class:`~gradlab.engines.mlp.MLPGradientEngine` (a new one by
    default, width 64, batch 128); returns ``(report, PresetResult)``."""
    _check_choice("preset", key, tuple(PRESETS))
    engine = engine or MLPGradientEngine()
    s = dict(PRESETS[key].settings)
    clip = None if s.pop("clip_mode") == "off" else ("norm", 1.0)
    report = engine.report(s.pop("depth"), s.pop("activation"), s.pop("initializer"), clip, **s)
    return report, compare_preset(key, report)
