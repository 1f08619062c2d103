"""The layers of gradlab (issues 19 and 38).

The layer contract itself (core → models and topics → reports → engines → training tools → plots →
widgets → exercises, every package placed, no GUI import below plots, no cycle between the modules
of a package) is import-linter's: ``[tool.importlinter]`` in pyproject.toml, checked by
``lint-imports``, which this file runs (and runs on a broken copy, to show it can fail). What stays
here are the rules import-linter cannot express: no module imports another module's private names,
nothing imports ``keras.src``, a gradlab import sits at the top of its file (an import inside a
function dodges a cycle), no module imports the package facade ``gradlab`` itself (forbidding a
package in import-linter forbids its descendants too), few top-level modules, and the README's map
equals the contract.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gradlab"
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
#: The layers contract's layers, bottom first: rank -> the packages and modules of that layer.
LAYERS = {rank: tuple(n.strip() for n in re.split(r"[:|]", layer))
          for rank, layer in enumerate(reversed(next(c for c in CONFIG["contracts"] if c["type"] == "layers")["layers"]))}
#: At most this many top-level modules besides ``__init__`` and private ``_helpers`` (issue 27).
MAX_TOP_LEVEL_MODULES = 8
#: Modules run as a script (``python gradlab/train/distribute_worker.py``): they import the package
#: inside ``main`` on purpose, after creating a strategy (pyproject's contracts ignore it too).
SCRIPTS = {"train.distribute_worker"}
#: The translation functions are public by gettext's convention (``from .i18n import _, N_``).
PUBLIC_UNDERSCORE = {"_", "N_", "__version__"}
LINT_IMPORTS = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


def _is_package(module: str) -> bool:
    return (PACKAGE / module.replace(".", "/") / "__init__.py").exists()


def _resolve(module: str, node: ast.ImportFrom) -> str | None:
    """The gradlab module a relative (or absolute gradlab) ``from`` import names."""
    if node.level == 0:
        if node.module and node.module.split(".")[0] == "gradlab":
            return node.module[len("gradlab"):].lstrip(".") or "__init__"
        return None
    base = module.split(".") if _is_package(module) else module.split(".")[:-1]
    if module == "__init__":
        base = []
    up = node.level - 1
    base = base[: len(base) - up] if up else base
    target = ".".join(base + ([node.module] if node.module else []))
    return target or "__init__"


class Import:
    def __init__(self, module, target, names, top, line, raw):
        self.module, self.target, self.names, self.top, self.line, self.raw = module, target, names, top, line, raw


def _imports():
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        tree = ast.parse(path.read_text(), filename=str(path))
        top_nodes = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                target = _resolve(module, node)
                names = [a.name for a in node.names]
                # "from . import core" names modules: each is a target of its own
                if target is not None and node.module is None:
                    for n in names:
                        sub = f"{target}.{n}" if target != "__init__" else n
                        out.append(Import(module, sub, [], id(node) in top_nodes, node.lineno, None))
                    continue
                out.append(Import(module, target, names, id(node) in top_nodes, node.lineno, node.module))
            elif isinstance(node, ast.Import):
                for a in node.names:
                    target = a.name[len("gradlab."):] if a.name.startswith("gradlab.") else (
                        "__init__" if a.name == "gradlab" else None)
                    out.append(Import(module, target, [], id(node) in top_nodes, node.lineno, a.name))
    return out


IMPORTS = _imports()
MODULES = sorted({i.module for i in IMPORTS} | {_module_name(p) for p in PACKAGE.rglob("*.py")})


def _lint_imports(root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` on the package under ``root`` with ``root``'s pyproject.toml."""
    return subprocess.run([sys.executable, "-c", LINT_IMPORTS, "--no-cache", "--config", str(root / "pyproject.toml")],
                          cwd=root, env={**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])},
                          capture_output=True, text=True, timeout=300)


def test_lint_imports_keeps_the_layer_contracts():
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 3 kept, 0 broken." in result.stdout, result.stdout


