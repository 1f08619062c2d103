"""The Jupyter server side of gradlab: saved explorers keep the learner's last picture.

A widget view in a saved notebook points at a model that lives only while its kernel runs;
reopened later, JupyterLab shows "Error displaying widget". gradlab's explorers therefore
leave their picture where the server can read it, and this module's pre-save hook puts it
into the file:

- in the kernel, every explorer that has been displayed stores its current picture (PNG and
  timing-free text), keyed by its widget model id, in ``<jupyter runtime dir>/gradlab-pictures/``
  (:func:`store_picture`, called by ``gradlab.widgets.base.Explorer``
  ``Explorer.picture_delay_s`` = 0.3 s after its last change, never during a drag; a save within
  that moment keeps the picture before the change);
- in the server, :func:`lab_pre_save_hook` replaces each explorer output's widget view by
  that latest picture, and adds a line under it saying to re-run the cell for the live
  explorer (the kernel's translation of it, so the Chinese edition reads Chinese).

``make install`` (and ``pip install .`` from a wheel) writes
``<env>/etc/jupyter/jupyter_server_config.d/gradlab.json``, which enables this module as a
server extension in every ``jupyter lab`` or ``jupyter server`` started from that environment,
as Jupyter extensions do (Jupyter Server reads only ``jpserver_extensions`` from those files);
loading it registers the hook beside any ``pre_save_hook`` of the learner's own. An editable ``pip install -e .`` skips data files (setuptools issue 3399); then
``python -m gradlab_jupyter install`` writes it (:func:`install_server_config`). This module imports neither TensorFlow nor gradlab (the server loads it at start-up),
only the standard library and ``jupyter_core``.
"""

from __future__ import annotations

import base64
import json
import os
import re
import time
from pathlib import Path

__all__ = ["CONFIG_FILE", "SERVER_CONFIG", "install_server_config", "DEFAULT_NOTE", "NOTE_KEY", "WIDGET_VIEW", "keep_last_pictures", "lab_pre_save_hook", "load_picture",
           "picture_dir", "store_picture"]

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
#: Output metadata key of the re-run line the hook adds (so it is added once).
NOTE_KEY = "gradlab_rerun_note"
#: The line's English text, used when the kernel stored none.
DEFAULT_NOTE = ("This is the explorer's picture from when the notebook was saved: "
                "run the cell again to bring back the live explorer.")
#: Pictures older than this are removed when the hook runs (their kernels are long gone).
MAX_AGE_S = 14 * 24 * 3600
#: The server config that enables this server extension, which registers the hook (the same as ``jupyter-config/jupyter_server_config.d/gradlab.json``).
SERVER_CONFIG = {"ServerApp": {"jpserver_extensions": {"gradlab_jupyter": True}}}
CONFIG_FILE = Path("etc", "jupyter", "jupyter_server_config.d", "gradlab.json")
_MODEL_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


def picture_dir() -> Path:
    """``<jupyter runtime dir>/gradlab-pictures``: shared by a local server and its kernels."""
    try:
        from jupyter_core.paths import jupyter_runtime_dir
        runtime = jupyter_runtime_dir()
    except ImportError:  # gradlab outside Jupyter: the env variable, else the default
        runtime = os.environ.get("JUPYTER_RUNTIME_DIR") or os.path.expanduser("~/.local/share/jupyter/runtime")
    return Path(runtime) / "gradlab-pictures"


def _path(model_id: str) -> Path | None:
    return picture_dir() / f"{model_id}.json" if _MODEL_ID.match(str(model_id)) else None


def store_picture(model_id: str, png: bytes | None, text: str, note: str = DEFAULT_NOTE) -> bool:
    """Store the current picture of the explorer whose widget model is ``model_id`` (atomic).

    Returns whether it was stored (``False`` for an invalid id or a folder that cannot be written).
    """
    path = _path(model_id)
    if path is None:
        return False
    record = {"png": None if png is None else base64.b64encode(png).decode("ascii"), "text": text, "note": note}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record), encoding="utf-8")
        os.replace(tmp, path)  # the server never reads half a picture
    except OSError:
        return False
    return True


