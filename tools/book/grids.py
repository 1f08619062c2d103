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
#: the clip threshold the grid's reports are taken at: small enough that every global norm
#: above it is recovered exactly from ``clipped = weight * t / max(G, t)``
#: The clip threshold the global norm is read through: the smallest the page offers. A smaller one
#: (1e-30 was tried) underflows float32's scale factor for large norms and reads as inf.
TINY = 1e-3
#: the page's clip thresholds: the explorer's FloatLogSlider (10^-3 … 10^3, step 0.1)
CLIP_EXPONENTS = tuple(round(-3 + 0.1 * k, 1) for k in range(61))


def sig5(x: float) -> float:
    """``x`` rounded to 5 significant digits (non-finite values unchanged)."""
    x = float(x)
    if not math.isfinite(x) or x == 0:
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


# --------------------------------------------------------------------------- chapter 01
def ch01_point(engine, depth: int, activation: str, initializer: str):
    """``(report, global_norm)`` of one chapter-01 setting, clip off.

    The report is taken with ``clip=("global_norm", TINY)``: the engine computes every clip
    mode in the same pass, so ``weight_norms`` is the unclipped one and the clipped one gives
    the global norm ``G = weight * t / clipped`` that the page's closed form needs. ``G`` is
    ``TINY`` or less (stored as 0) when nothing was clipped, inf when a gradient is infinite
    (finite layers scale to 0) and NaN when one is NaN (every layer's clipped norm is NaN).
    """
    import numpy as np

    r = engine.report(depth, activation, initializer, ("global_norm", TINY), theory=False)
    w, c = np.asarray(r.weight_norms), np.asarray(r.clipped_weight_norms)
    t64 = float(np.float32(TINY))
    fin = np.isfinite(w)
    # layers whose clipped norm stays in float32's normal range (a subnormal one loses digits,
    # and one below 1.4e-45 rounds to 0 without meaning an infinite global norm)
    big = fin & (w > 1e-30)
    if np.any(np.isnan(c) & fin) or not fin.any():
        g = math.nan  # a NaN anywhere in the gradients (or no finite layer to read G from)
    elif not fin.all() or (big.any() and np.all(c[big] == 0)):
        g = math.inf  # an infinite gradient (or a global norm beyond float32): finite layers scale to 0
    else:
        ok = big & (c > 0) & (c < w)
        # read G from the layer with the largest norm: its clipped norm is the most precise
        j = int(np.argmax(np.where(ok, w, -np.inf)))
        g = float(w[j] * t64 / c[j]) if ok.any() else 0.0
    return r, g


def ch01_texts(lang: str, engine):
    """The explorer whose labels, shown controls and settings the status lines use."""
    from tools.book.engines import GradientExplorer, i18n

    i18n.set_language(lang)
    return GradientExplorer(engine=engine)


def status_parts(ex, report, settings: dict) -> tuple[str, str]:
    """``(status word, advice text)`` of the status line, as ``GradientExplorer.status_text``
    makes them: gradlab's own ``gradient_advice`` and ``status_word`` in the current language."""
    from tools.book.engines import ADVANCED, LOSS_SCALES, gradient_advice, status_word

    shown = [n for n in ex.control_names if ex.advanced or n not in ADVANCED]
    adv = gradient_advice(report, settings, ex.labels(), shown=shown, loss_scales=LOSS_SCALES)
    return status_word(report.status), adv.text


def ch01_catalog(ex) -> dict:
    """The page's fixed texts in the explorer's language, all from gradlab's catalog."""
    from tools.book.engines import STATUS_COLORS, STATUS_WORDS, _, status_word

    labels = ex.labels()
    return {
        "template": _("depth {depth} · {activation} · {initializer} · {mode}{clip} → {status}: {advice}"),
        "clip_off": _("clip off"),
        "clip_on": _("clip {mode} ≤ {threshold}"),
        "controls": {n: _(n) for n in ("depth", "activation", "initializer")} | {
            "clip_mode": _("clip"), "clip_norm": _("threshold")},
        "labels": {k: {str(v): lab for v, lab in labels[k].items()}
                   for k in ("activation", "initializer", "clip_mode")},
        "status_words": {s: status_word(s) for s in STATUS_WORDS},
        "status_colors": dict(STATUS_COLORS),
        "thresholds": [f"{10.0 ** e:.3g}" for e in CLIP_EXPONENTS],
    }


