"""``make test-oldest``: the tools' unit tests on the oldest TensorFlow and Keras gradlab supports.

gradlab declares lower bounds (``pyproject.toml``: ``tensorflow>=...``, ``keras>=...``) so that
it installs into a learner's own environment; the chapters' outputs come from the newest
versions, which ``requirements.txt`` pins. This tier tests the other end of the range:

1. builds gradlab's wheel (``pip wheel .``, as a release is built);
2. installs it into a virtual environment with exactly the oldest TensorFlow and Keras of the
   range (read from ``pyproject.toml``), kept under ``.venv/share/gradlab/`` and keyed on those
   versions and the Python version, so a second run reuses it (a fresh machine builds it:
   TensorFlow is about 600 MB to download);
3. runs the tests of the tools in ``gl.__all__`` (:data:`TESTS`) there against the installed
   wheel, not the checkout: ``python -P`` and no ``PYTHONPATH``, the repository's conftest (which
   puts the checkout first on ``sys.path``) skipped. Not the notebooks: their outputs belong to
   the pins.

Usage: ``python tools/test_oldest.py [--python PYTHON] [--venv DIR] [pytest args...]``
(``make test-oldest`` passes ``-n 2 --dist loadfile``: two workers, as ``make test``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]

#: The tests of the tools in ``gl.__all__`` that do not depend on the pinned versions' exact
#: numbers: every documented example (docs/api.md, one per public tool, the explorers included),
#: the reports and finders, the verdict, gradient checking, per-example gradients, tracing, the
#: true norms, the composed training step and GradNormLogger with TensorBoard.
TESTS = [
    "tests/test_core_api.py",
    "tests/test_api_shape.py",
    "tests/test_diagnostics.py",
    "tests/test_causes.py",
    "tests/test_gradcheck.py",
    "tests/test_per_example.py",
    "tests/test_tracing.py",
    "tests/test_true_norms.py",
    "tests/test_core_verdict.py",
    "tests/test_core_step.py",
    "tests/test_transformer_tensorboard.py",
    "tests/test_versions.py",
]


def oldest_versions(pyproject: Path = ROOT / "pyproject.toml") -> dict[str, str]:
    """``{"tensorflow": "2.16.1", "keras": "3.4.0"}``: the lower bounds ``pyproject.toml`` declares."""
    deps = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"]
    found = {}
    for dep in deps:
        m = re.fullmatch(r"\s*(tensorflow|keras)\s*>=\s*([0-9][0-9.]*)\s*", dep)
        if m:
            found[m.group(1)] = m.group(2)
    if set(found) != {"tensorflow", "keras"}:
        raise SystemExit(f"pyproject.toml must declare tensorflow>=X and keras>=Y; found {deps}")
    return found


def _padded(version: str) -> str:
    """``"3.5"`` -> ``"3.5.0"``."""
    parts = version.split(".")
    return ".".join(parts + ["0"] * (3 - len(parts)))


def pinned(name: str) -> str:
    """The version ``requirements.txt`` pins for ``name``."""
    for line in (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines():
        if line.strip().lower().startswith(f"{name}=="):
            return line.strip().split("==", 1)[1]
    raise SystemExit(f"requirements.txt pins no {name}")


def run(cmd: list[str], **kwargs) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run(cmd, check=True, **kwargs)


def python_version(python: str) -> str:
    out = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="the Python that creates the venv")
    parser.add_argument("--venv", default=None, help="the venv (default: keyed on the versions under .venv/share/gradlab)")
    args, pytest_args = parser.parse_known_args(argv)
    start = time.monotonic()
    versions = oldest_versions()
    py = python_version(args.python)
    key = f"py{py}-tensorflow{versions['tensorflow']}-keras{versions['keras']}"
    venv = Path(args.venv) if args.venv else ROOT / ".venv" / "share" / "gradlab" / f"oldest-{key}"
    bindir = venv / "bin"
    print(f"[1/4] oldest supported: TensorFlow {versions['tensorflow']}, Keras {versions['keras']} "
          f"(Python {py}) in {venv}", flush=True)
    if not (bindir / "python").exists():
        shutil.rmtree(venv, ignore_errors=True)
        run([args.python, "-m", "venv", str(venv)])
    with tempfile.TemporaryDirectory(prefix="gradlab-wheel-") as tmp:
        print("[2/4] building the wheel", flush=True)
        run([str(bindir / "python"), "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", tmp, str(ROOT)])
        wheel = next(Path(tmp).glob("gradlab-*.whl"))
        print(f"[3/4] installing {wheel.name} with TensorFlow {versions['tensorflow']} and Keras "
              f"{versions['keras']} (about 600 MB on a first run)", flush=True)
        pip = [str(bindir / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        # the dependencies (a no-op when the cached venv has them), then this wheel over any older one
        run(pip + [f"tensorflow=={versions['tensorflow']}", f"keras=={versions['keras']}",
                   f"pytest=={pinned('pytest')}", f"pytest-xdist=={pinned('pytest-xdist')}", str(wheel)])
        run(pip + ["--force-reinstall", "--no-deps", str(wheel)])
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(MPLBACKEND="Agg", GRADLAB_OLDEST="1")
    fixtures = dict(env, PYTHONPATH=str(ROOT / "tests" / "oldest"))  # the conftest's fixtures, nothing else
    # the tests must import the installed wheel, never the checkout
    where = subprocess.run([str(bindir / "python"), "-P", "-W", "error::RuntimeWarning", "-c",
                            "import gradlab, keras, tensorflow as tf; "
                            "print(gradlab.__file__, tf.__version__, keras.__version__)"],
                           capture_output=True, text=True, env=env, cwd=ROOT)
    if where.returncode != 0:
        sys.stderr.write(where.stderr[-3000:])
        return where.returncode
    path, tf_version, keras_version = where.stdout.split()[-3:]
    if not Path(path).resolve().is_relative_to(venv.resolve()):
        raise SystemExit(f"gradlab was imported from {path}, not from the wheel in {venv}")
    if tuple(map(_padded, (tf_version, keras_version))) != tuple(map(_padded, (versions["tensorflow"], versions["keras"]))):
        raise SystemExit(f"expected TensorFlow {versions['tensorflow']} and Keras {versions['keras']}, "
                         f"found {tf_version} and {keras_version}")
    print(f"[4/4] the tools' tests on TensorFlow {tf_version}, Keras {keras_version}, gradlab from {path}", flush=True)
    # --noconftest: tests/conftest.py puts the checkout first on sys.path (and needs xdist);
    # -p oldest_fixtures: the conftest's fixtures those tests use (tests/oldest/oldest_fixtures.py);
    # -o addopts=: pyproject's addopts turn on nbval, which this venv does not have.
    cmd = [str(bindir / "python"), "-P", "-m", "pytest", "-o", "addopts=", "--noconftest",
           "-p", "oldest_fixtures", "-p", "no:cacheprovider", "-q", *TESTS, *pytest_args]
    print("+", " ".join(cmd), flush=True)
    rc = subprocess.run(cmd, env=fixtures, cwd=ROOT).returncode
    print(f"test-oldest: {time.monotonic() - start:.0f} s in all", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
