"""Settings for `make lab-zh`: JupyterLab in Simplified Chinese, your own settings untouched.

    python tools/lab_zh.py DIR     # write DIR/overrides.json; print DIR

JupyterLab's display language is the ``locale`` setting of
``@jupyterlab/translation-extension:plugin`` (the Settings > Language menu writes it into
your user settings). ``make lab-zh`` does not write there: it starts JupyterLab with
``--LabApp.app_settings_dir=DIR``, whose ``overrides.json`` changes the setting's *default*
to ``zh_CN``, the locale of the pinned language pack ``jupyterlab-language-pack-zh-cn``. A
language you chose yourself in the menu still wins, and ``make lab`` stays as it was. The
overrides of this environment's own app settings directory, if it has any, are kept.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

PLUGIN = "@jupyterlab/translation-extension:plugin"
LOCALE = "zh_CN"
LANGUAGE_PACK = "jupyterlab_language_pack_zh_CN"


def overrides(base: dict | None = None) -> dict:
    """``base`` with the display language's default set to Simplified Chinese."""
    out = json.loads(json.dumps(base or {}))
    out.setdefault(PLUGIN, {})["locale"] = LOCALE
    return out


def environment_overrides() -> dict:
    """The overrides.json of this environment's own app settings directory ({} if none)."""
    try:
        from jupyterlab.commands import get_app_dir
    except ImportError:
        return {}
    path = Path(get_app_dir()) / "settings" / "overrides.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def write_settings(dest: Path) -> Path:
    if importlib.util.find_spec(LANGUAGE_PACK) is None:
        raise SystemExit("jupyterlab-language-pack-zh-cn is not installed: `make install` "
                         "(or pip install -r requirements.txt)")
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "overrides.json").write_text(json.dumps(overrides(environment_overrides()), indent=2,
                                                    ensure_ascii=False) + "\n", encoding="utf-8")
    return dest


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    print(write_settings(Path(sys.argv[1])))
