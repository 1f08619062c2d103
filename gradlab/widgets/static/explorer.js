/* gradlab's explorer view: one ES module for every explorer, in JupyterLab and on the book site.
 *
 * JupyterLab (and Notebook 7, VS Code, Colab) render it through anywidget; the book site renders
 * the same file through a small model object over the stored grids (book/_static/gradlab/site.js).
 * Either way the model has anywidget's interface (get, set, save_changes, on, off, send) and
 * these fields, all made in Python (gradlab/widgets/base.py):
 *
 *   kind      the Python class name: the root carries data-gradlab-explorer="<kind>"
 *   controls  [{name, type, label, ...}]: the form controls, named after the Python controls
 *   values    {name: value}: the controls' values (the page sets it, the kernel reads it)
 *   view      what to draw: {values, epoch, report, status, notes, plots, layout?}
 *             (layout "stacked": the controls above the plots, for a view of many plots)
 *   axis      the name of the control the kernel computes ahead along ("" when none)
 *
 * A view may hold every value of a "frame" control (chapter 11's step slider): view.frames =
 * {control, values}, series with one y per frame (frames), plots with one title per frame (titles)
 * and a cursor at the frame's value. Moving that control then draws from the view at hand, with no
 * message to the kernel's computation (atFrame; gradlab.plots.view.at_frame in Python).
 *
 * and custom messages {type: "points", views: [view, ...]}: views along the axis, computed ahead,
 * so a drag along it never waits for the kernel. The page draws the view of the current values,
 * or along the axis the nearest one it has: always a setting's exact numbers, never an
 * interpolation. Every label, colour, status line and limit comes from Python: this module holds
 * no verdict rule and no text in any language. Numbers that JSON cannot carry arrive as the
 * strings "inf", "-inf" and "nan".
 *
 * After every drawn view the root carries data-report (the view's report, JSON), data-draws (how
 * many views it has drawn) and data-latency-ms (the last input event to the frame that showed
 * its exact view).
 */

const NONFINITE = { inf: Infinity, "-inf": -Infinity, nan: NaN };
const num = (v) => (typeof v === "string" ? NONFINITE[v] : v === null || v === undefined ? NaN : v);
const SUPER = { "-": "⁻", 0: "⁰", 1: "¹", 2: "²", 3: "³", 4: "⁴", 5: "⁵", 6: "⁶", 7: "⁷", 8: "⁸", 9: "⁹" };
const superscript = (k) => String(k).split("").map((c) => SUPER[c] ?? c).join("");

/** uPlot: the page's own (the site loads it as a script), else the copy the model carries. */
async function uPlotFor(model) {
  if (globalThis.uPlot) return globalThis.uPlot;
  const src = model.get("_lib");
  const url = URL.createObjectURL(new Blob([src + "\nexport default uPlot;\n"], { type: "text/javascript" }));
  try {
    globalThis.uPlot = (await import(url)).default;
  } finally {
    URL.revokeObjectURL(url);
  }
  return globalThis.uPlot;
}

/** A number as Python's format(x, f".{digits}g") writes it, closely enough for a readout. */
function fmt(x, digits) {
  if (!Number.isFinite(x)) return String(x);
  const s = Number(x.toPrecision(digits || 3));
  const a = Math.abs(s);
  if (a !== 0 && (a < 1e-4 || a >= 10 ** (digits || 3))) {
    const [m, e] = s.toExponential().split("e");
    return `${Number(Number(m).toPrecision(digits || 3))}e${e[0] === "-" ? "-" : "+"}${e.replace(/^[-+]/, "").padStart(2, "0")}`;
  }
  return String(s);
}

/** The settings of ``values`` other than ``axis`` and the frame controls, as one key. */
function otherKey(values, axis, frames) {
  const o = {};
  Object.keys(values || {}).sort().forEach((k) => { if (k !== axis && !(frames && frames.has(k))) o[k] = values[k]; });
  return JSON.stringify(o);
}

/** The frame of ``view`` shown at ``values``: the last whose value is at or below the control's. */
function frameIndex(view, values) {
  const f = view.frames;
  if (!f || !f.values || !f.values.length) return -1;
  const at = values && f.control in values ? values[f.control] : f.values[f.values.length - 1];
  let k = 0;
  f.values.forEach((v, j) => { if (v <= at) k = j; });
  return k;
}

