"""The book site's committed explorer grids (book/data/): fresh, and the views the kernel sends.

- Freshness: each grid records a hash of the code it came from; when that code changes, this
  fails and names the command that recomputes the grids (``make book-data``).
- Coverage: every combination of the grid's control values has its numbers and, in each
  language, its texts.
- A random sample of points (seeded; ``GRADLAB_BOOK_SAMPLE_SEED`` picks another) is put back
  together as ``book/_static/gradlab/site.js`` does (:func:`view_of`, the same steps) and must
  equal the view a fresh explorer of the chapter sends for that setting, in English and in
  Chinese: every number to its 5 stored digits, every text exactly. The browser tier then
  checks that the page draws those views and that their numbers are the engine's.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "book" / "data"
GRIDS = ["GradientExplorer", "GradientExplorer05", "TimeExplorer", "TransformerExplorer", "TrainingExplorer"]
LANGS = ("en", "zh")


def load(name: str) -> tuple[dict, dict]:
    data = json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))
    texts = {lang: json.loads((DATA / f"{name}.{lang}.json").read_text(encoding="utf-8")) for lang in LANGS}
    return data, texts


def view_of(template: dict, numbers: dict, texts: dict, strings: list | None = None) -> dict:
    """A stored view put back together: site.js's ``viewOf``, step for step."""
    own = {p: strings[i] for p, i in texts.items()} if strings is not None else texts
    flat = {**template, **numbers, **own}
    for p, v in flat.items():
        if isinstance(v, dict) and "#ref" in v:
            flat[p] = flat[v["#ref"]]
    for p in numbers.get("#drop", []):
        flat.pop(p, None)
    flat.pop("#drop", None)
    view: dict = {}
    lengths = []

    def container(keys, upto):
        o = view
        for k in range(upto):
            key = keys[k]
            if isinstance(o, list):
                slot = o[int(key)] if int(key) < len(o) else None
            else:
                slot = o.get(key)
            if slot is None:
                slot = [] if keys[k + 1].isdigit() else {}
                if isinstance(o, list):
                    while len(o) <= int(key):
                        o.append(None)
                    o[int(key)] = slot
                else:
                    o[key] = slot
            o = slot
        return o

    for p, v in flat.items():
        keys = p.split("/")
        last = keys[-1]
        if last == "#len":
            lengths.append((keys[:-1], v))
            continue
        if last == "#dict":
            if len(keys) > 1:
                container(keys, len(keys) - 1)
            continue
        o = container(keys, len(keys) - 1)
        if isinstance(o, list):
            while len(o) <= int(last):
                o.append(None)
            o[int(last)] = v
        else:
            o[last] = v
    for keys, n in lengths:
        del container([*keys, "0"], len(keys))[n:]
    return view


def same(a, b, path="") -> None:
    """``a`` (stored, 5 digits) equals ``b`` (fresh) leaf for leaf."""
    if isinstance(b, dict):
        assert isinstance(a, dict) and set(a) == set(b), (path, sorted(a) if isinstance(a, dict) else a, sorted(b))
        for k in b:
            same(a[k], b[k], f"{path}/{k}")
    elif isinstance(b, list):
        assert isinstance(a, list) and len(a) == len(b), (path, a, b)
        for k, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{path}/{k}")
    elif isinstance(b, float) and not isinstance(b, bool):
        assert isinstance(a, (int, float)) and math.isclose(a, b, rel_tol=1e-4, abs_tol=0.0), (path, a, b)
    else:
        assert a == b, (path, a, b)


def test_grids_are_fresh():
    from tools.book import grids

    stale = grids.check()
    assert not stale, "\n".join(stale)


def test_the_oldest_tiers_engine_is_chapter_01s():
    """make test-oldest builds the ``engine`` fixture from the engine's defaults
    (tests/oldest/oldest_fixtures.py): they must be the settings the grids store."""
    import inspect

    from gradlab.engines.mlp import MLPGradientEngine
    from tools.book import grids

    defaults = {name: p.default for name, p in inspect.signature(MLPGradientEngine).parameters.items()}
    assert defaults == grids.CH01_ENGINE, (defaults, grids.CH01_ENGINE)


