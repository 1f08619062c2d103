"""Chapters 02 and 03: drive the JacobianViewer and the TracingLab once through the page.

Each test skips, naming what is missing, only while its chapter notebook does not exist yet or
does not show that widget (its source never calls ``gl.JacobianViewer(`` / ``gl.TracingLab(``).
Once the chapter shows the widget, anything else is a failure.
"""

from __future__ import annotations

import re

import pytest

from . import labpage
from .conftest import CHAPTERS

pytestmark = pytest.mark.browser


def _chapter(prefix: str, widget: str) -> tuple[str | None, str]:
    """(relpath, skip reason): the chapter notebook if it exists and shows ``widget``."""
    found = sorted(CHAPTERS.glob(f"{prefix}-*.ipynb"))
    if not found:
        return None, f"chapter {prefix} (chapters/{prefix}-*.ipynb) does not exist yet"
    if f"{widget}(" not in found[0].read_text():
        return None, f"{found[0].name} does not show a {widget} yet"
    return f"chapters/{found[0].name}", ""


CH02, WHY02 = _chapter("02", "JacobianViewer")
CH03, WHY03 = _chapter("03", "TracingLab")
JAC_RE = re.compile(r"(?P<name>\S+) · n=(?P<n>\d+) → jacobian shape \((?P<shape>[^)]*)\)")
TRACE_RE = re.compile(r"(?P<mode>python float|tensor) · value (?P<value>\S+) → traces: (?P<traces>\d+)")


def _widget(page, lab_server, relpath, css_root):
    labpage.open_executed(page, lab_server, relpath)
    w = page.locator(f".{css_root}").first
    w.wait_for(state="visible")
    w.scroll_into_view_if_needed()
    return w


def _parse(w, status_class, pattern):
    text = labpage.status_text(w, status_class)
    m = pattern.search(text)
    assert m, f".{status_class} has an unexpected form: {text!r}"
    return m.groupdict()


@pytest.mark.skipif(CH02 is None, reason=WHY02)
def test_jacobian_viewer_in_jupyterlab(page, lab_server):
    w = _widget(page, lab_server, CH02, "gradlab-jacobian")
    status, plot = "gradlab-jacobian-status", "gradlab-jacobian-plot"
    s = _parse(w, status, JAC_RE)
    names = [t.split(":")[0].strip() for t in labpage.select_values(w, "gradlab-jacobian-function")]
    other = next(n for n in names if n != s["name"])
    ms_fn = labpage.drive(page, w, lambda: labpage.select_option(w, "gradlab-jacobian-function", other),
                          [f"{other} · n={s['n']} → jacobian shape ("], status=status, plot=plot)
    new_n = 5 if s["n"] != "5" else 6
    ms_n = labpage.drive(page, w, lambda: labpage.set_slider_by_readout(w, "gradlab-jacobian-size", new_n),
                         [f"{other} · n={new_n} → jacobian shape ("], status=status, plot=plot)
    shape = [d.strip() for d in _parse(w, status, JAC_RE)["shape"].split(",") if d.strip()]
    assert str(new_n) in shape, f"jacobian shape {shape} does not follow n={new_n}"
    print(f"\nJacobianViewer latency (ms): function {ms_fn:.0f}, size {ms_n:.0f}")


@pytest.mark.skipif(CH03 is None, reason=WHY03)
def test_tracing_lab_in_jupyterlab(page, lab_server):
    w = _widget(page, lab_server, CH03, "gradlab-tracing")
    status, plot = "gradlab-tracing-status", "gradlab-tracing-plot"
    latencies = {}

    def traces():
        return int(_parse(w, status, TRACE_RE)["traces"])

    if _parse(w, status, TRACE_RE)["mode"] != "python float":
        latencies["mode→python float"] = labpage.drive(
            page, w, lambda: labpage.click_toggle(w, "gradlab-tracing-mode", "python float"),
            ["python float ·"], status=status, plot_changes=False, events=("click",))
    # A Python float is part of the trace signature: each new value traces again.
    for value in ("0.83", "0.61"):
        n = traces()
        latencies[f"float {value}"] = labpage.drive(
            page, w, lambda v=value: labpage.set_slider_by_readout(w, "gradlab-tracing-value", v),
            [f"python float · value {value} → traces: {n + 1}"], status=status, plot=plot)
    # A tensor is not: after the tensor function's first trace, new values reuse it.
    latencies["mode→tensor"] = labpage.drive(
        page, w, lambda: labpage.click_toggle(w, "gradlab-tracing-mode", "tensor"),
        ["tensor · value 0.61 → traces:"], status=status, plot_changes=False, events=("click",))
    n = traces()
    for value in ("0.42", "0.27"):
        latencies[f"tensor {value}"] = labpage.drive(
            page, w, lambda v=value: labpage.set_slider_by_readout(w, "gradlab-tracing-value", v),
            [f"tensor · value {value} → traces: {n} ·"], status=status, plot_changes=False)
    print("\nTracingLab latency (ms): " + ", ".join(f"{k} {v:.0f}" for k, v in latencies.items()))
