"""The book site's committed explorer grids (book/data/): fresh, the engine's numbers, the catalog's words.

- Freshness: each grid records a hash of the engine code it came from; when that code changes,
  this fails and names the command that recomputes the grids (``make book-data``).
- A random sample of grid points (seeded; ``GRADLAB_BOOK_SAMPLE_SEED`` picks another) is
  recomputed with ``MLPGradientEngine`` and must equal the stored values to their 5 digits,
  and the page's closed-form clipping (by norm, by global norm) must equal the engine's.
- The status lines: the page fills the catalog's template with the stored per-point texts;
  the result must be ``GradientExplorer.status_text`` in English and in Chinese.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "book" / "data"
RTOL = 1e-4


@pytest.fixture(scope="module")
def grid():
    return json.loads((DATA / "GradientExplorer.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def texts():
    return {lang: json.loads((DATA / f"GradientExplorer.{lang}.json").read_text(encoding="utf-8"))
            for lang in ("en", "zh")}


def sample(grid, n=8):
    seed = int(os.environ.get("GRADLAB_BOOK_SAMPLE_SEED", "20261201"))
    rng = random.Random(seed)
    c = grid["controls"]
    points = [(rng.choice(c["depth"]), rng.choice(c["activation"]), rng.choice(c["initializer"]))
              for _ in range(n)]
    # the corners: one layer, the deepest exploding and the deepest vanishing network
    return points + [(1, "relu", "he_normal"), (100, "relu", "large_normal"), (100, "sigmoid", "glorot_uniform")]


def test_grids_are_fresh():
    from tools.book import grids

    stale = grids.check()
    assert not stale, "\n".join(stale)


def test_freshness_check_fails_on_changed_engine_code(monkeypatch):
    from tools.book import engines, grids

    before = grids.source_hash("GradientExplorer")
    monkeypatch.setitem(engines.ENGINE_SOURCES, "GradientExplorer",
                        engines.ENGINE_SOURCES["GradientExplorer"][1:])  # the engine's file left out
    assert grids.source_hash("GradientExplorer") != before
    stale = grids.check()
    assert stale and "make book-data" in stale[0]


def test_grid_covers_every_setting(grid, texts):
    c = grid["controls"]
    assert len(c["activation"]) == 8 and len(c["initializer"]) == 11 and c["depth"] == list(range(1, 101))
    assert len(grid["points"]) == 88
    for key, p in grid["points"].items():
        assert [len(s) for s in p["signal_norms"]] == c["depth"], key
        assert [len(w) for w in p["weight_norms"]] == c["depth"], key
        assert len(p["global_norm"]) == len(p["status"]) == 100
        for lang in texts:
            assert len(texts[lang]["points"][key]) == 100


def close(a, b, atol=0.0, floor=0.0):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    both = np.isfinite(a) & np.isfinite(b) & ((np.abs(a) >= floor) | (np.abs(b) >= floor))
    assert np.array_equal(np.isfinite(a), np.isfinite(b)), (a, b)
    assert np.array_equal(np.isnan(a), np.isnan(b)), (a, b)
    np.testing.assert_allclose(a[both], b[both], rtol=RTOL, atol=atol)


#: The engine clips float32 gradients: a clipped norm in float32's subnormal range (below
#: 1.18e-38) keeps fewer digits than the page's float64 closed form: each of a 64×64 kernel's
#: 4,096 entries rounds to a multiple of 1.4e-45, so its norm is off by up to ~4096 × 0.7e-45.
#: 1e-41 is far below float32's normal range, where the comparison stays at rtol.
SUBNORMAL_ATOL = 1e-41
#: Below this clipped norm some of the kernel's entries are subnormal, and TensorFlow's CPU kernels
#: flush subnormal results to zero: the engine then reads 0 where the closed form reads
#: ~1e-39. Clipped norms that small are compared for finiteness only (measured: sigmoid,
#: glorot_normal, depth 85, global-norm clip at 1e-3: 6 of 85 layers).
FLUSHED_BELOW = 1e-32


def page_clip(w, g, mode, t):
    """The page's closed forms (book/_static/gradlab/explorer.js), in NumPy."""
    w = np.asarray(w, dtype=np.float64)
    if mode == "norm":  # an inf or NaN norm gives NaN (v * t / max(inf, t) has inf * 0), as the core does
        return np.where(np.isfinite(w), np.minimum(w, t), np.nan)
    with np.errstate(invalid="ignore"):
        return w * t / np.maximum(g, t)  # Math.max: NaN when g is NaN


