/* gradlab's kernel-free explorers (the book site).
 *
 * Every number drawn here was computed at build time by gradlab's engines
 * (tools/book/grids.py, data in ../data/<Class>.js); every status line's words come from
 * gradlab's own catalog and advice functions, computed per grid point in Python
 * (../data/<Class>.<lang>.js). The page only looks values up, fills the catalog's template and
 * applies closed-form transforms of stored norms (clipping by norm and by global norm).
 * No verdict rule is written here.
 *
 * Each explorer is an element [data-gradlab-explorer="<Python class>"]; its controls are form
 * elements named after the Python controls; after every change it carries data-report (JSON:
 * "settings" and the plotted values under the report's field names, input side first) and
 * data-latency-ms (input event → the next animation frame, after the redraw).
 */
(function () {
  "use strict";
  var DATA = window.GRADLAB_DATA || {};

  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (k === "text") e.textContent = attrs[k];
      else e.setAttribute(k, attrs[k]);
    });
    (children || []).forEach(function (c) { e.appendChild(c); });
    return e;
  }

  function select(name, label, options, value) {
    var s = el("select", { name: name, id: uid(name) });
    options.forEach(function (o) {
      var opt = el("option", { value: o[0], text: o[1] });
      if (o[0] === value) opt.selected = true;
      s.appendChild(opt);
    });
    return { input: s, label: el("label", { for: s.id, text: label }) };
  }

  function range(name, label, min, max, step, value) {
    var r = el("input", { type: "range", name: name, id: uid(name), min: min, max: max, step: step,
                          value: value });
    var out = el("output", { for: r.id });
    return { input: r, output: out, label: el("label", { for: r.id, text: label }) };
  }

  var counter = 0;
  function uid(name) { counter += 1; return "gradlab-" + name + "-" + counter; }

  // JSON cannot say inf/NaN: data-report writes them as strings, every other value as a number.
  function jsonValue(v) {
    if (v === null || v === undefined) return "nan";
    if (Number.isNaN(v)) return "nan";
    if (v === Infinity) return "inf";
    if (v === -Infinity) return "-inf";
    return v;
  }

  // The y axis is log10 of the norm on a linear scale (uPlot's log scale stops near 1e±16,
  // float32 gradients reach 1e-45): 0, inf and NaN become gaps.
  function plottable(a) {
    return a.map(function (v) { return (v > 0 && Number.isFinite(v)) ? Math.log10(v) : null; });
  }

  function fill(template, values) {
    return template.replace(/\{(\w+)\}/g, function (m, k) { return k in values ? values[k] : m; });
  }

  function makePlot(host, series, title) {
    var width = Math.max(280, host.clientWidth || 600);
    var opts = {
      title: title, width: width, height: 300,
      scales: { x: { time: false } },
      axes: [{ label: series.xlabel, incrs: [1, 2, 5, 10, 20, 25, 50] },
             { label: series.ylabel, size: 70, incrs: [1, 2, 3, 5, 10, 20, 50, 100],
               values: function (u, vals) { return vals.map(function (v) { return v == null ? "" : "1e" + v; }); } }],
      series: [{ label: series.xlabel }].concat(series.lines),
      legend: { live: false },
    };
    var data = [[1]].concat(series.lines.map(function () { return [null]; }));
    var plot = new uPlot(opts, data, host);
    host.gradlabPlot = plot;
    window.addEventListener("resize", function () {
      plot.setSize({ width: Math.max(280, host.clientWidth || 600), height: 300 });
    });
    return plot;
  }

  // ------------------------------------------------------------------ GradientExplorer (ch. 01)
  function GradientExplorer(root) {
    var lang = root.getAttribute("data-lang") || "en";
    var grid = DATA.GradientExplorer, texts = DATA["GradientExplorer." + lang];
    if (!grid || !texts) { root.appendChild(el("p", { text: "explorer data missing" })); return; }
    var cat = texts.catalog, L = cat.labels;
    var c = grid.controls;
    var controls = el("div", { class: "gradlab-kfx-controls", role: "group" });
    var depth = range("depth", cat.controls.depth, 1, c.depth.length, 1, 20);
    var act = select("activation", cat.controls.activation,
                     c.activation.map(function (a) { return [a, L.activation[a] || a]; }), "sigmoid");
    var init = select("initializer", cat.controls.initializer,
                      c.initializer.map(function (i) { return [i, L.initializer[i] || i]; }), "glorot_uniform");
    var clip = select("clip_mode", cat.controls.clip_mode,
                      c.clip_mode.map(function (m) { return [m, L.clip_mode[m] || m]; }), "off");
    var nExp = c.clip_exponent.length;
    var thr = range("clip_norm", cat.controls.clip_norm, 0, nExp - 1, 1, c.clip_exponent.indexOf(0));
    [depth, act, init, clip, thr].forEach(function (w) {
      var wrap = el("label", {}, []);
      wrap = el("span", { class: "gradlab-kfx-control" }, [w.label, w.input].concat(w.output ? [w.output] : []));
      controls.appendChild(wrap);
    });
    var plotHost = el("div", { class: "gradlab-kfx-plot", role: "img" });
    var status = el("p", { class: "gradlab-kfx-status", role: "status", "aria-live": "polite" });
    var latency = el("p", { class: "gradlab-kfx-latency" });
    root.appendChild(controls);
    root.appendChild(plotHost);
    root.appendChild(status);
    root.appendChild(latency);
    var names = lang === "zh"
      ? { x: "层（输入侧在左）", y: "梯度范数", s: "信号 ‖dL/dz‖", w: "权重梯度 ‖dL/dW‖", c: "裁剪后" }
      : { x: "layer (input side left)", y: "gradient norm", s: "signal ‖dL/dz‖", w: "weight gradient ‖dL/dW‖",
          c: "after clipping" };
    var plot = makePlot(plotHost, {
      xlabel: names.x, ylabel: names.y,
      lines: [{ label: names.s, stroke: "#0550ae", width: 2 },
              { label: names.w, stroke: "#cf222e", width: 1.5 },
              { label: names.c, stroke: "#1a7f37", width: 1.5, dash: [6, 4] }],
    });

    function threshold() { return Math.pow(10, c.clip_exponent[Number(thr.input.value)]); }

    function update(t0) {
      var d = Number(depth.input.value), a = act.input.value, i = init.input.value;
      var mode = clip.input.value, k = Number(thr.input.value), t = threshold();
      var key = a + "|" + i, p = grid.points[key];
      var sig = p.signal_norms[d - 1], w = p.weight_norms[d - 1], g = p.global_norm[d - 1];
      // the closed forms of the engine: tf.clip_by_norm per kernel, and the float64 global norm
      var clipped = mode === "norm" ? w.map(function (v) { return isFinite(v) ? Math.min(v, t) : NaN; })  // an inf norm scales by inf/inf: NaN, as the core
        : mode === "global_norm" ? w.map(function (v) { return v * t / Math.max(g, t); })
        : w.slice();
      thr.input.disabled = mode === "off";
      depth.output.textContent = String(d);
      thr.output.textContent = cat.thresholds[k];
      var ids = texts.points[key][d - 1];
      var advice = texts.advice[ids[mode === "off" ? 0 : 1]];
      var st = grid.status_keys[p.status[d - 1]];
      var clipText = mode === "off" ? cat.clip_off : fill(cat.clip_on, { mode: cat.labels.clip_mode[mode] || mode, threshold: cat.thresholds[k] });
      var line = fill(cat.template, { depth: d, activation: a, initializer: i, mode: "", clip: clipText,
                                      status: cat.status_words[st], advice: advice });
      status.textContent = line;
      status.style.color = cat.status_colors[st] || "inherit";
      var xs = []; for (var n = 1; n <= d; n++) xs.push(n);
      plot.setData([xs, plottable(sig), plottable(w), mode === "off" ? xs.map(function () { return null; }) : plottable(clipped)]);
      plotHost.setAttribute("aria-label", line);
      var report = {
        settings: { depth: d, activation: a, initializer: i, clip_mode: mode, clip_norm: t },
        signal_norms: sig.map(jsonValue), weight_norms: w.map(jsonValue),
        clipped_weight_norms: clipped.map(jsonValue), status: st, status_text: line,
      };
      root.setAttribute("data-report", JSON.stringify(report));
      if (t0 !== undefined) {
        requestAnimationFrame(function () {
          var ms = performance.now() - t0;
          root.setAttribute("data-latency-ms", ms.toFixed(2));
          latency.textContent = (lang === "zh" ? "改动到画面：" : "change to frame: ") + ms.toFixed(1) + " ms";
        });
      }
    }

    [depth, act, init, clip, thr].forEach(function (w) {
      w.input.addEventListener("input", function () { update(performance.now()); });
      w.input.addEventListener("change", function () { update(performance.now()); });
    });
    update();
    root.setAttribute("data-ready", "1");
  }

  // ------------------------------------------------------- lookup explorers (ch. 05, 07, 09)
  // A reduced grid read from the chapter's own explorer at build time: each point holds the
  // report's fields and the kernel's status_text; the page only looks them up.
  var LOOKUP = {
    GradientExplorer05: { x: { en: "layer (input side left)", zh: "层（输入侧在左）" },
                          y: { en: "gradient norm", zh: "梯度范数" },
                          names: { signal_norms: { en: "signal ‖dL/dz‖", zh: "信号 ‖dL/dz‖" },
                                   weight_norms: { en: "weight gradient ‖dL/dW‖", zh: "权重梯度 ‖dL/dW‖" },
                                   predicted_signal: { en: "variance propagation", zh: "方差传播预测" } } },
    TimeExplorer: { x: { en: "time step (1 = earliest)", zh: "时间步（1 = 最早）" },
                    y: { en: "‖dL/dh_t‖", zh: "‖dL/dh_t‖" },
                    names: { time_step_norms: { en: "gradient at each step", zh: "每个时间步的梯度" } } },
    TransformerExplorer: { x: { en: "block (1 = earliest)", zh: "块（1 = 最早）" },
                           y: { en: "gradient norm", zh: "梯度范数" },
                           names: { layer_grad_norms: { en: "block gradient norm", zh: "块的梯度范数" } } },
  };
  var COLORS = ["#0550ae", "#cf222e", "#1a7f37", "#8250df"];

  function Lookup(root, gridName) {
    var lang = root.getAttribute("data-lang") || "en";
    var grid = DATA[gridName], texts = DATA[gridName + "." + lang], spec = LOOKUP[gridName];
    if (!grid || !texts) { root.appendChild(el("p", { text: "explorer data missing" })); return; }
    var controls = el("div", { class: "gradlab-kfx-controls", role: "group" });
    var inputs = grid.controls.map(function (c) {
      var label = texts.controls[c.name] || c.name, labels = texts.labels[c.name];
      var def = Math.max(0, c.values.indexOf(c["default"]));
      var w;
      if (c.kind === "range") {
        w = range(c.name, label, 0, c.values.length - 1, 1, def);
      } else if (c.kind === "checkbox") {
        var box = el("input", { type: "checkbox", name: c.name, id: uid(c.name) });
        box.checked = !!c.values[def];
        w = { input: box, label: el("label", { for: box.id, text: label }) };
      } else {
        w = select(c.name, label, c.values.map(function (v, k) { return [String(k), labels[k]]; }), String(def));
      }
      controls.appendChild(el("span", { class: "gradlab-kfx-control" }, [w.label, w.input].concat(w.output ? [w.output] : [])));
      return { spec: c, w: w, labels: labels };
    });
    var plotHost = el("div", { class: "gradlab-kfx-plot", role: "img" });
    var status = el("p", { class: "gradlab-kfx-status", role: "status", "aria-live": "polite" });
    var latency = el("p", { class: "gradlab-kfx-latency" });
    [controls, plotHost, status, latency].forEach(function (e) { root.appendChild(e); });
    var plot = makePlot(plotHost, {
      xlabel: spec.x[lang], ylabel: spec.y[lang],
      lines: grid.fields.map(function (f, k) {
        return { label: spec.names[f][lang], stroke: COLORS[k % COLORS.length], width: k ? 1.5 : 2,
                 dash: f === "predicted_signal" ? [6, 4] : undefined };
      }),
    });

    function index(item) {
      if (item.spec.kind === "checkbox") return item.w.input.checked ? 1 : 0;
      return Number(item.w.input.value);
    }

    function update(t0) {
      var idx = inputs.map(index), key = idx.join("|"), p = grid.points[key];
      var settings = {};
      inputs.forEach(function (item, k) {
        settings[item.spec.name] = item.spec.values[idx[k]];
        if (item.w.output) item.w.output.textContent = item.labels[idx[k]];
      });
      var first = grid.fields.map(function (f) { return p[f]; }).filter(function (a) { return a; })[0] || [];
      var xs = first.map(function (_, k) { return k + 1; });
      plot.setData([xs].concat(grid.fields.map(function (f) {
        return p[f] ? plottable(p[f]) : xs.map(function () { return null; });
      })));
      var line = texts.status[key];
      status.textContent = line;
      status.style.color = (p.status && texts.status_colors[p.status]) || "inherit";
      plotHost.setAttribute("aria-label", line);
      var report = { settings: settings, status: p.status, status_text: line };
      grid.fields.forEach(function (f) { report[f] = p[f] ? p[f].map(jsonValue) : null; });
      root.setAttribute("data-report", JSON.stringify(report));
      if (t0 !== undefined) {
        requestAnimationFrame(function () {
          var ms = performance.now() - t0;
          root.setAttribute("data-latency-ms", ms.toFixed(2));
          latency.textContent = (lang === "zh" ? "改动到画面：" : "change to frame: ") + ms.toFixed(1) + " ms";
        });
      }
    }
    inputs.forEach(function (item) {
      ["input", "change"].forEach(function (ev) {
        item.w.input.addEventListener(ev, function () { update(performance.now()); });
      });
    });
    update();
    root.setAttribute("data-ready", "1");
  }

  var KINDS = { GradientExplorer: GradientExplorer };
  Object.keys(LOOKUP).forEach(function (g) { KINDS[g] = function (root) { Lookup(root, g); }; });
  window.GRADLAB_EXPLORERS = KINDS;

  function start() {
    document.querySelectorAll("[data-gradlab-explorer]").forEach(function (root) {
      if (root.getAttribute("data-ready")) return;
      var kind = KINDS[root.getAttribute("data-gradlab-grid") || root.getAttribute("data-gradlab-explorer")];
      if (kind) kind(root);
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