def test_lint_imports_fails_on_a_broken_copy(tmp_path):
    """A copy with a core module importing plots (up the layers, and matplotlib under it), a cycle
    between two report modules, and an unplaced top-level package: each contract breaks."""
    shutil.copytree(PACKAGE, tmp_path / "gradlab", ignore=shutil.ignore_patterns("__pycache__", "locale", "*.js"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "gradlab" / "core" / "probe.py").write_text("from ..plots import intro\n")
    (tmp_path / "gradlab" / "reports" / "probe_a.py").write_text("from . import probe_b\n")
    (tmp_path / "gradlab" / "reports" / "probe_b.py").write_text("from . import probe_a\n")
    (tmp_path / "gradlab" / "unplaced").mkdir()
    (tmp_path / "gradlab" / "unplaced" / "__init__.py").write_text("")
    result = _lint_imports(tmp_path)
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    assert "Contracts: 0 kept, 3 broken." in out, out
    assert "gradlab.core is not allowed to import gradlab.plots" in out and "gradlab.unplaced" in out, out
    assert "gradlab.core is not allowed to import matplotlib" in out, out
    assert "No cycles are allowed in gradlab.reports." in out and ".probe_b -> .probe_a" in out, out


def test_the_import_reader_sees_the_package():
    # the reader must find the edges it is meant to judge, or every test below passes vacuously
    edges = {(i.module, i.target) for i in IMPORTS if i.target}
    assert ("reports.gradients", "core") in edges and ("reports.diagnostics", "reports.rules") in edges
    assert ("core.loss", "core.layers") in edges and ("widgets.gradient_explorer", "engines.mlp") in edges
    assert len(MODULES) > 30


def test_no_keras_src():
    bad = [f"{i.module}:{i.line}" for i in IMPORTS if i.raw and ("keras.src" in i.raw or "keras._" in i.raw)]
    text = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if "keras.src" in p.read_text()]
    assert not bad and not text, f"keras.src is Keras's private tree: {bad or text}"


def test_no_private_names_across_modules():
    bad = [f"{i.module}:{i.line} imports {n} from {i.target}" for i in IMPORTS
           if i.target and i.target != i.module for n in i.names if n.startswith("_") and n not in PUBLIC_UNDERSCORE]
    assert not bad, "a module's _private names are its own:\n" + "\n".join(bad)


def test_no_import_inside_a_function():
    """An import of a gradlab module inside a function is how a cycle hides (the facade's lazy
    widget import and the worker script excepted)."""
    bad = [f"{i.module}:{i.line} imports {i.target}" for i in IMPORTS
           if i.target and not i.top and i.module not in SCRIPTS and i.module != "__init__"]
    assert not bad, "import gradlab modules at the top of the file:\n" + "\n".join(bad)


def test_no_module_imports_the_package_facade():
    """``gradlab/__init__.py`` sits above every layer: a module that imports it imports them all."""
    bad = [f"{i.module}:{i.line}" for i in IMPORTS
           if i.target == "__init__" and i.module != "__init__" and i.module not in SCRIPTS]
    assert not bad, bad


@pytest.mark.parametrize("module", ["reports.gradients", "reports.diagnostics", "topics.tracing", "train.distribute",
                                    "exercises.checks", "engines.presets"])
def test_the_cycles_issue_19_found_are_gone(module):
    """grads ↔ diagnostics, tracing ↔ distribute, checks → diagnostics and presets → engine inside
    a function: each module now imports only at its top."""
    inner = [i for i in IMPORTS if i.module == module and i.target and not i.top]
    assert not inner, [f"{i.module}:{i.line} {i.target}" for i in inner]


def test_few_top_level_modules():
    top = sorted(p.stem for p in PACKAGE.glob("*.py") if not p.stem.startswith("_"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, f"{len(top)} top-level modules: {top}"


def test_readme_draws_the_same_map():
    """README's architecture list names every package of the layers contract, in its order."""
    readme = (PACKAGE.parent / "README.md").read_text()
    section = readme.split("<!-- layers -->")[1].split("<!-- /layers -->")[0]
    bullets = re.findall(r"^- \*\*layer (\d)\*\*: (.+?)(?=^- \*\*layer|\Z)", section, flags=re.M | re.S)
    got = {int(rank): tuple(re.findall(r"`gradlab/([a-z0-9_]+)(?:/`|\.py`)", text)) for rank, text in bullets}
    want = {rank: tuple(n for n in names if not n.startswith("_")) for rank, names in LAYERS.items()}
    assert got == want, f"README's layers {got} differ from the contract's {want}"
