"""One home per public name (issue 38).

The rule: a name in a module's ``__all__`` is *defined* in that module (``def``, ``class`` or an
assignment at its top level), or the name of one of its package's submodules. Only two kinds of
module may export a name they import:

* ``gradlab/__init__.py``: ``gl.__all__``, the curated tools a learner takes to their own project;
* a layer package's ``__init__.py`` (``gradlab.core``, ``gradlab.widgets``, ...) re-exporting names of
  its *own* modules (``from .module import name``, a star import of one, or a lazy ``__getattr__``).

Any other module that needs a name imports it from its home and leaves it out of its ``__all__``
(it stays reachable as an attribute, e.g. ``gl.exercises.checks.check_trains``, but it is exported
once). ``PENDING`` lists the violations left in files owned by the lead, each by name; the test
fails on any other violation, and on a pending one that is gone (so the list only shrinks).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import gradlab

ROOT = Path(gradlab.__file__).resolve().parent

#: Re-exports left in lead-owned files (gradlab/plots/), to be removed there: module -> names.
PENDING: dict = {}


def _modules():
    yield "gradlab", ROOT / "__init__.py"
    for info in pkgutil.walk_packages([str(ROOT)], prefix="gradlab."):
        if re.fullmatch(r"gradlab\.exercises\.ch\d\d", info.name) or info.name.endswith("distribute_worker"):
            continue  # chapter modules load on demand; the worker runs in its own process
        path = ROOT.joinpath(*info.name.split(".")[1:])
        yield info.name, (path / "__init__.py" if info.ispkg else path.with_suffix(".py"))
    for path in sorted((ROOT / "exercises").glob("ch[0-9][0-9].py")):
        yield f"gradlab.exercises.{path.stem}", path


def _defined(tree: ast.Module) -> set[str]:
    """Names bound at the top level by def, class or assignment (also inside top-level if/try)."""
    names: set[str] = set()
    nodes = list(tree.body)
    while nodes:
        node = nodes.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.If, ast.Try)):
            nodes.extend(node.body + node.orelse + getattr(node, "finalbody", [])
                         + [s for h in getattr(node, "handlers", []) for s in h.body])
    return names


def _violations(name: str, path: Path) -> set[str]:
    module = importlib.import_module(name)
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    defined, own = _defined(tree), set()
    for node in tree.body:  # a package's imports from its own modules: from .module import name (or *)
        if is_package and isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            own.update(getattr(importlib.import_module(f"{name}.{node.module}"), "__all__", ())
                       if node.names[0].name == "*" else (a.asname or a.name for a in node.names))
    bad = set()
    for public in getattr(module, "__all__", ()):
        obj = getattr(module, public)
        if public in defined or inspect.ismodule(obj) or name == "gradlab":
            continue
        inside = getattr(obj, "__module__", name + ".") if callable(obj) else name + "."
        if is_package and inside.startswith(name + ".") and (public in own or callable(obj)):
            continue  # a layer package re-exporting its own modules, eagerly or through __getattr__
        bad.add(public)
    return bad


def test_every_public_name_is_exported_by_its_home_only():
    found = {name: v for name, path in _modules() if (v := _violations(name, path))}
    new = {m: names - PENDING.get(m, set()) for m, names in found.items()}
    new = {m: names for m, names in new.items() if names}
    assert not new, f"exported by a module that imports it (export it from its home only): {new}"
    fixed = {m: names - found.get(m, set()) for m, names in PENDING.items()}
    assert not any(fixed.values()), f"fixed: remove from PENDING in {__file__}: {fixed}"


def test_the_rule_catches_a_re_export(tmp_path, monkeypatch):
    """The check can fail: a module that lists an imported name in its __all__ is reported."""
    package = tmp_path / "onehome_probe"
    package.mkdir()
    (package / "__init__.py").write_text("from .home import f\n__all__ = ['f']\n")  # allowed: its own module
    (package / "home.py").write_text("def f():\n    return 1\n\n__all__ = ['f']\n")
    (package / "other.py").write_text("from .home import f\n\n\ndef g():\n    return f()\n\n__all__ = ['f', 'g']\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _violations("onehome_probe.other", package / "other.py") == {"f"}
    assert _violations("onehome_probe.home", package / "home.py") == set()
    assert _violations("onehome_probe", package / "__init__.py") == set()


def test_names_exported_three_times_or_more_are_only_the_facades():
    """Issue 38 counted 12 names in more than two __all__ lists; now a name is in its home's, and at most
    in gl.__all__ and its layer package's (e.g. true_norm: gradlab.core.norms, gradlab.core, gradlab)."""
    lists: dict[str, list[str]] = {}
    for name, _path in _modules():
        module = importlib.import_module(name)
        for public in getattr(module, "__all__", ()):
            if not inspect.ismodule(getattr(module, public)) and public not in {*PENDING.get(name, ()), "MODULES"}:
                lists.setdefault(public, []).append(name)
    over = {n: ms for n, ms in lists.items() if len(ms) > 2}
    for public, modules in over.items():
        assert len(modules) == 3 and "gradlab" in modules, (public, modules)
        packages = [m for m in modules if m != "gradlab" and any(o.startswith(m + ".") for o in modules)]
        assert len(packages) == 1 and packages[0].count(".") == 1, (public, modules)
