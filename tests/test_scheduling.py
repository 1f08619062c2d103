"""The two-worker schedule of ``make test`` (tests/conftest.py): units go out longest first."""

from conftest import BROWSER_PREFIX, DEFAULT_UNIT_SECONDS, longest_first, scope_of, unit_seconds


def test_longest_unit_first_and_each_unit_kept_together_in_order():
    nodeids = [
        "tests/test_core.py::test_a", "tests/test_core.py::test_b",
        "chapters/09-transformers.ipynb::Cell 0", "chapters/09-transformers.ipynb::Cell 1",
        "tests/browser/test_zh.py::test_z", "tests/test_explorer.py::test_e",
        "chapters/zh/09-transformers.ipynb::Cell 0", "tests/browser/test_explorers.py::test_x",
        "chapters/09-transformers.ipynb::Cell 2",
    ]
    ordered = longest_first(nodeids)
    assert sorted(ordered) == sorted(nodeids)  # nothing dropped or duplicated
    scopes = [scope_of(n) for n in ordered]
    # each unit is contiguous
    seen = []
    for s in scopes:
        if not seen or seen[-1] != s:
            assert s not in seen, f"unit {s} split: {scopes}"
            seen.append(s)
    assert seen[0] == BROWSER_PREFIX
    assert seen.index("chapters/09-transformers.ipynb") < seen.index("tests/test_explorer.py")
    assert seen[-1] == "tests/test_core.py"  # an unlisted short file goes last
    # a notebook's cells keep their order (they share one kernel)
    nine = [n for n in ordered if n.startswith("chapters/09-")]
    assert nine == ["chapters/09-transformers.ipynb::Cell 0", "chapters/09-transformers.ipynb::Cell 1",
                    "chapters/09-transformers.ipynb::Cell 2"]


def test_both_editions_of_a_chapter_weigh_the_same():
    assert unit_seconds("chapters/zh/07-through-time.ipynb") == unit_seconds("chapters/07-through-time.ipynb") > 60
    assert unit_seconds("tests/test_nothing_measured.py") == DEFAULT_UNIT_SECONDS
