"""requirements.txt, environment.yml and pyproject.toml describe the same environment."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[1]


def requirement_lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def test_environment_yml_pins_equal_requirements():
    reqs = requirement_lines((ROOT / "requirements.txt").read_text())
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert "conda-forge" in env["channels"]
    deps = env["dependencies"]
    assert any(isinstance(d, str) and d.startswith("python=") for d in deps)
    pip = next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)
    assert sorted(pip) == sorted(reqs)


def test_requirements_pin_exact_versions_of_the_stack():
    reqs = requirement_lines((ROOT / "requirements.txt").read_text())
    pins = dict(r.split("==") for r in reqs if "==" in r)
    assert "-e ." in reqs, "requirements.txt must install gradlab editable"
    for name, prefix in [("tensorflow", "2.21"), ("keras", "3."), ("jupyterlab", "4.6"),
                         ("ipywidgets", "8.1"), ("matplotlib", "3.11"), ("nbval", "0.11")]:
        assert pins.get(name, "").startswith(prefix), f"{name} must be pinned to {prefix}*"
    assert all(r == "-e ." or re.fullmatch(r"[A-Za-z0-9_.\-]+==[0-9][0-9A-Za-z.]*", r) for r in reqs)


def test_pyproject_dependencies_are_lower_bounds_only():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = project["dependencies"] + [d for ds in project.get("optional-dependencies", {}).values() for d in ds]
    assert deps
    for dep in deps:
        assert "==" not in dep and ">=" in dep, f"{dep!r} must be a lower bound, not a pin"


def test_installed_versions_match_the_pins():
    from importlib.metadata import version

    reqs = requirement_lines((ROOT / "requirements.txt").read_text())
    for name, pinned in (r.split("==") for r in reqs if "==" in r):
        assert version(name) == pinned, f"{name} {version(name)} is installed, {pinned} is pinned"