/** ``view`` with its frames resolved at ``values`` (gradlab.plots.view.at_frame). */
function atFrame(view, values) {
  const k = frameIndex(view, values);
  if (k < 0) return view;
  const x = view.frames.values[k];
  return { ...view, plots: (view.plots || []).map((p) => {
    const q = { ...p };
    if (p.series) q.series = p.series.map((s) => (s.frames ? { ...s, y: s.frames[k] } : s));
    if (p.titles) q.title = p.titles[k];
    if (p.cursor) q.cursor_x = x;
    return q;
  }) };
}

function isDark(el) {
  const b = document.body, h = document.documentElement;
  if (b && b.dataset.jpThemeLight === "false") return true;
  if (h && h.dataset.theme === "dark") return true;
  return !!(el.closest && el.closest("[data-theme=dark]"));
}

const pick = (color, dark) => (Array.isArray(color) ? color[dark ? 1 : 0] : color);

function el(tag, attrs, children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "text") e.textContent = v;
    else if (k === "class") e.className = v;
    else e.setAttribute(k, v === true ? "" : v);
  }
  (children || []).forEach((c) => c && e.appendChild(c));
  return e;
}

let uid = 0;

// ----------------------------------------------------------------------------- controls
/** One form control: {row, input, get(), set(value), sync(spec)}. */
function makeControl(spec, onInput, onClick) {
  const id = `gradlab-${spec.name}-${++uid}`;
  const label = el("label", { for: id, text: spec.label });
  let input, output, extra, get, set;
  if (spec.type === "select") {
    input = el("select", { id, name: spec.name });
    const fill = (options) => {
      input.replaceChildren(...options.map(([v, label], k) => el("option", { value: String(k), text: label,
                                                                            "data-value": JSON.stringify(v) })));
    };
    fill(spec.options);
    get = () => spec.options[Number(input.value)][0];
    set = (v) => {
      const k = spec.options.findIndex(([o]) => JSON.stringify(o) === JSON.stringify(v));
      if (k >= 0) input.value = String(k);
    };
    input.addEventListener("change", () => onInput(spec.name, get(), false));
    input._fill = fill;
  } else if (spec.type === "checkbox") {
    input = el("input", { id, name: spec.name, type: "checkbox" });
    get = () => input.checked;
    set = (v) => { input.checked = !!v; };
    input.addEventListener("change", () => onInput(spec.name, get(), false));
  } else if (spec.type === "range") {
    // a slider over a number (log: over its exponent), or over a list of options
    const opts = spec.options;
    const lo = opts ? 0 : spec.min, hi = opts ? opts.length - 1 : spec.max, step = opts ? 1 : spec.step;
    input = el("input", { id, name: spec.name, type: "range", min: lo, max: hi, step,
                          "data-values": opts ? JSON.stringify(opts.map(([v]) => v)) : null, "data-log": spec.log ? "1" : null });
    output = el("output", { for: id, class: "gradlab-readout" });
    const value = (pos) => (opts ? opts[pos][0] : spec.log ? 10 ** pos : pos);
    let current = spec.value;
    get = () => current;
    const readout = () => {
      if (opts) {
        const k = opts.findIndex(([o]) => o === current);
        output.textContent = k >= 0 ? opts[k][1] : fmt(current, spec.digits);
      } else {
        output.textContent = Number.isInteger(current) && !spec.log ? String(current) : fmt(current, spec.digits);
      }
    };
    set = (v) => {
      current = v;
      if (opts) {
        let k = opts.findIndex(([o]) => o === v);
        if (k < 0) k = opts.reduce((b, [o], j) => (Math.abs(o - v) < Math.abs(opts[b][0] - v) ? j : b), 0);
        input.value = String(k);
      } else {
        input.value = String(spec.log ? Math.log10(v) : v);
      }
      readout();
    };
    input.addEventListener("input", () => {
      current = value(Number(input.value));
      readout();
      onInput(spec.name, current, true);
    });
    input.addEventListener("change", () => onInput(spec.name, current, false));
    if (spec.play) {
      // play: one grid step per tick to the end, then stop (pressed again at the end: from the start)
      let timer = null;
      const button = el("button", { type: "button", class: "gradlab-play", "aria-label": spec.play,
                                    "aria-pressed": "false", text: "▶" });
      const stop = () => {
        if (timer === null) return;
        clearInterval(timer);
        timer = null;
        button.textContent = "▶";
        button.setAttribute("aria-pressed", "false");
        onInput(spec.name, current, false);
      };
      const tick = () => {
        const pos = Number(input.value) + step;
        if (pos > Number(input.max)) return stop();
        input.value = String(pos);
        current = value(pos);
        readout();
        onInput(spec.name, current, true);
      };
      button.addEventListener("click", () => {
        if (timer !== null) return stop();
        if (Number(input.value) + step > Number(input.max)) { input.value = String(lo); current = value(lo); readout(); }
        button.textContent = "❚❚";
        button.setAttribute("aria-pressed", "true");
        timer = setInterval(tick, spec.play_ms || 100);
      });
      extra = button;
    }
  } else if (spec.type === "button") {
    input = el("button", { id, name: spec.name, type: "button", text: spec.label });
    input.addEventListener("click", () => onClick(spec.name));
    get = () => null;
    set = () => {};
  } else if (spec.type === "progress") {
    input = el("progress", { id, name: spec.name, max: spec.max, value: spec.value });
    get = () => Number(input.value);
    set = (v) => { input.value = v; };
  } else {
    throw new Error(`gradlab: unknown control type ${spec.type}`);
  }
  const row = el("div", { class: `gradlab-control gradlab-control-${spec.type}` },
    spec.type === "button" ? [input] : [label, input, output, extra]);
  const sync = (s) => {
    input.disabled = !!s.disabled;
    row.hidden = !!s.hidden;
    if (s.type === "progress") { input.max = s.max; input.value = s.value; }
    if (s.type === "select" && JSON.stringify(s.options) !== JSON.stringify(spec.options)) {
      spec.options = s.options;
      input._fill(s.options);
    }
    if (s.type === "range" && s.options && JSON.stringify(s.options) !== JSON.stringify(spec.options)) {
      spec.options = s.options;
      input.max = s.options.length - 1;
    }
    if (s.type === "range" && !s.options && (s.max !== spec.max || s.min !== spec.min)) {
      spec.max = s.max;
      spec.min = s.min;
      input.min = String(s.min);
      input.max = String(s.max);
      set(get());
    }
  };
  sync(spec);
  if (spec.type !== "button" && spec.type !== "progress") set(spec.value);
  return { spec, row, input, get, set, sync };
}