def grid_ch01(progress=print) -> None:
    """Chapter 01: 8 activations × 11 initializers × 100 depths."""
    import numpy as np

    from tools.book.engines import ACTIVATIONS, INITIALIZERS, MLPGradientEngine, gl, i18n

    gl.setup(seed=0)
    engine = MLPGradientEngine(**CH01_ENGINE)
    explorers = {lang: ch01_texts(lang, engine) for lang in LANGS}
    base = {lang: ex.settings() for lang, ex in explorers.items()}
    points, texts = {}, {lang: {"advice": [], "points": {}} for lang in LANGS}
    index = {lang: {} for lang in LANGS}
    status_keys = []
    t0 = time.time()
    combos = [(a, i) for a in ACTIVATIONS for i in INITIALIZERS]
    for n, (a, i) in enumerate(combos):
        key = f"{a}|{i}"
        sig, wts, glob, stat = [], [], [], []
        per_lang = {lang: [] for lang in LANGS}
        for d in CH01_DEPTHS:
            # the report is made in each language: its verdict's finding is worded when it is made
            reports = {}
            for lang in LANGS:
                i18n.set_language(lang)
                reports[lang] = ch01_point(engine, d, a, i)
            r, g = reports["en"]
            for lang in LANGS[1:]:  # the engine is deterministic: the same numbers in each language
                if not (np.array_equal(reports[lang][0].signal_norms, r.signal_norms, equal_nan=True)
                        and np.array_equal(reports[lang][0].weight_norms, r.weight_norms, equal_nan=True)):
                    raise RuntimeError(f"the engine gave different numbers on a second call at {key}, depth {d}")
            sig.append([sig5(v) for v in r.signal_norms])
            wts.append([sig5(v) for v in r.weight_norms])
            glob.append(sig5(g))
            if r.status not in status_keys:
                status_keys.append(r.status)
            stat.append(status_keys.index(r.status))
            for lang in LANGS:
                i18n.set_language(lang)
                ex = explorers[lang]
                s = dict(base[lang], depth=d, activation=a, initializer=i)
                _w, off = status_parts(ex, reports[lang][0], dict(s, clip_mode="off"))
                _w, on = status_parts(ex, reports[lang][0], dict(s, clip_mode="norm"))
                ids = []
                for text in (off, on):
                    tab = index[lang]
                    if text not in tab:
                        tab[text] = len(texts[lang]["advice"])
                        texts[lang]["advice"].append(text)
                    ids.append(tab[text])
                per_lang[lang].append(ids)
        points[key] = {"signal_norms": sig, "weight_norms": wts, "global_norm": glob, "status": stat}
        for lang in LANGS:
            texts[lang]["points"][key] = per_lang[lang]
        progress(f"ch01 {n + 1}/{len(combos)} {key}: {len(CH01_DEPTHS)} depths, {time.time() - t0:.0f} s")
    meta = {"explorer": "GradientExplorer", "chapter": "01", "command": COMMAND,
            "source_hash": source_hash("GradientExplorer"), "engine": "MLPGradientEngine",
            "engine_kwargs": CH01_ENGINE, "clip_threshold_probe": TINY}
    data = {"meta": meta, "controls": {"depth": list(CH01_DEPTHS), "activation": list(ACTIVATIONS),
                                       "initializer": list(INITIALIZERS),
                                       "clip_mode": ["off", "norm", "global_norm"],
                                       "clip_exponent": list(CLIP_EXPONENTS)},
            "status_keys": status_keys, "points": points}
    size = dump(DATA / "GradientExplorer.json", data)
    for lang in LANGS:
        i18n.set_language(lang)
        texts[lang]["catalog"] = ch01_catalog(explorers[lang])
        texts[lang]["meta"] = meta
        size += dump(DATA / f"GradientExplorer.{lang}.json", texts[lang])
    i18n.set_language("en")
    progress(f"ch01 done: {len(combos) * len(CH01_DEPTHS)} settings, {size / 1e6:.1f} MB, {time.time() - t0:.0f} s")


