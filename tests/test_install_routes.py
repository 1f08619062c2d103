"""Every install route the READMEs give ends in the same working JupyterLab (issue 39).

The routes: ``make lab`` (``make install``), the plain-pip route (``pip install -r
requirements.txt``), the conda environment file's pip section (run with pip alone, as conda
runs it) and the wheel (``pip install gradlab-<version>-py3-none-any.whl``). Each is taken
in a fresh virtual environment exactly as written, except that the pinned third-party packages
(TensorFlow, JupyterLab, ...) come from this environment instead of a 2.6 GB download: the
route's venv sees a copy of this environment's ``site-packages`` without gradlab, so pip finds
them satisfied and installs only gradlab, the way the route installs it.

Then a plain ``jupyter server`` of that environment (no flags, its own config only) must have
gradlab_jupyter's pre-save hook: a notebook saved through the contents API, as JupyterLab saves,
comes back (as JupyterLab reopens it) with the explorer's last stored picture in place of its
widget view, and the line saying to re-run the cell. tests/browser/test_saved_chapters.py shows
JupyterLab drawing such a saved picture; this test shows every route gets the hook that makes it.

Also here: the wheel is a real release (``twine check --strict``, its metadata, the files it carries).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
import tomllib
import yaml

import gradlab as gl
import gradlab_jupyter as gj

ROOT = Path(__file__).resolve().parents[1]
VIEW = gj.WIDGET_VIEW
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(ROOT)],
                   check=True, cwd=ROOT, env=_clean_env())
    (path,) = out.glob("gradlab-*.whl")
    return path


def _clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV")}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def packages(tmp_path_factory) -> Path:
    """This environment's site-packages without gradlab: links to everything else."""
    shadow = tmp_path_factory.mktemp("site")
    import site

    for base in site.getsitepackages():
        for entry in Path(base).iterdir():
            name = entry.name.lower()
            if (name.startswith(("gradlab", "__editable__", "_editable_impl_", "__pycache__"))
                    or name.endswith(".pth") or (shadow / entry.name).exists()):
                continue
            (shadow / entry.name).symlink_to(entry)
    return shadow


def _venv(path: Path, packages: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    (site,) = path.glob("lib/python*/site-packages")
    (site / "zz_gradlab_test_packages.pth").write_text(f"{packages}\n", encoding="utf-8")
    return path / "bin" / "python"


def _pip_section_of_environment_yml() -> list[str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text(encoding="utf-8"))
    return next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)


def _install(route: str, venv: Path, python: Path, wheel: Path, tmp: Path) -> None:
    env = _clean_env(PATH=f"{python.parent}{os.pathsep}{os.environ['PATH']}", PIP_DISABLE_PIP_VERSION_CHECK="1")
    if route == "make lab":  # its install step, which `make lab` runs first
        cmd = ["make", "install", f"VENV={venv}", f"PYTHON={python}"]
    elif route == "pip -r requirements.txt":  # README.zh-CN.md, "不用 make，只用 pip"
        cmd = [str(python), "-m", "pip", "install", "--quiet", "-r", "requirements.txt"]
    elif route == "environment.yml pip section":  # what `conda env create` hands to pip
        reqs = tmp / "condaenv.requirements.txt"
        reqs.write_text("\n".join(_pip_section_of_environment_yml()) + "\n", encoding="utf-8")
        cmd = [str(python), "-m", "pip", "install", "--quiet", "-r", str(reqs)]
    elif route == "wheel":  # README: the tools into your own environment
        cmd = [str(python), "-m", "pip", "install", "--quiet", str(wheel)]
    else:
        raise ValueError(route)
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{route}: {' '.join(cmd)}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _save_and_reopen(python: Path, tmp: Path, nb: dict) -> tuple[dict, str]:
    """PUT ``nb`` through a plain ``jupyter server`` of ``python``'s env; GET it back; the server log."""
    root = tmp / "root"
    root.mkdir()
    token, port = os.urandom(8).hex(), _free_port()
    env = _clean_env(JUPYTER_RUNTIME_DIR=str(tmp / "runtime"), JUPYTER_CONFIG_DIR=str(tmp / "user-config"),
                     JUPYTER_DATA_DIR=str(tmp / "data"))
    env.pop("JUPYTER_CONFIG_PATH", None)  # only the environment's own config, as a learner's server
    log_path = tmp / "server.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([str(python), "-m", "jupyter_server", "--no-browser", "--allow-root", "--ip=127.0.0.1",
                                 f"--port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
                                 f"--ServerApp.root_dir={root}"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp)

        def api(path, method="GET", body=None):
            req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                         data=None if body is None else json.dumps(body).encode(),
                                         headers={"Authorization": f"token {token}"})
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.loads(r.read() or b"null")

        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    api("/api/status")
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(log_path.read_text()[-3000:]) from None
                    time.sleep(0.3)
            api("/api/contents/saved.ipynb", "PUT", {"type": "notebook", "format": "json", "content": nb})
            reopened = api("/api/contents/saved.ipynb?content=1")["content"]
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    return reopened, log_path.read_text()