// ----------------------------------------------------------------------------- plots
function logTicks(min, max) {
  // decades where the range holds two or more; else round numbers inside it
  const lo = Math.ceil(min - 1e-9), hi = Math.floor(max + 1e-9);
  if (hi - lo >= 1) {
    const every = Math.max(1, Math.ceil((hi - lo + 1) / 8));
    const out = [];
    for (let k = Math.ceil(lo / every) * every; k <= hi; k += every) out.push(k);
    return out;
  }
  const a = 10 ** min, b = 10 ** max, raw = (b - a) / 4;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
  const out = [];
  for (let v = Math.ceil(a / step) * step; v <= b * (1 + 1e-12); v += step) out.push(Math.log10(v));
  return out;
}

function logLabel(k) {
  if (Math.abs(k - Math.round(k)) < 1e-9) return "10" + superscript(Math.round(k));
  const v = 10 ** k, e = Math.floor(k + 1e-12), m = Number((v / 10 ** e).toPrecision(2));
  if (e >= -3 && e <= 3) return String(Number(v.toPrecision(3)));
  return `${m}×10${superscript(e)}`;
}

/** Draw one "lines" plot spec into ``host`` with uPlot; returns {update(spec, dark), destroy()}. */
function linesPlot(U, host) {
  let u = null, shape = null, spec = null, dark = false;
  const frame = () => (dark ? { text: "#c9d1d9", grid: "#30363d" } : { text: "#24292f", grid: "#d8dee4" });

  function data(s) {
    const xs = new Set();
    const seriesX = s.series.map((ser) => (ser.x || s.x).map(num));
    seriesX.forEach((xx) => xx.forEach((x) => xs.add(x)));
    const x = [...xs].filter(Number.isFinite).sort((a, b) => a - b);
    const at = new Map(x.map((v, k) => [v, k]));
    const ys = s.series.map((ser, j) => {
      const col = new Array(x.length).fill(null);
      ser.y.forEach((v, k) => {
        const val = num(v);
        const pos = s.ylog ? (val > 0 && Number.isFinite(val) ? Math.log10(val) : null) : (Number.isFinite(val) ? val : null);
        col[at.get(seriesX[j][k])] = pos;
      });
      return col;
    });
    return [x, ...ys];
  }

  function build(s) {
    const f = frame();
    // the limits of the spec drawn now (``spec`` changes with every update, the plot does not)
    const yRange = () => (spec.ylog ? spec.ylim.map((v) => Math.log10(num(v))) : spec.ylim.map(num));
    const font = "11px system-ui, sans-serif", labelFont = "12px system-ui, sans-serif";
    const axisY = {
      label: s.ylabel, stroke: f.text, grid: { stroke: f.grid, width: 1 }, ticks: { stroke: f.grid },
      size: 58, labelSize: 18, font, labelFont,
    };
    if (s.ylog) {
      axisY.splits = (uu, i, mn, mx) => logTicks(mn, mx);
      axisY.values = (uu, vals) => vals.map(logLabel);
    }
    const opts = {
      width: Math.max(240, host.clientWidth || 600), height: s.height || 300,
      title: s.title,
      legend: { show: false },
      cursor: { show: true, drag: { x: false, y: false }, points: { show: false } },
      scales: { x: { time: false, range: () => spec.xlim.map(num) }, y: { range: yRange } },
      axes: [{ label: s.xlabel, stroke: f.text, font, labelFont, incrs: s.x.every((v) => Number.isInteger(num(v))) ? [1, 2, 5, 10, 20, 25, 50, 100, 200] : undefined, grid: { stroke: f.grid, width: 1 }, ticks: { stroke: f.grid },
               labelSize: 20, values: s.xticks ? (uu, vals) => vals.map((v) => (s.xticks.find((t) => t[0] === v) || [0, ""])[1]) : undefined,
               splits: s.xticks ? () => s.xticks.map((t) => t[0]) : undefined }, axisY],
      series: [{}].concat(s.series.map((ser) => ({
        label: ser.label,
        stroke: pick(ser.color, dark),
        width: ser.line === false ? 0 : ser.width || 1.5,
        dash: ser.dash || undefined,
        spanGaps: !!ser.span,
        points: ser.marker ? { show: true, size: ser.marker_size || 5, stroke: pick(ser.color, dark),
                               fill: ser.marker === "open" ? (dark ? "#0d1117" : "#fff") : pick(ser.color, dark) }
                           : { show: false },
      }))),
      hooks: {
        drawClear: [(uu) => drawBand(uu)],
        draw: [(uu) => drawMarks(uu)],
      },
    };
    return new U(opts, data(s), host);
  }

  function drawBand(uu) {
    const b = spec && spec.band;
    if (!b) return;
    const ctx = uu.ctx, lo = num(b.lo), hi = num(b.hi);
    const toY = (v) => uu.valToPos(spec.ylog ? Math.log10(v) : v, "y", true);
    const top = Math.max(uu.bbox.top, Math.min(toY(hi), uu.bbox.top + uu.bbox.height));
    const bottom = Math.min(uu.bbox.top + uu.bbox.height, Math.max(toY(lo), uu.bbox.top));
    ctx.save();
    ctx.fillStyle = pick(b.color, dark);
    ctx.globalAlpha = b.alpha || 0.14;
    ctx.fillRect(uu.bbox.left, top, uu.bbox.width, bottom - top);
    ctx.restore();
  }

  function drawMarks(uu) {
    if (spec && spec.cursor_x !== undefined && spec.cursor_x !== null) {
      const ctx = uu.ctx, x = uu.valToPos(num(spec.cursor_x), "x", true);
      ctx.save();
      ctx.strokeStyle = pick(spec.cursor, dark);
      ctx.globalAlpha = 0.7;
      ctx.lineWidth = devicePixelRatio;
      ctx.beginPath();
      ctx.moveTo(x, uu.bbox.top);
      ctx.lineTo(x, uu.bbox.top + uu.bbox.height);
      ctx.stroke();
      ctx.restore();
    }
    (spec && spec.markers || []).forEach((m) => {
      const ctx = uu.ctx, r = 5 * devicePixelRatio;
      ctx.save();
      ctx.fillStyle = pick(m.color, dark);
      m.x.forEach((xv) => {
        const x = uu.valToPos(num(xv), "x", true);
        const y = m.at === "top" ? uu.bbox.top + r * 1.2 : uu.bbox.top + uu.bbox.height - r * 1.2;
        const dir = m.at === "top" ? -1 : 1;  // ▲ at the top edge, ▼ at the bottom
        ctx.beginPath();
        ctx.moveTo(x - r, y - dir * r);
        ctx.lineTo(x + r, y - dir * r);
        ctx.lineTo(x, y + dir * r);
        ctx.closePath();
        ctx.fill();
      });
      ctx.restore();
    });
  }

  return {
    update(s, isDarkNow) {
      const newShape = JSON.stringify([s.xlabel, s.ylabel, s.ylog, s.height, s.xticks,
        s.series.map((x) => [x.label, x.color, x.dash, x.width, x.marker, x.line])]) + isDarkNow;
      spec = s;
      dark = isDarkNow;
      if (!u || newShape !== shape) {
        if (u) u.destroy();
        u = build(s);
        shape = newShape;
      } else {
        u.setData(data(s), true);  // the scales' ranges read the new spec
      }
      const t = u.root.querySelector(".u-title");
      if (t) {
        t.textContent = s.title || "";
        t.style.color = pick(s.title_color, dark) || "";
      }
    },
    resize() { if (u) u.setSize({ width: Math.max(240, host.clientWidth || 600), height: (spec && spec.height) || 300 }); },
    destroy() { if (u) u.destroy(); u = null; },
  };
}

