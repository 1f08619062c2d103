"""The layers of gradlab, read from the code's own imports (ast), not from a diagram (issue 19).

core (inputs, loss, norms, clipping, update, state) → reports and finders → training tools →
plots → widgets → exercises. A module imports only its own layer or the ones below, at the top
of the file; nothing imports another module's private names or ``keras.src``; computation never
imports ipywidgets or matplotlib; and there is no import cycle, not even through an import
inside a function.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "gradlab"

#: The layer of each top-level package or module of gradlab. A module's layer is read from the
#: package it sits in (``gradlab/reports/verdict.py`` is in ``reports``): a new module needs no
#: entry, and a new top-level package or module fails :func:`test_every_module_has_a_layer`
#: until it is placed here. The README's architecture section lists the same packages in
#: this order (:func:`test_readme_draws_the_same_map`).
LAYERS = {
    0: ("_env", "_validate", "i18n", "progress"),
    1: ("core",),
    2: ("models", "topics"),
    3: ("reports",),
    4: ("engines",),
    5: ("train",),
    6: ("plots", "session", "fonts"),
    7: ("widgets",),
    8: ("exercises",),
    9: ("__init__",),
}
LAYER_NAMES = {0: "base", 1: "core", 2: "models and topics", 3: "reports and finders", 4: "engines",
               5: "training tools", 6: "plots", 7: "widgets", 8: "exercises", 9: "the package facade"}
#: Layers 0-5 are computation: they never import ipywidgets, matplotlib or the plots/widgets.
COMPUTATION = 5
#: At most this many top-level modules besides ``__init__`` and private ``_helpers`` (issue 27).
MAX_TOP_LEVEL_MODULES = 8
#: Modules run as a script (``python gradlab/distribute_worker.py``): they import the package
#: inside ``main`` on purpose, after creating a strategy.
SCRIPTS = {"train.distribute_worker"}
GUI = ("ipywidgets", "matplotlib", "IPython.display", "PIL")
#: The translation functions are public by gettext's convention (``from .i18n import _, N_``).
PUBLIC_UNDERSCORE = {"_", "N_", "__version__"}


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


def _layer(module: str) -> int:
    """The layer of ``module``, from its top-level package (no default: an unplaced one raises)."""
    top = module.split(".")[0]
    for rank, names in LAYERS.items():
        if top in names:
            return rank
    raise KeyError(f"gradlab.{module} sits in no layer: place {top!r} in LAYERS")


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


def _canonical(target: str) -> str:
    """A target module as a file module (``core`` the package, ``core.loss`` its part)."""
    return target


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


def test_layers_only_import_downwards():
    bad = []
    for i in IMPORTS:
        if not i.target or i.module == "__init__" or i.module in SCRIPTS:
            continue
        a, b = _layer(i.module), _layer(i.target)
        if b > a:
            bad.append(f"{i.module} ({LAYER_NAMES[a]}) imports {i.target} ({LAYER_NAMES[b]}), line {i.line}")
    assert not bad, "\n".join(bad)


def test_computation_never_imports_widgets_or_plots():
    bad = [f"{i.module}:{i.line} imports {i.raw}" for i in IMPORTS
           if _layer(i.module) <= COMPUTATION and i.raw and i.raw.split(".")[0] in {g.split(".")[0] for g in GUI}]
    bad += [f"{i.module}:{i.line} imports {i.target}" for i in IMPORTS
            if _layer(i.module) <= COMPUTATION and i.target and i.target.split(".")[0] in ("plots", "widgets")]
    assert not bad, "\n".join(bad)


def test_no_import_cycle():
    graph: dict[str, set[str]] = {}
    for i in IMPORTS:
        if i.target and i.module != "__init__" and i.target != "__init__":
            graph.setdefault(i.module, set()).add(i.target)
    # a package's __init__ importing its own parts is not a cycle with them
    state, cycles = {}, []

    def visit(node, stack):
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if nxt.startswith(node + "."):  # the package importing its parts
                continue
            if state.get(nxt) == 1:
                if not node.startswith(nxt + "."):  # a part importing a sibling through its package
                    cycles.append(" → ".join([*stack[stack.index(nxt):], nxt]) if nxt in stack else f"{node} → {nxt}")
            elif state.get(nxt) is None:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


@pytest.mark.parametrize("module", ["reports.gradients", "reports.diagnostics", "topics.tracing", "train.distribute",
                                    "exercises.checks", "engines.presets"])
def test_the_cycles_issue_19_found_are_gone(module):
    """grads ↔ diagnostics, tracing ↔ distribute, checks → diagnostics and presets → engine inside
    a function: each module now imports only at its top."""
    inner = [i for i in IMPORTS if i.module == module and i.target and not i.top]
    assert not inner, [f"{i.module}:{i.line} {i.target}" for i in inner]


def test_every_module_has_a_layer():
    unplaced = sorted({m.split(".")[0] for m in MODULES} - {n for names in LAYERS.values() for n in names})
    assert not unplaced, f"top-level modules or packages in no layer: {unplaced}"


def test_few_top_level_modules():
    top = sorted(p.stem for p in PACKAGE.glob("*.py") if not p.stem.startswith("_"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, f"{len(top)} top-level modules: {top}"
    packages = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    assert set(packages) <= {n for names in LAYERS.values() for n in names}, packages


def test_readme_draws_the_same_map():
    """README's architecture list names every package of LAYERS, in the layers' order."""
    readme = (PACKAGE.parent / "README.md").read_text()
    section = readme.split("<!-- layers -->")[1].split("<!-- /layers -->")[0]
    bullets = re.findall(r"^- \*\*layer (\d)\*\*: (.+?)(?=^- \*\*layer|\Z)", section, flags=re.M | re.S)
    got = {int(rank): tuple(re.findall(r"`gradlab/([a-z0-9_]+)(?:/`|\.py`)", text)) for rank, text in bullets}
    want = {rank: tuple(n for n in names if not n.startswith("_")) for rank, names in LAYERS.items()
            if rank != 9}
    assert got == want, f"README's layers {got} differ from the test's {want}"
