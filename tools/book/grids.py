"""Compute the kernel-free explorers' grids with gradlab's engines (``make book-data``).

Usage::

    python tools/book/grids.py            # every explorer's grid
    python tools/book/grids.py ch01       # only chapter 01's GradientExplorer
    python tools/book/grids.py --check    # is every committed grid fresh? (exit 1 if not)

Each explorer gets ``book/data/<Class>.json`` (the numbers: compact JSON, 5 significant
digits, ``Infinity``/``NaN`` for non-finite values, which JavaScript reads as they are) and
``book/data/<Class>.<lang>.json`` (the status lines' texts in that language, from gradlab's
own catalog and advice functions). ``meta.source_hash`` is a hash of the engine code the grid
came from (``engines.ENGINE_SOURCES``): ``tests/test_book.py`` fails when it changed.
Everything is seeded (``gl.setup(seed=0)``, the engines' own seeds) and deterministic.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DATA = ROOT / "book" / "data"
LANGS = ("en", "zh")
COMMAND = "make book-data"
#: chapter 01's engine: the GradientExplorer's defaults
CH01_ENGINE = {"width": 64, "batch_size": 128, "max_depth": 100, "seed": 0}
CH01_DEPTHS = tuple(range(1, 101))


def sig5(x):
    """``x`` rounded to 5 significant digits (strings, non-finite values and integers unchanged)."""
    if isinstance(x, bool) or not isinstance(x, float) or not math.isfinite(x) or x == 0:
        return x
    return float(f"{x:.5g}")


def source_hash(explorer: str) -> str:
    """A hash over the code that decides ``explorer``'s grid (file names and contents)."""
    from tools.book.engines import ENGINE_SOURCES
    from tools.book.engines import ROOT as PKG

    h = hashlib.sha256()
    for rel in ENGINE_SOURCES[explorer]:
        p = PKG / rel
        files = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in (".py", ".po")) if p.is_dir() else [p]
        for f in files:
            h.update(str(f.relative_to(PKG)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def dump(path: Path, obj) -> int:
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    path.write_text(text + "\n", encoding="utf-8")
    return len(text.encode())


def leaves(obj, path=()):
    """``{path: value}`` of every leaf of a view (a path is a tuple of keys and indices; a list of
    numbers or strings is one leaf)."""
    if isinstance(obj, dict):
        out = {(*path, "#dict"): sorted(obj)} if not obj else {}
        for k, v in obj.items():
            out.update(leaves(v, (*path, k)))
        return out
    if isinstance(obj, list) and obj and all(isinstance(v, (dict, list)) for v in obj):
        out = {(*path, "#len"): len(obj)}
        for k, v in enumerate(obj):
            out.update(leaves(v, (*path, k)))
        return out
    if isinstance(obj, list):
        return {path: [sig5(v) for v in obj]}
    return {path: sig5(obj)}


def _path_key(path) -> str:
    return "/".join(str(p) for p in path)


def site_spec(spec: list[dict], controls: list[dict]) -> list[dict]:
    """The explorer's controls as the site offers them: only the grid's values (a slider over
    them, or the dropdown's options among them); every other control hidden at its value."""
    grid = {c["name"]: c["values"] for c in controls}
    out = []
    for c in spec:
        c = dict(c)
        values = grid.get(c["name"])
        if values is None and c.get("frame"):
            pass  # a frame control (chapter 11's step): every view holds all its values
        elif values is None:
            c["hidden"] = True
        elif c["type"] == "range":
            labels = {json.dumps(v): lab for v, lab in c.get("options") or []}
            c["options"] = [[v, labels.get(json.dumps(v), f"{v:g}" if isinstance(v, float) else str(v))] for v in values]
        elif c["type"] == "select":
            c["options"] = [o for o in c["options"] if o[0] in values]
        out.append(c)
    return out


def dedupe(leaves_: dict) -> dict:
    """A list equal to one stored before it (the report's arrays are the plot's series) becomes
    ``{"#ref": <that path>}``."""
    seen, out = {}, {}
    for k, v in leaves_.items():
        if isinstance(v, list) and len(v) > 1:
            text = json.dumps(v)
            if text in seen:
                out[k] = {"#ref": seen[text]}
                continue
            seen[text] = k
        out[k] = v
    return out


def _texty(v) -> bool:
    return isinstance(v, str) or (isinstance(v, list) and any(
        isinstance(x, str) and x not in ("inf", "-inf", "nan") for x in v))


def view_grid(name: str, chapter: str, make, controls: list[dict], progress=print) -> None:
    """The views of the chapter's own explorer over a grid of settings, for the site.

    ``controls``: ``{"name", "values"}`` (the other controls keep the explorer's values). For
    each point the explorer is set in each language and its ``view`` is taken: exactly what the
    kernel sends the page. Stored: each language's first view as a template, and per point the
    leaves that differ from it, the numbers (5 significant digits) once for every language, the
    texts per language. ``book/_static/gradlab/site.js`` puts the views back together.
    """
    import itertools

    from tools.book.engines import gl, i18n

    gl.setup(seed=0)
    t0 = time.time()
    explorers = {}
    for lang in LANGS:
        i18n.set_language(lang)
        explorers[lang] = make(explorers.get("en"))
    combos = list(itertools.product(*[range(len(c["values"])) for c in controls]))
    templates, numbers, texts = {}, {}, {lang: {} for lang in LANGS}
    strings = {lang: {} for lang in LANGS}  # each text once: its JSON -> its index
    defaults = explorers["en"].values
    for n, idx in enumerate(combos):
        settings = {c["name"]: c["values"][k] for c, k in zip(controls, idx, strict=True)}
        key = "|".join(str(k) for k in idx)
        nums = None
        for lang in LANGS:
            i18n.set_language(lang)
            ex = explorers[lang]
            ex.set(**settings)
            flat = leaves(ex.view)
            if lang not in templates:
                templates[lang] = {"flat": flat, "spec": site_spec(ex.spec, controls)}
            base = templates[lang]["flat"]
            diff = {_path_key(p): v for p, v in flat.items() if p not in base or base[p] != v}
            got = dedupe({k: v for k, v in diff.items() if not _texty(v)})
            dropped = sorted(_path_key(p) for p in base if p not in flat)
            if dropped:
                got["#drop"] = dropped
            if nums is None:
                nums = got
            elif json.dumps(got) != json.dumps(nums):
                raise RuntimeError(f"{name}: different numbers in {lang} at {settings}")
            table = strings[lang]
            texts[lang][key] = {k: table.setdefault(json.dumps(v, ensure_ascii=False), len(table))
                                for k, v in diff.items() if _texty(v)}
        numbers[key] = nums
        if (n + 1) % 200 == 0 or n + 1 == len(combos):
            progress(f"{name} {n + 1}/{len(combos)} settings, {time.time() - t0:.0f} s")
    i18n.set_language("en")
    meta = {"explorer": explorers["en"].__class__.__name__, "grid": name, "chapter": chapter,
            "command": COMMAND, "source_hash": source_hash(name)}
    data = {"meta": meta, "controls": controls, "values": defaults, "axis": explorers["en"].axis_control,
            "points": numbers}
    size = dump(DATA / f"{name}.json", data)
    for lang in LANGS:
        body = {"meta": meta, "template": {_path_key(p): v for p, v in templates[lang]["flat"].items()},
                "spec": templates[lang]["spec"], "strings": [json.loads(t) for t in strings[lang]],
                "points": texts[lang]}
        size += dump(DATA / f"{name}.{lang}.json", body)
    progress(f"{name} done: {len(combos)} settings, {size / 1e6:.2f} MB, {time.time() - t0:.0f} s")


def ch01_controls() -> list[dict]:
    """Chapter 01: every activation and initializer at every depth, clip off."""
    from tools.book.engines import ACTIVATIONS, INITIALIZERS

    return [{"name": "depth", "values": list(CH01_DEPTHS)},
            {"name": "activation", "values": list(ACTIVATIONS)},
            {"name": "initializer", "values": list(INITIALIZERS)}]


def grid_ch01(progress=print) -> None:
    """Chapter 01: 8 activations × 11 initializers × 100 depths."""
    view_grid("GradientExplorer", "01", _maker("GradientExplorer"), ch01_controls(), progress)


#: chapter 05: the modes the chapter discusses (residual, norm, dtype, loss scale) at the
#: depths and activations its text and presets use
CH05_CONTROLS = [
    {"name": "depth", "values": [14, 50, 100]},
    {"name": "activation", "values": ["sigmoid", "relu"]},
    {"name": "initializer", "values": ["glorot_uniform", "he_normal"]},
    {"name": "residual", "values": [False, True]},
    {"name": "norm", "values": ["none", "batch", "layer"]},
    {"name": "dtype", "values": ["float32", "float16"]},
    {"name": "loss_scale", "values": [1.0, 32768.0]},
]
CH05_DEFAULT = {"depth": 50, "activation": "sigmoid", "residual": True}


def make_explorer(grid: str, engine=None):
    """The chapter's explorer behind a grid, as its cell builds it (``engine`` shared)."""
    from tools.book.engines import (
        GradientExplorer,
        TimeExplorer,
        TrainingExplorer,
        TransformerExplorer,
    )

    engine = engine if engine is not None else make_engine(grid)
    if grid == "TrainingExplorer":
        return TrainingExplorer(**CH11_DEFAULT, engine=engine, frame_every=CH11_FRAME_EVERY)
    if grid == "GradientExplorer":
        return GradientExplorer(engine=engine)
    if grid == "GradientExplorer05":
        return GradientExplorer(advanced=True, engine=engine, **CH05_DEFAULT)
    if grid == "TimeExplorer":
        return TimeExplorer(cell="simple_rnn", steps=50, recurrent_initializer="orthogonal", engine=engine)
    return TransformerExplorer(num_layers=6, norm_position="post", engine=engine)


def _maker(grid: str):
    return lambda first: make_explorer(grid, None if first is None else first.engine)


def grid_ch05(progress=print) -> None:
    view_grid("GradientExplorer05", "05", _maker("GradientExplorer05"), CH05_CONTROLS, progress)


#: chapter 07: every cell and recurrent initializer, the sequence lengths and input scales
#: its text uses, clip off
CH07_CONTROLS = [
    {"name": "cell", "values": ["simple_rnn", "gru", "lstm"]},
    {"name": "steps", "values": [5, 10, 20, 50, 100, 150, 200]},
    {"name": "recurrent_initializer",
     "values": ["orthogonal", "glorot_uniform", "normal_0.5", "normal_2", "identity"]},
    {"name": "input_scale", "values": [0.01, 0.1, 1.0, 10.0]},
]


def grid_ch07(progress=print) -> None:
    view_grid("TimeExplorer", "07", _maker("TimeExplorer"), CH07_CONTROLS, progress)


#: chapter 09: each block's gradient at initialization for every depth and both positions
CH09_CONTROLS = [
    {"name": "num_layers", "values": list(range(1, 25))},
    {"name": "norm_position", "values": ["post", "pre"]},
]


def grid_ch09(progress=print) -> None:
    view_grid("TransformerExplorer", "09", _maker("TransformerExplorer"), CH09_CONTROLS, progress)


#: chapter 11: the runs its experiments discuss (100 steps, clip off or global norm 1), the
#: histograms of every 5th step
CH11_CONTROLS = [
    {"name": "depth", "values": [10, 20]},
    {"name": "activation", "values": ["sigmoid", "relu"]},
    {"name": "initializer", "values": ["glorot_uniform", "he_normal"]},
    {"name": "optimizer", "values": ["sgd", "adam"]},
    {"name": "learning_rate", "values": [0.001, 0.01, 0.1, 0.3]},
    {"name": "clip_mode", "values": ["off", "global_norm"]},
]
CH11_DEFAULT = {"depth": 20, "activation": "sigmoid", "initializer": "glorot_uniform", "optimizer": "sgd",
                "learning_rate": 0.1, "steps": 100}
CH11_FRAME_EVERY = 5


def grid_ch11(progress=print) -> None:
    view_grid("TrainingExplorer", "11", _maker("TrainingExplorer"), CH11_CONTROLS, progress)


def make_engine(grid: str):
    """The engine a lookup grid was read from, as its chapter builds it."""
    from tools.book.engines import (
        MLPGradientEngine,
        TimeGradientEngine,
        TrainingEngine,
        TransformerGradientEngine,
    )

    return {"TrainingExplorer": TrainingEngine,"GradientExplorer": lambda: MLPGradientEngine(**CH01_ENGINE),
            "GradientExplorer05": lambda: MLPGradientEngine(**CH01_ENGINE),
            "TimeExplorer": TimeGradientEngine,
            "TransformerExplorer": lambda: TransformerGradientEngine(max_layers=24)}[grid]()


def recompute(grid: str, engine, settings: dict) -> dict:
    """The engine's report for one point of a lookup grid: ``{field: values}`` and ``status``."""
    s = settings
    if grid == "GradientExplorer":
        r = engine.report(s["depth"], s["activation"], s["initializer"])
        out = {f: getattr(r, f) for f in ("signal_norms", "weight_norms")}
    elif grid == "GradientExplorer05":
        r = engine.report(s["depth"], s["activation"], s["initializer"], residual=s["residual"], norm=s["norm"],
                          dtype=s["dtype"], loss_scale=s["loss_scale"])
        out = {f: getattr(r, f) for f in ("signal_norms", "weight_norms", "predicted_signal")}
    elif grid == "TimeExplorer":
        r = engine.report(s["cell"], s["steps"], s["recurrent_initializer"], s["input_scale"])
        out = {"time_step_norms": r.time_step_norms}
    elif grid == "TrainingExplorer":
        clip = None if s["clip_mode"] == "off" else (s["clip_mode"], s["clip_norm"])
        r = engine.run(s["depth"], s["activation"], s["initializer"], s["optimizer"], s["learning_rate"], clip,
                       s["steps"])
        out = {"loss": r.loss, "grad_norms": r.grad_norms.T, "update_ratios": r.update_ratios.T}
    else:
        r = engine.report(s["num_layers"], s["norm_position"])
        out = {"layer_grad_norms": r.layer_grad_norms}
    return dict(out, status=getattr(r, "status", None))


GRIDS = {"ch01": ("GradientExplorer", grid_ch01), "ch05": ("GradientExplorer05", grid_ch05),
         "ch07": ("TimeExplorer", grid_ch07), "ch09": ("TransformerExplorer", grid_ch09),
         "ch11": ("TrainingExplorer", grid_ch11)}


def check() -> list[str]:
    """The stale grids, as messages that name the command to run (empty: all fresh)."""
    stale = []
    for key, (cls, _fn) in GRIDS.items():
        path = DATA / f"{cls}.json"
        run = f"run `{COMMAND}` (or only this grid: `python tools/book/grids.py {key}`)"
        if not path.exists():
            stale.append(f"{path.relative_to(ROOT)} is missing: {run}")
            continue
        meta = json.loads(path.read_text(encoding="utf-8"))["meta"]
        now = source_hash(cls)
        if meta["source_hash"] != now:
            stale.append(f"{path.relative_to(ROOT)} was computed from other engine code "
                         f"({meta['source_hash']} != {now}): {run}")
    return stale


def main(argv) -> int:
    if "--check" in argv:
        stale = check()
        print("\n".join(stale) or "every grid is fresh")
        return 1 if stale else 0
    keys = [a for a in argv if not a.startswith("-")] or list(GRIDS)
    DATA.mkdir(parents=True, exist_ok=True)
    for k in keys:
        GRIDS[k][1]()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