/** A heatmap spec drawn on a canvas (the JacobianViewer): {z, rows, cols, zmin, zmax, colors}. */
function heatmapPlot(host) {
  const title = el("div", { class: "gradlab-heat-title" });
  const canvas = el("canvas", { class: "gradlab-heat" });
  const ylabel = el("div", { class: "gradlab-heat-ylabel" });
  const xlabel = el("div", { class: "gradlab-heat-xlabel" });
  const bar = el("div", { class: "gradlab-heat-bar" });
  const body = el("div", { class: "gradlab-heat-body" }, [ylabel, canvas, bar]);
  host.append(title, body, xlabel);
  let spec = null;
  const color = (stops, t) => {
    const x = Math.min(1, Math.max(0, t)) * (stops.length - 1), k = Math.min(stops.length - 2, Math.floor(x));
    const a = stops[k], b = stops[k + 1], f = x - k;
    const c = (i) => Math.round(parseInt(a.slice(i, i + 2), 16) * (1 - f) + parseInt(b.slice(i, i + 2), 16) * f);
    return `rgb(${c(1)},${c(3)},${c(5)})`;
  };
  function draw() {
    const s = spec;
    const side = Math.min(360, Math.max(160, (host.clientWidth || 400) - 140));
    const w = side, h = Math.max(40, Math.round(side * Math.min(2, s.rows / s.cols)));
    canvas.width = w * devicePixelRatio;
    canvas.height = h * devicePixelRatio;
    canvas.style.width = `${w}px`;
    canvas.style.height = `${h}px`;
    const ctx = canvas.getContext("2d");
    const cw = canvas.width / s.cols, ch = canvas.height / s.rows;
    const lo = num(s.zmin), hi = num(s.zmax);
    for (let r = 0; r < s.rows; r++) {
      for (let c = 0; c < s.cols; c++) {
        const v = num(s.z[r * s.cols + c]);
        ctx.fillStyle = Number.isFinite(v) ? color(s.colors, hi > lo ? (v - lo) / (hi - lo) : 0.5) : s.bad || "#888888";
        ctx.fillRect(Math.floor(c * cw), Math.floor(r * ch), Math.ceil(cw), Math.ceil(ch));
      }
    }
    title.textContent = s.title || "";
    xlabel.textContent = s.xlabel || "";
    ylabel.textContent = s.ylabel || "";
    bar.replaceChildren(
      el("span", { text: fmt(hi, 3) }),
      el("span", { class: "gradlab-heat-ramp", style: `background: linear-gradient(to top, ${s.colors.join(",")}); height: ${h - 40}px` }),
      el("span", { text: fmt(lo, 3) }),
      el("span", { class: "gradlab-heat-barlabel", text: s.zlabel || "" }));
  }
  return {
    update(s) { spec = s; draw(); },
    resize() { if (spec) draw(); },
    destroy() { host.replaceChildren(); },
  };
}