# --------------------------------------------------------------------------- chapters 05, 07, 09
def lookup_grid(name: str, chapter: str, make, controls: list[dict], fields: list[str], progress=print) -> None:
    """A reduced grid read from the chapter's own explorer: ``ex.set(**point)``, then its
    ``report`` fields and its ``status_text``, in each language (the report is made in that
    language; its numbers must be the same). ``controls``: ``{"name", "kind", "values"}`` with
    ``kind`` one of ``select``, ``range``, ``checkbox``; ``make()`` builds the explorer in the
    current language. The page looks points up by the controls' value indices."""
    import itertools

    import numpy as np

    from tools.book.engines import STATUS_COLORS, gl, i18n

    gl.setup(seed=0)
    t0 = time.time()
    explorers = {}
    for lang in LANGS:
        i18n.set_language(lang)
        explorers[lang] = make(explorers.get("en"))
    initial = explorers["en"].settings()
    controls = [dict(c, default=initial[c["name"]] if initial.get(c["name"]) in c["values"] else c["values"][0])
                for c in controls]
    texts = {lang: {"status": {}, "controls": {}, "labels": {}} for lang in LANGS}
    for lang in LANGS:
        i18n.set_language(lang)
        ex = explorers[lang]
        for c in controls:
            w = ex._controls[c["name"]]  # the widget's own description and option labels
            texts[lang]["controls"][c["name"]] = w.description
            opts = getattr(w, "options", None)
            if c["kind"] == "select" and opts:
                pairs = {v: lab for lab, v in (o if isinstance(o, tuple) else (o, o) for o in opts)}
                texts[lang]["labels"][c["name"]] = [str(pairs.get(v, v)) for v in c["values"]]
            else:
                texts[lang]["labels"][c["name"]] = [f"{v:g}" if isinstance(v, float) else str(v) for v in c["values"]]
    points = {}
    combos = list(itertools.product(*[range(len(c["values"])) for c in controls]))
    for n, idx in enumerate(combos):
        settings = {c["name"]: c["values"][k] for c, k in zip(controls, idx, strict=True)}
        key = "|".join(str(k) for k in idx)
        rec = None
        for lang in LANGS:
            i18n.set_language(lang)
            ex = explorers[lang]
            ex.set(**settings)
            r = ex.report
            got = {f: (None if getattr(r, f) is None else [sig5(v) for v in np.asarray(getattr(r, f))])
                   for f in fields}
            if rec is None:
                rec = dict(got, status=getattr(r, "status", None))
            elif json.dumps(got) != json.dumps({f: rec[f] for f in fields}):  # NaN-aware
                raise RuntimeError(f"{name}: different numbers in {lang} at {settings}")
            texts[lang]["status"][key] = ex.status_text
        points[key] = rec
        if (n + 1) % 50 == 0 or n + 1 == len(combos):
            progress(f"{name} {n + 1}/{len(combos)} settings, {time.time() - t0:.0f} s")
    i18n.set_language("en")
    meta = {"explorer": explorers["en"].__class__.__name__, "grid": name, "chapter": chapter,
            "command": COMMAND, "source_hash": source_hash(name)}
    data = {"meta": meta, "controls": controls, "fields": fields, "points": points}
    size = dump(DATA / f"{name}.json", data)
    for lang in LANGS:
        texts[lang]["meta"] = meta
        texts[lang]["status_colors"] = dict(STATUS_COLORS)
        size += dump(DATA / f"{name}.{lang}.json", texts[lang])
    progress(f"{name} done: {len(combos)} settings, {size / 1e6:.2f} MB, {time.time() - t0:.0f} s")


#: chapter 05: the modes the chapter discusses (residual, norm, dtype, loss scale) at the
#: depths and activations its text and presets use
CH05_CONTROLS = [
    {"name": "depth", "kind": "range", "values": [14, 50, 100]},
    {"name": "activation", "kind": "select", "values": ["sigmoid", "relu"]},
    {"name": "initializer", "kind": "select", "values": ["glorot_uniform", "he_normal"]},
    {"name": "residual", "kind": "checkbox", "values": [False, True]},
    {"name": "norm", "kind": "select", "values": ["none", "batch", "layer"]},
    {"name": "dtype", "kind": "select", "values": ["float32", "float16"]},
    {"name": "loss_scale", "kind": "select", "values": [1.0, 32768.0]},
]
CH05_DEFAULT = {"depth": 50, "activation": "sigmoid", "residual": True}


