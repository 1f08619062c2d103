"""The gradient that reaches each block of a Transformer (chapter 09).

:func:`block_gradient_report` measures, with a plain ``GradientTape`` on a
:func:`gradlab.models.transformer.build_transformer` model, the float64 norm of the gradient
over each block's variables, of each block's second FFN kernel (the parameter Xiong et al. 2020
analyse) and the size of the residual stream after each block, as a :class:`TransformerReport`.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .. import core
from .._env import quiet_import_tensorflow
from ..i18n import _
from ..models.transformer import block_paths

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = [
    "TransformerReport",
    "block_gradient_report",
]


# ----------------------------------------------------------------------------- reports
@dataclasses.dataclass(frozen=True)
class TransformerReport:
    """Per-block gradients of a Transformer at one batch, earliest block first (chapter 09).

    ``layer_grad_norms[i]`` is the float64 global norm of the gradient over every variable of
    block ``i``; ``ffn_grad_norms[i]`` the norm of block ``i``'s second FFN kernel alone;
    ``stream_rms[i]`` the root-mean-square of the residual stream entering block ``i``
    (``stream_rms[-1]``: leaving the last block).
    """

    norm_position: str
    num_layers: int
    loss: float
    layer_grad_norms: np.ndarray
    ffn_grad_norms: np.ndarray
    stream_rms: np.ndarray

    @property
    def ratio(self) -> float:
        """Last block's gradient norm over the first's (1: flat; < 1: falls towards the output)."""
        n = self.layer_grad_norms
        return float(n[-1] / n[0]) if n[0] > 0 else math.inf

    def summary(self) -> str:
        norms = " ".join(f"{v:.3g}" for v in self.layer_grad_norms)
        return _("{position}-LN, {blocks} blocks: loss {loss}; block gradient norms {norms} "
                 "(last/first {ratio})").format(position=self.norm_position, blocks=self.num_layers,
                                                loss=f"{self.loss:.4g}", norms=norms, ratio=f"{self.ratio:.3g}")

    def __str__(self) -> str:
        return self.summary()


def sparse_loss(y, logits):
    return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True))


def _rms(t) -> float:
    return float(tf.sqrt(tf.reduce_mean(tf.square(tf.cast(t, tf.float64)))).numpy())


def block_gradient_report(model, x, y) -> TransformerReport:
    """Per-block gradient norms of a :func:`build_transformer` model on ``(x, y)``, from a plain tape.

    The loss is the mean sparse categorical cross-entropy of the logits (the loss the chapter
    compiles with). Norms are taken in float64 (:func:`gradlab.core.global_norm`).
    """
    core.check_model(model)
    prefixes = block_paths(model)
    x = tf.convert_to_tensor(x, tf.int32)
    y = tf.convert_to_tensor(y, tf.int32)
    variables = model.trainable_variables
    with tf.GradientTape() as tape:
        loss = sparse_loss(y, model(x, training=False))
    grads = tape.gradient(loss, variables)
    paths = [core.variable_path(v) for v in variables]
    layer = [float(core.global_norm([g for p, g in zip(paths, grads, strict=True) if p.startswith(b)]).numpy())
             for b in prefixes]
    ffn = [float(core.global_norm([g for p, g in zip(paths, grads, strict=True)
                                   if p == b + "ffn_2/kernel"]).numpy()) for b in prefixes]
    h = model.get_layer("embedding")(x)
    rms = [_rms(h)]
    for b in prefixes:
        h = model.get_layer(b[:-1])(h)
        rms.append(_rms(h))
    position = "pre" if any(layer.name == "final_norm" for layer in model.layers) else "post"
    return TransformerReport(position, len(prefixes), float(loss.numpy()), np.array(layer), np.array(ffn),
                             np.array(rms))
