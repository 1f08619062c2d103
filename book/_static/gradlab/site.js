/* The book site's explorers: gradlab's own view module, drawn over stored views.
 *
 * Each mount is an element [data-gradlab-site="<grid>"] with data-lang. The page carries the
 * module's text unchanged in <script type="text/plain" id="gradlab-explorer-module"> (a page
 * opened from a file:// URL may load no module script, so the text is imported from a blob),
 * and the grids as scripts (window.GRADLAB_DATA, from book/data/ via tools/book/build.py).
 *
 * This file is the page's stand-in for the kernel: a model object with anywidget's interface
 * (get, set, save_changes, on, off, send) whose views are the ones gradlab's explorers made
 * at build time (tools/book/grids.py stores a template view per language and, per setting,
 * the leaves that differ). It only looks views up and puts them back together: every number,
 * label, colour and status line in them was made in Python.
 */
(function () {
  "use strict";
  var DATA = window.GRADLAB_DATA || {};

  // a stored path: keys and list indices joined by "/", e.g. "plots/0/series/1/y"
  function container(obj, keys, upto) {
    var o = obj;
    for (var k = 0; k < upto; k++) {
      var key = keys[k];
      if (o[key] === undefined || o[key] === null) o[key] = /^\d+$/.test(keys[k + 1]) ? [] : {};
      o = o[key];
    }
    return o;
  }

  /** The view of one setting: the template's leaves, this setting's own (numbers; texts by their
   *  index in ``strings``; a list equal to an earlier one as {"#ref": path}), less those it drops. */
  function viewOf(template, numbers, texts, strings) {
    var own = {};
    Object.keys(texts || {}).forEach(function (p) { own[p] = strings[texts[p]]; });
    var flat = Object.assign({}, template, numbers || {}, own);
    Object.keys(flat).forEach(function (p) {
      var v = flat[p];
      if (v && typeof v === "object" && !Array.isArray(v) && v["#ref"] !== undefined) flat[p] = flat[v["#ref"]];
    });
    ((numbers || {})["#drop"] || []).forEach(function (p) { delete flat[p]; });
    delete flat["#drop"];
    var view = {}, lengths = [];
    Object.keys(flat).forEach(function (p) {
      var keys = p.split("/"), last = keys[keys.length - 1];
      if (last === "#len") { lengths.push([keys.slice(0, -1), flat[p]]); return; }
      if (last === "#dict") { if (keys.length > 1) container(view, keys, keys.length - 1); return; }
      container(view, keys, keys.length - 1)[last] = flat[p];
    });
    lengths.forEach(function (l) { var a = container(view, l[0].concat(["0"]), l[0].length); a.length = l[1]; });
    return view;
  }

  function Model(host, grid, texts) {
    var controls = grid.controls;
    var state = {
      kind: grid.meta.explorer, spec: texts.spec, values: Object.assign({}, grid.values),
      axis: grid.axis || "", view: null, _lib: "",
    };
    var listeners = {};
    function emit(name, arg) { (listeners[name] || []).slice().forEach(function (cb) { cb(arg); }); }
    function index(name, value) {
      var c = controls.filter(function (x) { return x.name === name; })[0];
      for (var k = 0; k < c.values.length; k++) if (JSON.stringify(c.values[k]) === JSON.stringify(value)) return k;
      return -1;
    }
    function key(values) {
      var idx = controls.map(function (c) { return index(c.name, values[c.name]); });
      return idx.indexOf(-1) >= 0 ? null : idx.join("|");
    }
    function view(values) {
      var k = key(values);
      if (k === null || !grid.points[k]) return null;
      return viewOf(texts.template, grid.points[k], texts.points[k], texts.strings);
    }
    function alongAxis(values) {
      var axis = state.axis, c = controls.filter(function (x) { return x.name === axis; })[0];
      if (!c) return [];
      return c.values.map(function (v) {
        var vv = Object.assign({}, values);
        vv[axis] = v;
        return view(vv);
      }).filter(Boolean);
    }
    var model = {
      get: function (name) { return state[name]; },
      set: function (name, value) { state[name] = value; emit("change:" + name); },
      save_changes: function () {
        // a frame control (chapter 11's step) keeps the view: the page draws its frame
        var k = key(state.values);
        if (k !== null && k === shownKey) return;
        var v = view(state.values);
        if (v) { state.view = v; shownKey = k; emit("change:view"); }
      },
      on: function (name, cb) { (listeners[name] = listeners[name] || []).push(cb); },
      off: function (name, cb) {
        listeners[name] = (listeners[name] || []).filter(function (f) { return f !== cb; });
      },
      send: function () {},
    };
    state.view = view(state.values);
    var shownKey = key(state.values);
    // the whole axis at once: the page moves along it without asking
    setTimeout(function () { emit("msg:custom", { type: "points", views: alongAxis(state.values) }); }, 0);
    model.on("change:values", function () {
      setTimeout(function () { emit("msg:custom", { type: "points", views: alongAxis(state.values) }); }, 0);
    });
    return model;
  }

  async function start() {
    var hosts = document.querySelectorAll("[data-gradlab-site]");
    if (!hosts.length) return;
    var src = document.getElementById("gradlab-explorer-module").textContent;
    var url = URL.createObjectURL(new Blob([src], { type: "text/javascript" }));
    var view = (await import(url)).default;
    hosts.forEach(function (host) {
      var name = host.getAttribute("data-gradlab-site"), lang = host.getAttribute("data-lang") || "en";
      var grid = DATA[name], texts = DATA[name + "." + lang];
      if (!grid || !texts) return;
      var mount = document.createElement("div");
      host.appendChild(mount);
      view.render({ model: Model(host, grid, texts), el: mount });
      host.setAttribute("data-ready", "1");  // the live view is there: the printed page keeps the picture
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
