"""Fixtures of the browser tier: one JupyterLab server and one headless Chromium per session.

- ``lab_server``: ``python -m jupyter lab`` from this environment on 127.0.0.1, a free port,
  token auth, over a temporary copy of ``chapters/`` plus the scratch notebooks that build
  every explorer (:data:`EXPLORERS_SOURCE`), with the pre-save hook that installing gradlab
  enables (gradlab_jupyter, through the installed server config: no command-line flag).
  Its settings come from an ``overrides.json`` in a temporary ``--LabApp.app_settings_dir``:
  notebook windowing off (every cell is in the page), news and update checks off. User
  settings, workspaces, runtime and config dirs are temporary too, so nothing from the host
  leaks in. ``lab_server_zh`` is the same with JupyterLab's Chinese UI;
  :func:`start_lab_server` builds either (``extra_overrides``).
- ``browser``: the system Chromium (``GRADLAB_CHROMIUM`` or /usr/bin/chromium...) through
  Playwright. No browser: skip with one line, or fail when ``CI=true``.
- ``page``: a fresh page per test. When a test fails, a screenshot and the server log go to
  ``test-artifacts/browser/<test-name>/``, and the failure report names that folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests._helpers import free_port, stop_server, wait_ready
from tools import lab_zh

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = ROOT / "chapters"
ARTIFACTS = ROOT / "test-artifacts" / "browser"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
INSTALL_HINT = (
    "no Chromium found for the browser tests: install it with `apt-get install -y chromium` "
    "(as root), or set GRADLAB_CHROMIUM to a Chromium/Chrome executable"
)
LAB_OVERRIDES = {
    # Every cell stays in the DOM, so off-screen widgets exist and can be checked.
    "@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"},
    # No news fetching, no "check for updates", no toast asking about either.
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
}

#: The Chinese UI of ``lab_server_zh``: the overrides ``make lab-zh`` writes (tools/lab_zh.py),
#: ``{"@jupyterlab/translation-extension:plugin": {"locale": "zh_CN"}}``.
ZH_OVERRIDES = lab_zh.overrides()

#: Every explorer once, as the chapters build them (the browser tier drives these instead of
#: re-running the chapters, which nbval already executes). One explorer per cell; the
#: variables are what the tests' CSS roots find, in this order.
EXPLORERS_SOURCE = [
    "import gradlab as gl\ngl.setup(seed=0)",
    'ex = gl.GradientExplorer(depth=20, activation="sigmoid", initializer="glorot_uniform")\nex',
    'ex5 = gl.GradientExplorer(depth=50, activation="sigmoid", residual=True, advanced=True, engine=ex.engine)\nex5',
    'te = gl.TimeExplorer(cell="simple_rnn", steps=50, recurrent_initializer="orthogonal")\nte',
    'jv = gl.JacobianViewer(function="softmax", size=8)\njv',
    'tl = gl.TracingLab(value=0.1, mode="python float")\ntl',
    "tg = gl.TangentExplorer(w=-0.5, learning_rate=0.3)\ntg",
    # chapter 09's, small (its labels and its run button must fit like the others')
    "tx = gl.TransformerExplorer(num_layers=2, steps=100, batch_size=4)\ntx",
    # chapter 11's, as its cell builds it
    'tr = gl.TrainingExplorer(depth=20, activation="sigmoid", initializer="glorot_uniform", optimizer="sgd", '
    'learning_rate=0.1, clip=None, steps=100)\ntr',
]
#: The Python class of each explorer in ``scratch-explorers.ipynb``, in cell order: its root is
#: ``[data-gradlab-explorer="<class>"]`` (gradlab/widgets/static/explorer.js).
EXPLORER_KINDS = ["GradientExplorer", "GradientExplorer", "TimeExplorer", "JacobianViewer", "TracingLab",
                  "TangentExplorer", "TransformerExplorer", "TrainingExplorer"]
SCRATCH = "scratch-explorers.ipynb"
#: The same notebook for the save-and-reopen test (its own kernel, shut down in between).
SCRATCH_REOPEN = "scratch-reopen.ipynb"
SCRATCH_NOTEBOOKS = {SCRATCH: EXPLORERS_SOURCE, SCRATCH_REOPEN: EXPLORERS_SOURCE}


def chapter_notebooks() -> list[Path]:
    """The chapter notebooks present at collection time, in order."""
    return sorted(CHAPTERS.glob("[0-9][0-9]-*.ipynb"))


# ----------------------------------------------------------------------------- the browser
def find_chromium() -> str | None:
    env = os.environ.get("GRADLAB_CHROMIUM")
    if env:
        return env if os.access(env, os.X_OK) else None
    for candidate in ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(candidate)
        if path:
            return path
    return None


def _missing(reason: str):
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def chromium_path() -> str:
    path = find_chromium()
    if path is None:
        _missing(INSTALL_HINT)
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _missing("playwright is not installed: `pip install -r requirements.txt`")
    return path


@pytest.fixture(scope="session")
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium_path, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


# ----------------------------------------------------------------------------- the server

@dataclass
class LabServer:
    url: str
    token: str
    root: Path
    log_path: Path
    proc: subprocess.Popen
    # Notebooks whose kernel has run every cell in this session and is still alive.
    executed: set = field(default_factory=set)

    def api(self, path: str, method: str = "GET", body=None):
        req = urllib.request.Request(
            f"{self.url}{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            raw = r.read()
        return json.loads(raw) if raw else None

    def log_tail(self, n: int = 40) -> str:
        lines = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(lines[-n:])

    def shutdown_kernel_of(self, relpath: str) -> None:
        """Shut down the session of ``relpath`` (frees memory once a test is done with it)."""
        for s in self.api("/api/sessions"):
            if s.get("path") == relpath:
                self.api(f"/api/sessions/{s['id']}", method="DELETE")
        self.executed.discard(relpath)


def server_config_path(base: Path) -> str | None:
    """``JUPYTER_CONFIG_PATH`` that enables gradlab_jupyter's pre-save hook as installing gradlab does.

    ``None`` when this environment already has the installed config (``make install``);
    otherwise a prefix under ``base`` holding the same file, so the server runs with exactly
    the config a learner's plain ``jupyter lab`` reads, and no command-line hook.
    """
    import gradlab_jupyter

    if (Path(sys.prefix) / gradlab_jupyter.CONFIG_FILE).is_file():
        return None
    gradlab_jupyter.install_server_config(base / "prefix")
    return str(base / "prefix" / "etc" / "jupyter")


@contextlib.contextmanager
def start_lab_server(base: Path, extra_overrides: dict | None = None):
    """A JupyterLab server over a copy of ``chapters/`` (and the scratch notebooks) in ``base``.

    ``extra_overrides`` are merged into the settings overrides (e.g. the Chinese locale,
    ``{"@jupyterlab/translation-extension:plugin": {"locale": "zh_CN"}}``). The server runs
    with gradlab_jupyter's pre-save hook from the installed config, as a plain ``jupyter lab`` does. Yields a :class:`LabServer`;
    the server and its kernels are stopped afterwards and its log copied to test-artifacts.
    """
    root = base / "root"
    root.mkdir(parents=True)
    shutil.copytree(CHAPTERS, root / "chapters",
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    write_scratch_notebooks(root)
    overrides = {**LAB_OVERRIDES, **(extra_overrides or {})}
    settings = base / "app-settings"
    settings.mkdir()
    (settings / "overrides.json").write_text(json.dumps(overrides, indent=2))
    for d in ("user-settings", "workspaces", "runtime", "config", "data"):
        (base / d).mkdir()
    token = os.urandom(16).hex()
    port = free_port()
    venv_bin = str(Path(sys.executable).parent)
    env = dict(os.environ)
    env.pop("MPLBACKEND", None)  # the kernel gets JupyterLab's inline backend, as for a learner
    env.update(
        PATH=venv_bin + os.pathsep + env.get("PATH", ""),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")])),
        JUPYTER_CONFIG_DIR=str(base / "config"),
        JUPYTER_DATA_DIR=str(base / "data"),
        JUPYTER_RUNTIME_DIR=str(base / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(base / "user-settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(base / "workspaces"),
        PYTHONUNBUFFERED="1",
    )
    config_path = server_config_path(base)
    if config_path:
        env["JUPYTER_CONFIG_PATH"] = config_path
    log_path = base / "jupyterlab.log"
    cmd = [
        sys.executable, "-m", "jupyter", "lab",
        "--no-browser", "--allow-root",
        "--ip=127.0.0.1", f"--port={port}", "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        f"--LabApp.app_settings_dir={settings}",
        f"--LabApp.user_settings_dir={base / 'user-settings'}",
        f"--LabApp.workspaces_dir={base / 'workspaces'}",
        "--LabApp.expose_app_in_browser=True",
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--ServerApp.terminals_enabled=False",
    ]
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    server = LabServer(f"http://127.0.0.1:{port}", token, root, log_path, proc)
    try:
        _wait_ready(server, timeout=90)
        _check_overrides(server, overrides)
        yield server
    finally:
        stop_server(proc)
        log.close()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(log_path, ARTIFACTS / f"jupyterlab-last-session-{base.name}.log")


@pytest.fixture(scope="session")
def lab_server(tmp_path_factory, chromium_path):
    """The tier's JupyterLab (English UI)."""
    with start_lab_server(tmp_path_factory.mktemp("lab")) as server:
        yield server


