"""The explorer view's contract, as a test drives it in JupyterLab and on the book site alike.

Every explorer is an element ``[data-gradlab-explorer="<Python class>"]`` whose controls are
form elements named after the Python controls, and which carries ``data-report`` (JSON) after
every view it draws (gradlab/widgets/static/explorer.js). ``data-draws`` counts the views drawn,
``data-latency-ms`` is the time from the last input event to the frame that showed its view.
"""

from __future__ import annotations

import json
import math

#: Set a control the way a learner's input does: ``change`` for a select or a checkbox, ``input``
#: then ``change`` for a range (a slider over options moves to that option's index; a log slider
#: to the exponent). ``v`` is the Python value.
_SET = """(el, v) => {
  const fire = (n) => el.dispatchEvent(new Event(n, {bubbles: true}));
  if (el.tagName === "SELECT") {
    const o = [...el.options].find((o) => JSON.stringify(JSON.parse(o.dataset.value)) === JSON.stringify(v));
    if (!o) throw new Error("no option " + JSON.stringify(v) + " in " + el.name);
    el.value = o.value; fire("change");
  } else if (el.type === "checkbox") {
    el.checked = !!v; fire("change");
  } else {
    const values = el.dataset.values ? JSON.parse(el.dataset.values) : null;
    el.value = String(values ? values.indexOf(v) : el.dataset.log ? Math.log10(v) : v);
    fire("input"); fire("change");
  }
}"""


def control(root, name: str):
    return root.locator(f'[name="{name}"]')


def set_control(root, name: str, value) -> None:
    control(root, name).evaluate(_SET, value)


def report(root) -> dict:
    raw = root.get_attribute("data-report")
    return json.loads(raw) if raw else {}


def wait_report(page, root, settings: dict, *, timeout_ms: float = 60_000) -> dict:
    """Wait until the drawn view's settings include ``settings``; return its report."""
    handle = root.element_handle()
    page.wait_for_function(
        """([el, want]) => { const r = el.getAttribute("data-report"); if (!r) return false;
             const s = JSON.parse(r).settings || {};
             return Object.entries(want).every(([k, v]) => JSON.stringify(s[k]) === JSON.stringify(v)); }""",
        arg=[handle, settings], timeout=timeout_ms)
    return report(root)


def number(v) -> float:
    return {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}[v] if isinstance(v, str) else float(v)


def assert_close(name: str, page_values, engine_values, rtol: float = 1e-9) -> None:
    a = [number(v) for v in page_values]
    b = [float(v) for v in engine_values]
    assert len(a) == len(b), (name, len(a), len(b))
    for k, (x, y) in enumerate(zip(a, b, strict=True)):
        if math.isfinite(y):
            assert math.isfinite(x) and abs(x - y) <= rtol * abs(y) + 1e-300, (name, k, x, y)
        else:
            assert (math.isnan(x) and math.isnan(y)) or x == y, (name, k, x, y)


def legend(root) -> list[str]:
    return [t.strip() for t in root.locator(".gradlab-legend li").all_inner_texts()]


def words(root) -> dict:
    """What the view says in words: control labels, plot titles and axis labels, legend, status."""
    return {
        "controls": [t.strip() for t in root.locator(".gradlab-control label").all_inner_texts()],
        "axes": [t.strip() for t in root.locator(".u-axis .u-label").all_inner_texts()],
        "legend": legend(root),
        "status": root.locator(".gradlab-status").inner_text().strip(),
    }


def colors(root) -> dict:
    """The colours drawn: legend swatches and the status line (CSS colours as the page computes them)."""
    return root.evaluate("""(el) => ({
        legend: [...el.querySelectorAll('.gradlab-legend li')].map((li) =>
            getComputedStyle(li.querySelector('.gradlab-swatch')).getPropertyValue('--c').trim()),
        status: getComputedStyle(el.querySelector('.gradlab-status')).color})""")


def contrast(fg: str, bg: str) -> float:
    """WCAG contrast ratio of two ``rgb(...)`` / ``#rrggbb`` colours."""
    def rgb(c):
        c = c.strip()
        if c.startswith("#"):
            return [int(c[i:i + 2], 16) / 255 for i in (1, 3, 5)]
        return [float(x) / 255 for x in c[c.index("(") + 1:c.index(")")].split(",")[:3]]

    def lum(c):
        lin = [v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4 for v in rgb(c)]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    a, b = sorted((lum(fg), lum(bg)), reverse=True)
    return (a + 0.05) / (b + 0.05)


#: Drag a range input from ``start`` to ``stop`` one step per move at ``rate`` moves a second, in
#: the page (no round trip to the test per move), recording each new data-report's settings and
#: when it was drawn; resolves with the moves, the reports drawn and the time of the release.
DRAG = """async ([el, root, start, stop, rate, axis]) => {
  const fire = (n) => el.dispatchEvent(new Event(n, {bubbles: true}));
  const values = el.dataset.values ? JSON.parse(el.dataset.values) : null;
  const pos = (v) => String(values ? values.indexOf(v) : v);
  const seen = [];
  const obs = new MutationObserver(() => {
    const r = JSON.parse(root.getAttribute("data-report"));
    seen.push({t: performance.now(), value: r.settings[axis], settings: r.settings});
  });
  obs.observe(root, {attributes: true, attributeFilter: ["data-report"]});
  const step = stop >= start ? 1 : -1;
  const t0 = performance.now();
  let moves = 0;
  for (let v = start; step > 0 ? v <= stop : v >= stop; v += step) {
    const due = t0 + (moves * 1000) / rate;
    while (performance.now() < due) await new Promise((r) => setTimeout(r, 1));
    el.value = pos(v); fire("input"); moves += 1;
  }
  const release = performance.now();
  fire("change");
  const deadline = release + 5000;
  while (performance.now() < deadline) {
    const r = JSON.parse(root.getAttribute("data-report"));
    if (r.settings[axis] === stop) break;
    await new Promise((r) => setTimeout(r, 5));
  }
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  obs.disconnect();
  return {t0, release, moves, seen, final: JSON.parse(root.getAttribute("data-report")).settings[axis]};
}"""


def drag(root, name: str, start, stop, *, rate: float = 60.0) -> dict:
    """Drag control ``name`` from ``start`` to ``stop`` at ``rate`` moves/s (see :data:`DRAG`).

    Returns the moves per second, the distinct reports drawn per second while moving, the
    settle time (release to the final value's report) and every report drawn.
    """
    el = control(root, name).element_handle()
    r = root.evaluate(f"(root, args) => ({DRAG})([args[0], root, ...args.slice(1)])",
                      [el, start, stop, rate, name])
    moving = [s for s in r["seen"] if s["t"] <= r["release"]]
    distinct = len({s["value"] for s in moving})
    span = (r["release"] - r["t0"]) / 1000
    final = [s["t"] for s in r["seen"] if s["value"] == stop]
    return {"moves_per_s": r["moves"] / span, "reports_per_s": distinct / span, "distinct": distinct, "span_s": span,
            "settle_ms": (final[0] - r["release"]) if final and final[0] > r["release"] else 0.0,
            "final": r["final"], "seen": r["seen"]}
