"""The kernel-free explorers: which chapter cell each follows, its data files, its mount HTML."""

from __future__ import annotations

import dataclasses
import html
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "book" / "data"


@dataclasses.dataclass(frozen=True)
class Spec:
    cls: str  #: the Python class name, data-gradlab-explorer="<cls>"
    chapter: str  #: "01"
    anchor: str  #: code that marks the chapter's explorer cell (the mount follows it)
    covers: dict  #: the page's note on what the grid covers, per language


EXPLORERS = {
    "ch01": Spec(
        "GradientExplorer", "01", "GradientExplorer(",
        {"en": ("Kernel-free explorer: the same engine's numbers for every setting it offers here, "
                "computed at build time by gradlab's MLPGradientEngine (width 64, batch 128, seed 0): "
                "8 activations × 11 initializers × depths 1–100 (8,800 settings). Clipping by norm and "
                "by global norm is applied in the page, a closed form of the stored norms; clipping by "
                "value needs every gradient element and is only in the notebook."),
         "zh": ("无需内核的探索器：这里提供的每个设置，都是构建网站时由 gradlab 的 MLPGradientEngine"
                "（宽度 64、批量 128、种子 0）算出的同一组数值：8 种激活函数 × 11 种初始化器 × 深度 1–100"
                "（共 8,800 个设置）。按范数和按全局范数裁剪在页面中由保存的范数以闭式计算；按值裁剪需要每个"
                "梯度元素，只能在 notebook 中使用。")},
    ),
}


def data_files() -> list[tuple[Path, str]]:
    """``(json file, GRADLAB_DATA key)`` of every committed grid and text table."""
    return [(p, p.stem) for p in sorted(DATA.glob("*.json"))]


def mount_html(spec: Spec, lang: str) -> str:
    """The raw HTML cell placed after the chapter's explorer cell."""
    note = html.escape(spec.covers[lang])
    return (
        f'<div class="gradlab-kfx" data-gradlab-explorer="{spec.cls}" data-lang="{lang}">'
        f'<p class="gradlab-kfx-note">{note}</p></div>\n'
        '<link rel="stylesheet" href="_static/vendor/uplot/uPlot.min.css">\n'
        '<script src="_static/vendor/uplot/uPlot.iife.min.js"></script>\n'
        f'<script src="../data/{spec.cls}.js"></script>\n'
        f'<script src="../data/{spec.cls}.{lang}.js"></script>\n'
        '<script src="_static/gradlab/explorer.js"></script>\n'
    )