ROUTES = ["make lab", "pip -r requirements.txt", "environment.yml pip section", "wheel"]


@pytest.mark.parametrize("route", ROUTES)
def test_each_install_route_gives_a_lab_that_keeps_the_last_picture(route, tmp_path, wheel, packages, monkeypatch):
    venv = tmp_path / "venv"
    python = _venv(venv, packages)
    _install(route, venv, python, wheel, tmp_path)
    # the route installed gradlab into its own environment, and the server config with it
    where = subprocess.run([str(python), "-P", "-c", "import gradlab_jupyter, sys; print(gradlab_jupyter.__file__)"],
                           capture_output=True, text=True, env=_clean_env(), cwd=tmp_path, check=True)
    assert where.stdout.strip(), where.stderr
    config = venv / gj.CONFIG_FILE
    assert json.loads(config.read_text()) == gj.SERVER_CONFIG, f"{route} did not install {gj.CONFIG_FILE}"
    # the explorer's last picture, as the kernel stores it after the learner's last change
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    model_id = "a1b2c3d4e5f6"
    first, last = b"\x89PNG\r\n\x1a\nfirst state", b"\x89PNG\r\n\x1a\nlast state"
    assert gj.store_picture(model_id, last, "GradientExplorer(depth=30)", note="re-run the cell")
    output = {"output_type": "display_data", "metadata": {},
              "data": {VIEW: {"model_id": model_id, "version_major": 2, "version_minor": 0},
                       "image/png": base64.b64encode(first).decode(), "text/plain": "GradientExplorer(depth=6)"}}
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {},
          "cells": [{"cell_type": "code", "id": "c1", "metadata": {}, "execution_count": 1, "source": "ex",
                     "outputs": [output]}]}
    reopened, log = _save_and_reopen(python, tmp_path, nb)
    outs = reopened["cells"][0]["outputs"]
    assert VIEW not in outs[0]["data"], f"{route}: the hook did not run\n{log[-3000:]}"
    assert base64.b64decode("".join(outs[0]["data"]["image/png"])) == last
    assert "".join(outs[0]["data"]["text/plain"]) == "GradientExplorer(depth=30)"
    assert "re-run the cell" in "".join(outs[1]["data"]["text/plain"])
    assert "gradlab_jupyter" in log


def test_the_wheel_is_a_complete_release(wheel):
    done = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(wheel)],
                          capture_output=True, text=True, env=_clean_env())
    assert done.returncode == 0 and "PASSED" in done.stdout, done.stdout + done.stderr
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        meta = Parser().parsestr(zf.read(f"gradlab-{gl.__version__}.dist-info/METADATA").decode())
    assert wheel.name == f"gradlab-{gl.__version__}-py3-none-any.whl"
    assert meta["Version"] == gl.__version__ and meta["Summary"] and meta["License-Expression"]
    assert meta["Requires-Python"] and meta["Description-Content-Type"] == "text/markdown"
    assert "gradlab" in meta.get_payload()  # the README as the long description
    classifiers = meta.get_all("Classifier")
    assert any(c.startswith("Programming Language :: Python :: 3.") for c in classifiers)
    requires = meta.get_all("Requires-Dist")
    for name, oldest in gl.SUPPORTED_VERSIONS.items():
        assert any(r.replace(" ", "").startswith(f"{name}>=") and oldest.startswith(r.split(">=")[1].strip())
                   for r in requires), (name, requires)
    # what gradlab reads at run time travels with it
    data = f"gradlab-{gl.__version__}.data/data/{gj.CONFIG_FILE.as_posix()}"
    assert data in names
    assert "gradlab_jupyter/__init__.py" in names and "gradlab/locale/zh_CN/LC_MESSAGES/gradlab.mo" in names
    tracked = subprocess.run(["git", "ls-files", "gradlab", "gradlab_jupyter"], capture_output=True, text=True,
                             cwd=ROOT, check=True).stdout.split()
    shipped = [p for p in tracked if not p.startswith("gradlab/locale/pending/")]
    missing = [p for p in shipped if p not in names]
    assert not missing, f"the wheel lacks {missing}"  # widgets/static/*.js and *.css among them
    assert not any(n.startswith("gradlab/locale/pending/") for n in names)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] and project["classifiers"] and project["description"]