def test_freshness_check_fails_on_changed_engine_code(monkeypatch):
    from tools.book import engines, grids

    before = grids.source_hash("GradientExplorer")
    monkeypatch.setitem(engines.ENGINE_SOURCES, "GradientExplorer",
                        engines.ENGINE_SOURCES["GradientExplorer"][1:])  # the engine's file left out
    assert grids.source_hash("GradientExplorer") != before
    stale = grids.check()
    assert stale and "make book-data" in stale[0]


@pytest.mark.parametrize("name", GRIDS)
def test_grid_covers_every_setting(name):
    data, texts = load(name)
    keys = {"|".join(map(str, idx)) for idx in itertools.product(*[range(len(c["values"])) for c in data["controls"]])}
    assert set(data["points"]) == keys
    for lang in LANGS:
        assert set(texts[lang]["points"]) == keys, lang
        shown = {c["name"] for c in texts[lang]["spec"] if not c.get("hidden")}
        assert {c["name"] for c in data["controls"]} <= shown, (lang, shown)


def test_view_of_puts_back_lists_dicts_and_dropped_leaves():
    from tools.book.grids import _path_key, dedupe, leaves

    a = {"plots": [{"x": [1.0, 2.0], "band": None, "t": "a"}], "notes": [], "e": {}}
    b = {"plots": [{"x": [1.0, 3.0], "band": {"lo": 1.0, "hi": 2.0}, "t": "b"}, {"x": [5.0], "band": None, "t": "c"}],
         "notes": [[{"text": "n"}]], "e": {}, "r": {"again": [1.0, 3.0]}}
    ta = {_path_key(p): v for p, v in leaves(a).items()}
    fb = {_path_key(p): v for p, v in leaves(b).items()}
    nums = dedupe({k: v for k, v in fb.items() if k not in ta or ta[k] != v})
    nums["#drop"] = sorted(k for k in ta if k not in fb)
    assert view_of(ta, nums, {}) == b
    # and back: a view with fewer items than the template
    tb, fa = fb, ta
    nums = {k: v for k, v in fa.items() if k not in tb or tb[k] != v}
    nums["#drop"] = sorted(k for k in tb if k not in fa)
    assert view_of(tb, nums, {}) == a


@pytest.fixture(scope="module")
def explorers():
    import gradlab as gl
    from tools.book import grids
    from tools.book.engines import i18n

    gl.setup(seed=0)
    out = {}
    for name in GRIDS:
        engine = grids.make_engine(name)
        for lang in LANGS:
            i18n.set_language(lang)
            out[name, lang] = grids.make_explorer(name, engine)
    i18n.set_language("en")
    return out


@pytest.mark.parametrize("name", GRIDS)
def test_a_sample_of_stored_views_is_what_the_kernel_sends(name, explorers):
    from tools.book.engines import i18n

    data, texts = load(name)
    rng = random.Random(int(os.environ.get("GRADLAB_BOOK_SAMPLE_SEED", "0")))
    keys = rng.sample(sorted(data["points"]), min(4, len(data["points"])))
    keys.append(next(iter(data["points"])))  # the template's own point
    try:
        for lang in LANGS:
            i18n.set_language(lang)
            ex = explorers[name, lang]
            for key in keys:
                idx = [int(k) for k in key.split("|")]
                settings = {c["name"]: c["values"][k] for c, k in zip(data["controls"], idx, strict=True)}
                ex.set(**settings)
                stored = view_of(texts[lang]["template"], data["points"][key], texts[lang]["points"][key],
                                 texts[lang]["strings"])
                fresh = json.loads(json.dumps(ex.view))
                same(stored, fresh, f"{name}/{lang}/{settings}")
    finally:
        i18n.set_language("en")