def make_explorer(grid: str, engine=None):
    """The chapter's explorer behind a lookup grid, as its cell builds it (``engine`` shared)."""
    from tools.book.engines import GradientExplorer, TimeExplorer, TransformerExplorer

    engine = engine if engine is not None else make_engine(grid)
    if grid == "GradientExplorer05":
        return GradientExplorer(advanced=True, engine=engine, **CH05_DEFAULT)
    if grid == "TimeExplorer":
        return TimeExplorer(cell="simple_rnn", steps=50, recurrent_initializer="orthogonal", engine=engine)
    return TransformerExplorer(num_layers=6, norm_position="post", engine=engine)


def _maker(grid: str):
    return lambda first: make_explorer(grid, None if first is None else first.engine)


def grid_ch05(progress=print) -> None:
    lookup_grid("GradientExplorer05", "05", _maker("GradientExplorer05"), CH05_CONTROLS,
                ["signal_norms", "weight_norms", "predicted_signal"], progress)


#: chapter 07: every cell and recurrent initializer, the sequence lengths and input scales
#: its text uses, clip off
CH07_CONTROLS = [
    {"name": "cell", "kind": "select", "values": ["simple_rnn", "gru", "lstm"]},
    {"name": "steps", "kind": "range", "values": [5, 10, 20, 50, 100, 150, 200]},
    {"name": "recurrent_initializer", "kind": "select",
     "values": ["orthogonal", "glorot_uniform", "normal_0.5", "normal_2", "identity"]},
    {"name": "input_scale", "kind": "select", "values": [0.01, 0.1, 1.0, 10.0]},
]


def grid_ch07(progress=print) -> None:
    lookup_grid("TimeExplorer", "07", _maker("TimeExplorer"), CH07_CONTROLS, ["time_step_norms"], progress)


#: chapter 09: each block's gradient at initialization for every depth and both positions
CH09_CONTROLS = [
    {"name": "num_layers", "kind": "range", "values": list(range(1, 25))},
    {"name": "norm_position", "kind": "select", "values": ["post", "pre"]},
]


def grid_ch09(progress=print) -> None:
    lookup_grid("TransformerExplorer", "09", _maker("TransformerExplorer"), CH09_CONTROLS, ["layer_grad_norms"], progress)


def make_engine(grid: str):
    """The engine a lookup grid was read from, as its chapter builds it."""
    from tools.book.engines import MLPGradientEngine, TimeGradientEngine, TransformerGradientEngine

    return {"GradientExplorer05": lambda: MLPGradientEngine(**CH01_ENGINE),
            "TimeExplorer": TimeGradientEngine,
            "TransformerExplorer": lambda: TransformerGradientEngine(max_layers=24)}[grid]()


def recompute(grid: str, engine, settings: dict) -> dict:
    """The engine's report for one point of a lookup grid: ``{field: values}`` and ``status``."""
    s = settings
    if grid == "GradientExplorer05":
        r = engine.report(s["depth"], s["activation"], s["initializer"], residual=s["residual"], norm=s["norm"],
                          dtype=s["dtype"], loss_scale=s["loss_scale"])
        out = {f: getattr(r, f) for f in ("signal_norms", "weight_norms", "predicted_signal")}
    elif grid == "TimeExplorer":
        r = engine.report(s["cell"], s["steps"], s["recurrent_initializer"], s["input_scale"])
        out = {"time_step_norms": r.time_step_norms}
    else:
        r = engine.report(s["num_layers"], s["norm_position"])
        out = {"layer_grad_norms": r.layer_grad_norms}
    return dict(out, status=getattr(r, "status", None))


GRIDS = {"ch01": ("GradientExplorer", grid_ch01), "ch05": ("GradientExplorer05", grid_ch05),
         "ch07": ("TimeExplorer", grid_ch07), "ch09": ("TransformerExplorer", grid_ch09)}


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