def load_picture(model_id: str) -> dict | None:
    """The stored ``{"png": base64 or None, "text": ..., "note": ...}`` of ``model_id``, or ``None``."""
    path = _path(model_id)
    if path is None or not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _note_output(note: str) -> dict:
    return {"output_type": "display_data", "metadata": {NOTE_KEY: True},
            "data": {"text/markdown": f"*↻ {note}*", "text/plain": f"↻ {note}"}}


def keep_last_pictures(nb: dict) -> int:
    """Replace each explorer output's widget view by the explorer's last picture; return how many.

    An output with a widget view and a PNG (every gradlab explorer's) gets the latest stored
    picture and text of its model (or keeps the PNG it was displayed with, when none is
    stored), loses the view, and is followed by one line saying to re-run the cell. Other
    widget outputs are left alone.
    """
    changed = 0
    for cell in nb.get("cells", []):
        outputs = cell.get("outputs") or []
        kept = []
        for k, out in enumerate(outputs):
            kept.append(out)
            data = out.get("data", {})
            if WIDGET_VIEW not in data or "image/png" not in data:
                continue
            view = data.pop(WIDGET_VIEW)
            model_id = view.get("model_id", "") if isinstance(view, dict) else ""
            stored = load_picture(model_id) or {}
            if stored.get("png"):
                data["image/png"] = stored["png"]
            if stored.get("text"):
                data["text/plain"] = stored["text"]
            note = stored.get("note") or DEFAULT_NOTE
            nxt = outputs[k + 1] if k + 1 < len(outputs) else {}
            if not nxt.get("metadata", {}).get(NOTE_KEY):
                kept.append(_note_output(note))
            changed += 1
        if outputs:
            cell["outputs"] = kept
    return changed


def _prune(max_age_s: float = MAX_AGE_S) -> None:
    try:
        old = time.time() - max_age_s
        for path in picture_dir().glob("*.json"):
            if path.stat().st_mtime < old:
                path.unlink(missing_ok=True)
    except OSError:
        pass


def lab_pre_save_hook(model, **kwargs) -> None:
    """Jupyter's pre-save hook: every saved explorer shows its last picture and a re-run line.

    JupyterLab autosaves every two minutes; the page that saved keeps its live widgets (only
    the file changes). Enabled by the installed ``jupyter_server_config.d/gradlab.json``;
    by hand: ``--ContentsManager.pre_save_hook=gradlab_jupyter.lab_pre_save_hook``.
    """
    if model.get("type") == "notebook" and isinstance(model.get("content"), dict):
        if keep_last_pictures(model["content"]):
            _prune()


def install_server_config(prefix: str | os.PathLike | None = None) -> Path:
    """Write :data:`SERVER_CONFIG` to ``<prefix>/etc/jupyter/jupyter_server_config.d/gradlab.json``.

    ``prefix`` defaults to this environment's ``sys.prefix``; returns the file written.
    """
    import sys

    path = Path(sys.prefix if prefix is None else prefix) / CONFIG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(SERVER_CONFIG, indent=2) + "\n", encoding="utf-8")
    return path


def _jupyter_server_extension_points() -> list[dict]:
    return [{"module": "gradlab_jupyter"}]


def _register(serverapp) -> None:
    cm = serverapp.contents_manager
    if lab_pre_save_hook not in getattr(cm, "_pre_save_hooks", []):
        cm.register_pre_save_hook(lab_pre_save_hook)


def _load_jupyter_server_extension(serverapp) -> None:
    """Jupyter Server loads the extension: register the pre-save hook on its contents manager.

    Once more when the server's loop starts: an extension loaded after this one may replace the
    contents manager (jupytext's does, and its server extension is enabled by installing it).
    """
    _register(serverapp)
    try:
        from tornado.ioloop import IOLoop

        IOLoop.current().add_callback(_register, serverapp)
    except Exception:  # pragma: no cover - no loop to call back on: the first registration stands
        pass
    serverapp.log.info("gradlab_jupyter: saved explorers keep their last picture (pre-save hook)")