@pytest.fixture(scope="session")
def lab_server_zh(tmp_path_factory, chromium_path):
    """A second JupyterLab whose UI is Chinese (started only when a test asks for it)."""
    with start_lab_server(tmp_path_factory.mktemp("lab-zh"), ZH_OVERRIDES) as server:
        yield server


def write_scratch_notebooks(root: Path) -> None:
    """The scratch notebooks the tier drives instead of re-running chapters (nbval runs those)."""
    for name, cells in SCRATCH_NOTEBOOKS.items():
        write_notebook(root / name, cells)


def write_notebook(path: Path, cells: list[str]) -> None:
    """An unexecuted notebook at ``path``: a title cell, then one code cell per source in ``cells``."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                 "language": "python"}
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {path.name} (browser tests only)")]
    nb.cells += [nbformat.v4.new_code_cell(src) for src in cells]
    nbformat.write(nb, path)


def _wait_ready(server: LabServer, timeout: float) -> None:
    def status():
        server.api("/api/status")
        return True

    wait_ready(status, server.proc, what="JupyterLab", log=server.log_tail, timeout=timeout)


def _check_overrides(server: LabServer, overrides: dict) -> None:
    """The overrides must reach the settings JupyterLab serves, or the tests would lie."""
    for plugin, values in overrides.items():
        schema = server.api(f"/lab/api/settings/{plugin}")["schema"]["properties"]
        got = {k: schema[k].get("default") for k in values}
        if got != values:
            raise RuntimeError(f"settings override not applied to {plugin}: {got} != {values}")


# ----------------------------------------------------------------------------- pages, artifacts
@pytest.fixture
def page(request, browser, lab_server):
    shutil.rmtree(artifact_dir(request.node), ignore_errors=True)  # no stale artifacts
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    request.node._gl_page = pg
    request.node._gl_server = lab_server
    request.node._gl_log_offset = lab_server.log_path.stat().st_size
    try:
        yield pg
    finally:
        request.node._gl_page = None
        context.close()


@pytest.fixture(scope="session")
def _explorers_session(browser, lab_server):
    """One page with :data:`SCRATCH` run once (Run All Cells): every explorer, live, for the session."""
    from . import labpage

    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    t0 = time.monotonic()
    labpage.open_notebook(pg, lab_server, SCRATCH)
    labpage.run_all_cells(pg)
    labpage.wait_all_executed(pg, timeout_ms=300_000)
    problems = labpage.wait_widgets_rendered(pg)
    if problems:
        raise RuntimeError(f"{SCRATCH}: widgets did not render: {problems}")
    print(f"\n{SCRATCH}: every explorer built in {time.monotonic() - t0:.1f} s")
    try:
        yield pg
    finally:
        context.close()


@pytest.fixture
def explorers_page(request, _explorers_session, lab_server):
    """``(page, server)``: the session's live page with every explorer (see :data:`EXPLORERS_SOURCE`)."""
    request.node._gl_page = _explorers_session
    request.node._gl_server = lab_server
    request.node._gl_log_offset = lab_server.log_path.stat().st_size
    try:
        yield _explorers_session, lab_server
    finally:
        request.node._gl_page = None


