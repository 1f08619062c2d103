"""The kernel-free explorers: which chapter cell each follows, its data files, its mount HTML."""

from __future__ import annotations

import dataclasses
import html
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "book" / "data"
#: gradlab's view: the module, its CSS and uPlot, served by the site exactly as the package ships them
STATIC = ROOT / "gradlab" / "widgets" / "static"
ASSETS = ("explorer.css", "uPlot.iife.min.js", "uPlot.min.css", "uPlot.LICENSE")
#: where a page carries the module's text (filled in after Sphinx: see :func:`inline_module`)
MODULE_SLOT = '<script type="text/plain" id="gradlab-explorer-module"></script>'


@dataclasses.dataclass(frozen=True)
class Spec:
    cls: str  #: the Python class name, data-gradlab-explorer="<cls>"
    chapter: str  #: "01"
    anchor: str  #: code that marks the chapter's explorer cell (the mount follows it)
    covers: dict  #: the page's note on what the grid covers, per language
    grid: str = ""  #: the data's name (book/data/<grid>.json), if not ``cls``

    @property
    def data(self) -> str:
        return self.grid or self.cls


EXPLORERS = {
    "ch01": Spec(
        "GradientExplorer", "01", "GradientExplorer(",
        {"en": ("Kernel-free explorer: the same engine's numbers for every setting it offers here, "
                "computed at build time by gradlab's MLPGradientEngine (width 64, batch 128, seed 0): "
                "8 activations × 11 initializers × depths 1–100 (8,800 settings), clip off. The view is "
                "the notebook's own; clipping needs the notebook."),
         "zh": ("无需内核的探索器：这里提供的每个设置，都是构建网站时由 gradlab 的 MLPGradientEngine"
                "（宽度 64、批量 128、种子 0）算出的同一组数值：8 种激活函数 × 11 种初始化器 × 深度 1–100"
                "（共 8,800 个设置），不裁剪。画面与 notebook 中的探索器相同；梯度裁剪需要在 notebook 中使用。")},
    ),
    "ch05": Spec(
        "GradientExplorer", "05", "GradientExplorer(depth=50",
        {"en": ("Kernel-free explorer: the chapter's modes, read from its own GradientExplorer at build "
                "time: depths 14, 50, 100 × sigmoid, relu × glorot_uniform, he_normal × residual off/on × "
                "norm none/batch/layer × float32/float16 × loss scale 1 or 2^15 (288 settings), clip off. "
                "bfloat16, the presets, other depths, activations and initializers, and clipping need the "
                "notebook."),
         "zh": ("无需内核的探索器：本章讨论的各种模式，在构建网站时从本章自己的 GradientExplorer 读出：深度 14、50、100 × "
                "sigmoid、relu × glorot_uniform、he_normal × 残差 关/开 × 规范化 none/batch/layer × "
                "float32/float16 × 损失缩放 1 或 2^15（共 288 个设置），不裁剪。bfloat16、论文预设、其他深度、激活函数"
                "和初始化器，以及梯度裁剪，需要在 notebook 中使用。")},
        grid="GradientExplorer05",
    ),
    "ch07": Spec(
        "TimeExplorer", "07", "TimeExplorer(",
        {"en": ("Kernel-free explorer: read from the chapter's TimeExplorer at build time for every cell "
                "(SimpleRNN, GRU, LSTM) and recurrent initializer, sequence lengths 5, 10, 20, 50, 100, 150, "
                "200 and input scales 0.01, 0.1, 1, 10 (420 settings), clip off. Other lengths and scales, "
                "and clipping, need the notebook."),
         "zh": ("无需内核的探索器：构建网站时从本章的 TimeExplorer 读出，覆盖每种循环单元（SimpleRNN、GRU、LSTM）"
                "和每种循环初始化器、序列长度 5、10、20、50、100、150、200、输入缩放 0.01、0.1、1、10（共 420 个"
                "设置），不裁剪。其他长度和缩放，以及梯度裁剪，需要在 notebook 中使用。")},
    ),
    "ch09": Spec(
        "TransformerExplorer", "09", "TransformerExplorer(",
        {"en": ("Kernel-free explorer: each block's gradient at initialization, read from the chapter's "
                "TransformerExplorer at build time for 1 to 24 blocks, post-LN and pre-LN (48 settings). "
                "The training runs (learning rate, warmup, clipping) need the notebook."),
         "zh": ("无需内核的探索器：初始化时每个块的梯度，构建网站时从本章的 TransformerExplorer 读出，覆盖 1 到 24 个块、"
                "post-LN 与 pre-LN（共 48 个设置）。训练过程（学习率、预热、梯度裁剪）需要在 notebook 中运行。")},
    ),
    "ch11": Spec(
        "TrainingExplorer", "11", "TrainingExplorer(",
        {"en": ("Kernel-free explorer: runs of 100 steps computed at build time by gradlab's TrainingEngine "
                "(float64, chapter 01's network and batch) for depths 10 and 20 × sigmoid, relu × glorot_uniform, "
                "he_normal × SGD, Adam × learning rates 0.001, 0.01, 0.1, 0.3 × clip off or global norm 1 "
                "(128 settings), histograms at every 5th step. Momentum, other depths, rates, steps and "
                "thresholds, and your own model, need the notebook."),
         "zh": ("无需内核的探索器：构建网站时由 gradlab 的 TrainingEngine 算出的 100 步训练过程（float64，第 01 章的网络和批量），"
                "覆盖深度 10 和 20 × sigmoid、relu × glorot_uniform、he_normal × SGD、Adam × 学习率 0.001、0.01、0.1、0.3 × "
                "不裁剪或全局范数 1（共 128 个设置），直方图每 5 步一个。动量、其他深度、学习率、步数和阈值，以及你自己的模型，"
                "需要在 notebook 中使用。")},
    ),
}