function legendItems(view, dark) {
  const items = [];
  (view.plots || []).forEach((p) => {
    if (p.type !== "lines") return;
    if (p.band) items.push({ label: p.band.label, color: pick(p.band.color, dark), kind: "band" });
    p.series.forEach((s) => {
      if (s.y.some((v) => { const x = num(v); return Number.isFinite(x) && (!p.ylog || x > 0); }) && s.label) {
        items.push({ label: s.label, color: pick(s.color, dark), kind: s.line === false ? "dot" : s.dash ? "dash" : "line" });
      }
    });
    (p.markers || []).forEach((m) => {
      if (m.x.length) items.push({ label: m.label, color: pick(m.color, dark), kind: m.at === "top" ? "up" : "down" });
    });
  });
  const seen = new Set();
  return items.filter((i) => (seen.has(i.label) ? false : seen.add(i.label)));
}

// ----------------------------------------------------------------------------- the view
async function render({ model, el: host }) {
  const U = await uPlotFor(model);
  // the keys a learner presses on its controls (arrows on a slider) are the controls', not the
  // notebook's shortcuts (Lumino skips events from inside an element with this attribute)
  const root = el("div", { class: "gradlab-view", "data-gradlab-explorer": model.get("kind"),
                           "data-lm-suppress-shortcuts": "true" });
  const wide = el("div", { class: "gradlab-wide" });
  const controlsBox = el("div", { class: "gradlab-controls", role: "group" });
  const plotsBox = el("div", { class: "gradlab-plots" });
  const legend = el("ul", { class: "gradlab-legend" });
  const status = el("p", { class: "gradlab-status", role: "status", "aria-live": "polite" });
  const notes = el("div", { class: "gradlab-notes" });
  root.append(wide, el("div", { class: "gradlab-row" }, [controlsBox, el("div", { class: "gradlab-figure" }, [plotsBox, legend])]),
              status, notes);
  host.appendChild(root);
  // ...nor the notebook's own key handling (arrow keys move between cells in JupyterLab)
  root.addEventListener("keydown", (e) => e.stopPropagation());

  let axis = model.get("axis") || "";
  let values = { ...(model.get("values") || {}) };
  let controls = {};
  let epoch = -1;
  let cache = new Map();   // otherKey -> Map(axis value or "" -> view)
  let shown = null;        // the view drawn
  let shownFrame = -1;     // and its frame
  let frames = new Set();  // the frame controls (their values never need the kernel)
  let plots = [];          // one drawer per plot of the view
  let plotShape = "";
  let draws = 0;
  let inputAt = null;      // performance.now() of the last input event not yet shown exactly
  let lastInput = null;    // the control the learner moved last
  let dark = isDark(host);

  function store(v) {
    if (!v || !v.values) return;
    if (v.epoch !== undefined && v.epoch > epoch) {
      epoch = v.epoch;
      cache = new Map();
    } else if (v.epoch !== undefined && v.epoch < epoch) {
      return;
    }
    const k = otherKey(v.values, axis, frames);
    if (!cache.has(k)) cache.set(k, new Map());
    cache.get(k).set(axis ? v.values[axis] : "", v);
  }

  /** The view to draw for the current values: exact, else (while the axis is being moved) the
   *  nearest one along it. */
  function best() {
    const m = cache.get(otherKey(values, axis, frames));
    if (!m || !m.size) return null;
    if (!axis) return m.get("") || null;
    if (m.has(values[axis])) return m.get(values[axis]);
    if (lastInput !== axis) return null;
    let b = null, d = Infinity;
    for (const [a, v] of m) {
      const dd = Math.abs(a - values[axis]);
      if (dd < d) { d = dd; b = v; }
    }
    return b;
  }

  function redraw() {
    const v = best();
    root.classList.toggle("gradlab-busy", !v || (axis ? v.values[axis] !== values[axis] : false));
    if (!v || (v === shown && frameIndex(v, values) === shownFrame)) return;
    draw(v);
  }

  function draw(whole) {
    shown = whole;
    root.classList.toggle("gradlab-stacked", whole.layout === "stacked");
    shownFrame = frameIndex(whole, values);
    const v = atFrame(whole, values);
    const shape = JSON.stringify((v.plots || []).map((p) => [p.type, p.flex]));
    if (shape !== plotShape) {
      plots.forEach((p) => p.destroy());
      plotsBox.replaceChildren();
      plots = (v.plots || []).map((p) => {
        const box = el("div", { class: `gradlab-plot gradlab-plot-${p.type}`, role: "img" });
        box.style.flex = `${p.flex || 1} 1 ${p.basis || 260}px`;
        plotsBox.appendChild(box);
        return p.type === "heatmap" ? heatmapPlot(box) : linesPlot(U, box);
      });
      plotShape = shape;
    }
    (v.plots || []).forEach((p, k) => {
      plots[k].update(p, dark);
      plotsBox.children[k].setAttribute("aria-label", (p.title || "") + (v.status ? ` · ${v.status.text}` : ""));
    });
    legend.replaceChildren(...legendItems(v, dark).map((i) =>
      el("li", { class: `gradlab-legend-${i.kind}` }, [el("span", { class: "gradlab-swatch", style: `--c: ${i.color}` }),
                                                        el("span", { text: i.label })])));
    status.textContent = v.status ? v.status.text : "";
    status.style.color = v.status ? pick(v.status.color, dark) || "" : "";
    notes.replaceChildren(...(v.notes || []).map((line) => el("p", {}, line.map((part) =>
      el(part.bold ? "b" : part.italic ? "i" : "span", {
        text: part.text, style: [part.color ? `color: ${pick(part.color, dark)}` : "", part.small ? "font-size: .9em" : ""].join(";"),
      })))));
    root.setAttribute("data-report", JSON.stringify(v.report || {}));
    root.setAttribute("data-draws", String(++draws));
    const exact = !axis || v.values[axis] === values[axis];
    if (inputAt !== null && exact && otherKey(v.values, "", frames) === otherKey(values, "", frames)) {
      const t0 = inputAt;
      inputAt = null;
      requestAnimationFrame(() => root.setAttribute("data-latency-ms", (performance.now() - t0).toFixed(2)));
    }
  }

  function onInput(name, value, dragging) {
    values = { ...values, [name]: value };
    lastInput = name;
    inputAt = performance.now();
    redraw();
    model.set("values", values);
    model.save_changes();
  }

  function buildControls() {
    controlsBox.replaceChildren();
    wide.replaceChildren();
    controls = {};
    frames = new Set((model.get("spec") || []).filter((s) => s.frame).map((s) => s.name));
    (model.get("spec") || []).forEach((spec) => {
      const c = makeControl({ ...spec, value: spec.name in values ? values[spec.name] : spec.value }, onInput, (name) => model.send({ type: "click", name }));
      controls[spec.name] = c;
      (spec.wide ? wide : controlsBox).appendChild(c.row);
    });
  }

  function syncControls() {
    const specs = model.get("spec") || [];
    if (specs.map((s) => s.name).join() !== Object.keys(controls).join()) return buildControls();
    specs.forEach((s) => controls[s.name].sync(s));
  }

  const onValues = () => {
    // the kernel changed values (a cell, a preset, a value out of range put back)
    values = { ...(model.get("values") || {}) };
    Object.entries(values).forEach(([k, v]) => { if (controls[k]) controls[k].set(v); });
    redraw();
  };
  const onView = () => { store(model.get("view")); redraw(); };
  const onMsg = (msg) => {
    if (msg && msg.type === "points") { msg.views.forEach(store); redraw(); }
  };
  const onAxis = () => { axis = model.get("axis") || ""; cache = new Map(); store(model.get("view")); redraw(); };

  buildControls();
  model.on("change:values", onValues);
  model.on("change:view", onView);
  model.on("change:spec", syncControls);
  model.on("change:axis", onAxis);
  model.on("msg:custom", onMsg);
  store(model.get("view"));
  redraw();

  const resize = new ResizeObserver(() => plots.forEach((p) => p.resize()));
  resize.observe(plotsBox);
  const theme = new MutationObserver(() => {
    const d = isDark(host);
    if (d !== dark) { dark = d; const v = shown; shown = null; plotShape = ""; if (v) draw(v); }
  });
  [document.body, document.documentElement].forEach((n) => n && theme.observe(n, { attributes: true,
    attributeFilter: ["data-jp-theme-light", "data-theme"] }));

  return () => {
    resize.disconnect();
    theme.disconnect();
    plots.forEach((p) => p.destroy());
    model.off("change:values", onValues);
    model.off("change:view", onView);
    model.off("change:spec", syncControls);
    model.off("change:axis", onAxis);
    model.off("msg:custom", onMsg);
  };
}

export default { render };