def explorer(page, index: int):
    """The live explorer of :data:`SCRATCH` by cell index (0-based over :data:`EXPLORER_KINDS`)."""
    loc = page.locator(".jp-OutputArea-output [data-gradlab-explorer]").nth(index)
    loc.wait_for(state="visible")
    loc.scroll_into_view_if_needed()
    assert loc.get_attribute("data-gradlab-explorer") == EXPLORER_KINDS[index]
    return loc


def artifact_dir(item) -> Path:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", item.name).strip("_")
    return ARTIFACTS / name


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if not rep.failed or not hasattr(item, "_gl_server"):
        return
    folder = artifact_dir(item)
    folder.mkdir(parents=True, exist_ok=True)
    saved = []
    pg = getattr(item, "_gl_page", None)
    if pg is not None:
        try:
            pg.screenshot(path=str(folder / "screenshot.png"), full_page=True, timeout=15_000)
            saved.append("screenshot.png")
        except Exception as exc:  # noqa: BLE001 - a broken page must not hide the failure
            (folder / "screenshot-error.txt").write_text(repr(exc))
    server = item._gl_server
    log = server.log_path.read_bytes()
    (folder / "jupyterlab.log").write_bytes(log)
    (folder / "jupyterlab-this-test.log").write_bytes(log[getattr(item, "_gl_log_offset", 0):])
    saved += ["jupyterlab.log", "jupyterlab-this-test.log"]
    note = f"browser artifacts ({', '.join(saved)}) saved in {folder}"
    if hasattr(rep.longrepr, "addsection"):
        rep.longrepr.addsection("browser artifacts", note)
    else:
        rep.sections.append(("browser artifacts", note))


# ----------------------------------------------------------------------------- the book site
SITE = ROOT / "build" / "book"
SITE_INPUTS = [ROOT / "chapters", ROOT / "book", ROOT / "tools" / "book", ROOT / "gradlab" / "widgets" / "static"]


def _newest_input() -> float:
    return max(p.stat().st_mtime for d in SITE_INPUTS for p in d.rglob("*") if p.is_file())


@pytest.fixture(scope="session")
def site() -> Path:
    """build/book/, rebuilt unless it is newer than every chapter, book/ and tools/book/ file."""
    index = SITE / "index.html"
    if not index.exists() or index.stat().st_mtime < _newest_input():
        r = subprocess.run([sys.executable, str(ROOT / "tools" / "book" / "build.py")], cwd=ROOT,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"make book failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
        print(r.stdout.strip().splitlines()[-1])
    return SITE