def test_random_sample_recomputed_with_the_engine(grid, engine):
    for depth, act, init in sample(grid):
        p = grid["points"][f"{act}|{init}"]
        r = engine.report(depth, act, init, theory=False)
        close(p["signal_norms"][depth - 1], r.signal_norms)
        close(p["weight_norms"][depth - 1], r.weight_norms)
        assert grid["status_keys"][p["status"][depth - 1]] == r.status, (depth, act, init)
        for mode in ("norm", "global_norm"):
            for t in (1e-3, 0.1, 1.0, 10.0 ** 0.3, 100.0):
                clipped = engine.report(depth, act, init, (mode, t), theory=False).clipped_weight_norms
                close(page_clip(p["weight_norms"][depth - 1], p["global_norm"][depth - 1], mode, t), clipped,
                      atol=SUBNORMAL_ATOL, floor=FLUSHED_BELOW)


def page_status(texts, grid, lang, depth, act, init, clip_mode="off", k=30):
    """The page's status line: the catalog's template filled with the stored texts (as explorer.js)."""
    t, cat = texts[lang], texts[lang]["catalog"]
    ids = t["points"][f"{act}|{init}"][depth - 1]
    status = grid["status_keys"][grid["points"][f"{act}|{init}"]["status"][depth - 1]]
    clip = cat["clip_off"] if clip_mode == "off" else cat["clip_on"].format(
        mode=cat["labels"]["clip_mode"][clip_mode], threshold=cat["thresholds"][k])
    return cat["template"].format(depth=depth, activation=act, initializer=init, mode="", clip=clip,
                                  status=cat["status_words"][status],
                                  advice=t["advice"][ids[0 if clip_mode == "off" else 1]])


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_status_lines_are_the_kernels(grid, texts, engine, lang):
    from tools.book.engines import GradientExplorer, i18n

    i18n.set_language(lang)
    try:
        ex = GradientExplorer(engine=engine)
        for depth, act, init in sample(grid, 5):
            for clip_mode, k in (("off", 30), ("norm", 37), ("global_norm", 12)):
                threshold = 10.0 ** grid["controls"]["clip_exponent"][k]
                ex.set(depth=depth, activation=act, initializer=init, clip_mode=clip_mode, clip_norm=threshold)
                assert page_status(texts, grid, lang, depth, act, init, clip_mode, k) == ex.status_text
    finally:
        i18n.set_language("en")
    words = texts[lang]["catalog"]["status_words"]
    assert (words["vanishing"] == "梯度消失") == (lang == "zh")


LOOKUPS = ["GradientExplorer05", "TimeExplorer", "TransformerExplorer"]


@pytest.fixture(scope="module")
def lookup_engines():
    from tools.book import grids
    from tools.book.engines import gl

    gl.setup(seed=0)
    return {g: grids.make_engine(g) for g in LOOKUPS}


def lookup_sample(data, n=4):
    rng = random.Random(int(os.environ.get("GRADLAB_BOOK_SAMPLE_SEED", "20261201")))
    keys = sorted(data["points"])
    return [keys[0], keys[-1]] + rng.sample(keys, min(n, len(keys)))


def settings_of(data, key):
    return {c["name"]: c["values"][int(k)] for c, k in zip(data["controls"], key.split("|"), strict=True)}


@pytest.mark.parametrize("grid_name", LOOKUPS)
def test_lookup_grid_sample_recomputed_with_the_engine(grid_name, lookup_engines):
    from tools.book import grids

    data = json.loads((DATA / f"{grid_name}.json").read_text(encoding="utf-8"))
    texts = {lang: json.loads((DATA / f"{grid_name}.{lang}.json").read_text(encoding="utf-8"))
             for lang in ("en", "zh")}
    sizes = [len(c["values"]) for c in data["controls"]]
    assert len(data["points"]) == int(np.prod(sizes))
    for lang in texts:
        assert set(texts[lang]["status"]) == set(data["points"])
    for key in lookup_sample(data):
        got = grids.recompute(grid_name, lookup_engines[grid_name], settings_of(data, key))
        for f in data["fields"]:
            if got[f] is None:
                assert data["points"][key][f] is None, (key, f)
            else:
                close(data["points"][key][f], got[f])
        assert data["points"][key]["status"] == got["status"], key


@pytest.mark.parametrize("grid_name", LOOKUPS)
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_lookup_status_lines_are_the_kernels(grid_name, lang, lookup_engines):
    """A fresh explorer in that language prints the stored status line (the same catalog)."""
    from tools.book import grids
    from tools.book.engines import i18n

    data = json.loads((DATA / f"{grid_name}.json").read_text(encoding="utf-8"))
    texts = json.loads((DATA / f"{grid_name}.{lang}.json").read_text(encoding="utf-8"))
    i18n.set_language(lang)
    try:
        ex = grids.make_explorer(grid_name, lookup_engines[grid_name])
        for key in lookup_sample(data, 3):
            ex.set(**settings_of(data, key))
            assert texts["status"][key] == ex.status_text
    finally:
        i18n.set_language("en")