def data_files() -> list[tuple[Path, str]]:
    """``(json file, GRADLAB_DATA key)`` of every committed grid and text table."""
    return [(p, p.stem) for p in sorted(DATA.glob("*.json"))]


def mount_html(spec: Spec, lang: str) -> str:
    """The raw HTML cell placed after the chapter's explorer cell: the mount, the grid's scripts,
    the slot for the module's text and the site's model (book/_static/gradlab/site.js)."""
    note = html.escape(spec.covers[lang])
    return (
        f'<div class="gradlab-kfx" data-gradlab-site="{spec.data}" data-lang="{lang}">'
        f'<p class="gradlab-kfx-note">{note}</p></div>\n'
        '<link rel="stylesheet" href="_static/gradlab/uPlot.min.css">\n'
        '<link rel="stylesheet" href="_static/gradlab/explorer.css">\n'
        '<script src="_static/gradlab/uPlot.iife.min.js"></script>\n'
        f'<script src="../data/{spec.data}.js"></script>\n'
        f'<script src="../data/{spec.data}.{lang}.js"></script>\n'
        f"{MODULE_SLOT}\n"
        '<script src="_static/gradlab/site.js"></script>\n'
    )


def copy_assets(static_dir: Path) -> None:
    """Copy the view's CSS and uPlot from the package into a built edition's ``_static/gradlab``."""
    dst = static_dir / "gradlab"
    dst.mkdir(parents=True, exist_ok=True)
    for name in ASSETS:
        shutil.copy2(STATIC / name, dst / name)


def inline_module(page: str) -> str:
    """Fill a page's module slot with ``explorer.js``, unchanged (a page opened from a file:// URL
    loads no module script; site.js imports this text from a blob)."""
    if MODULE_SLOT not in page:
        return page
    text = (STATIC / "explorer.js").read_text(encoding="utf-8")
    if "</script" in text:
        raise ValueError("explorer.js must not contain '</script': it is inlined into the page")
    return page.replace(MODULE_SLOT, MODULE_SLOT.replace("></script>", ">" + text + "</script>"), 1)
