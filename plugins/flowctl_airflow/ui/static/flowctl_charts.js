// flowctl metrics page: formatting and the inline SVG charts' drawing helpers.
// Loaded before flowctl.js (index.html), which takes them from window.flowctlCharts;
// they know nothing of the API, only of numbers, times and SVG.
"use strict";

(function () {
  const SVG_NS = "http://www.w3.org/2000/svg";
  const NAMED_COLOURS = { blue: "#3182ce", green: "#38a169", red: "#e53e3e", orange: "#dd6b20" };
  const PALETTE = ["#805ad5", "#d53f8c", "#319795", "#b7791f", "#4a5568", "#2c5282"];

  // ---- formatting ------------------------------------------------------------------------

  function fmt(value, digits) {
    if (value === null || value === undefined || Number.isNaN(value)) return "–";
    const d = digits === undefined ? (Math.abs(value) >= 100 || Number.isInteger(value) ? 0 : 2) : digits;
    return Number(value).toFixed(d);
  }

  // One time format on the page, as Airflow shows times: 24-hour, UTC (Airflow's default
  // time zone); the status line says "UTC".
  function clock(ms) {
    return new Date(ms).toISOString().slice(11, 19);
  }

  function stamp(ms) {
    return new Date(ms).toISOString().slice(0, 19).replace("T", " ");
  }

  // Topology ids run to ~60 characters: pipeline, colour, then a start time (a stream
  // DAG run's id and try: "wordcount-blue-manual-2026-11-26t04-34-58-123456-00-00-1"; a
  // replacement's green: "wordcount-green-p4-20261126T043458123456"). Shown as what tells
  // them apart, "wordcount-blue 04:34:58" ("… try 2" after a retry), with the full id on
  // hover (a title).
  const RUN_ID = /^(.+?)-(?:[a-z_]+-)?\d{4}-\d\d-\d\dt(\d\d)-(\d\d)-(\d\d)(?:-\d+)?(?:-\d\d-\d\d)?-(\d+)$/;
  const STAMP = /^(.+?)-\d{8}T(\d\d)(\d\d)(\d\d)\d*$/;
  const SHORT_ID = 24;
  function shortId(id) {
    const text = String(id);
    const run = text.match(RUN_ID);
    if (run) return `${run[1]} ${run[2]}:${run[3]}:${run[4]}${run[5] !== "1" ? " try " + run[5] : ""}`;
    const started = text.match(STAMP);
    if (started) return `${started[1]} ${started[2]}:${started[3]}:${started[4]}`;
    return text.length <= SHORT_ID ? text : text.slice(0, 15) + "…" + text.slice(-8);
  }

  function colourOf(name) {
    if (NAMED_COLOURS[name]) return NAMED_COLOURS[name];
    let h = 0;
    for (const ch of String(name)) h = (h * 31 + ch.charCodeAt(0)) >>> 0;
    return PALETTE[h % PALETTE.length];
  }

  function el(tag, attrs, text) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function html(tag, attrs, children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    for (const child of [].concat(children === undefined ? [] : children)) {
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  // ---- charts ----------------------------------------------------------------------------

  function niceTicks(lo, hi, count) {
    if (!(hi > lo)) return [lo];
    const raw = (hi - lo) / count;
    const power = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw) || raw;
    const ticks = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push(v);
    return ticks;
  }

  // A frame: SVG with margins, a time x scale shared by every chart, a linear y scale.
  function frame(container, domain, yMax, yLabel) {
    const width = Math.max(container.clientWidth || 800, 320);
    const height = Math.max(container.clientHeight || 200, 120);
    const m = { left: 56, right: 16, top: 24, bottom: 22 };
    const svg = el("svg", { viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: "none" });
    const top = yMax > 0 ? yMax * 1.1 : 1;
    const x = (t) => m.left + ((t - domain[0]) / Math.max(domain[1] - domain[0], 1)) * (width - m.left - m.right);
    const y = (v) => height - m.bottom - (v / top) * (height - m.top - m.bottom);
    for (const v of niceTicks(0, top, 4)) {
      svg.append(el("line", { class: "grid", x1: m.left, x2: width - m.right, y1: y(v), y2: y(v) }));
      svg.append(el("text", { x: m.left - 6, y: y(v) + 4, "text-anchor": "end" }, fmt(v)));
    }
    const span = domain[1] - domain[0];
    const stepMs = niceTicks(0, span, 6)[1] || span || 1000;
    for (let t = Math.ceil(domain[0] / stepMs) * stepMs; t <= domain[1]; t += stepMs) {
      svg.append(el("text", { x: x(t), y: height - 6, "text-anchor": "middle" }, clock(t)));
    }
    svg.append(el("line", { class: "axis", x1: m.left, x2: width - m.right, y1: y(0), y2: y(0) }));
    if (yLabel) svg.append(el("text", { x: 4, y: 12 }, yLabel));
    container.replaceChildren(svg);
    return { svg, x, y, width, height, m };
  }

  function empty(container, text) {
    container.replaceChildren(html("div", { class: "empty" }, text));
  }

  function polyline(f, points, colour, attrs) {
    const pts = points.filter((p) => p[1] !== null && p[1] !== undefined);
    if (!pts.length) return;
    f.svg.append(
      el("polyline", {
        points: pts.map((p) => `${f.x(p[0]).toFixed(1)},${f.y(p[1]).toFixed(1)}`).join(" "),
        fill: "none",
        stroke: colour,
        "stroke-width": 2,
        ...(attrs || {}),
      }),
    );
    for (const p of pts) {
      const dot = el("circle", { cx: f.x(p[0]), cy: f.y(p[1]), r: 2.5, fill: colour });
      dot.append(el("title", {}, `${clock(p[0])}: ${fmt(p[1])}${p[2] ? " · " + p[2] : ""}`));
      f.svg.append(dot);
    }
  }

  // items: [label, colour, dashed, title on hover].
  function legend(f, items) {
    const g = el("g", { class: "legend" });
    let x = f.m.left + 8;
    for (const [label, colour, dashed, title] of items) {
      g.append(el("line", { x1: x, x2: x + 16, y1: 8, y2: 8, stroke: colour, "stroke-width": 2, ...(dashed ? { "stroke-dasharray": "6 4" } : {}) }));
      const text = el("text", { x: x + 20, y: 12 }, label);
      if (title) text.append(el("title", {}, title));
      g.append(text);
      x += 28 + label.length * 6.5;
    }
    f.svg.append(g);
  }

  // Two windows of a topology are one stretch of line when the second starts within a
  // window's length of the first one's end; a longer silence (an idle or stopped
  // topology) and a window without the value (no latency sample) leave a gap.
  function contiguous(prev, next) {
    const prevEnd = Date.parse(prev.window_end);
    const length = prevEnd - Date.parse(prev.window_start);
    return Date.parse(next.window_start) - prevEnd <= Math.max(1000, length);
  }

  function stretches(rows, key, label) {
    const out = [];
    let current = [];
    let prev = null;
    for (const w of rows) {
      const v = w[key];
      const missing = v === null || v === undefined;
      if ((missing || (prev && !contiguous(prev, w))) && current.length) {
        out.push(current);
        current = [];
      }
      if (!missing) current.push([Date.parse(w.window_end), v, label]);
      prev = w;
    }
    if (current.length) out.push(current);
    return out;
  }

  // One topology's series of ``key``: a polyline per stretch, gaps left empty.
  function series(f, rows, key, colour, label, attrs) {
    for (const points of stretches(rows, key, label)) polyline(f, points, colour, attrs);
  }

  function byTopology(windows) {
    const groups = new Map();
    for (const w of windows) {
      if (!groups.has(w.topology_id)) groups.set(w.topology_id, { colour: w.colour, rows: [] });
      groups.get(w.topology_id).rows.push(w);
    }
    return groups;
  }

  function timeDomain(windows, topologies) {
    const times = windows.map((w) => Date.parse(w.window_end));
    const starts = windows.map((w) => Date.parse(w.window_start));
    let lo = starts.length ? Math.min(...starts) : null;
    let hi = times.length ? Math.max(...times) : null;
    if (lo === null) {
      const bandStarts = topologies.topologies.map((t) => Date.parse(t.started_at));
      lo = bandStarts.length ? Math.min(...bandStarts) : Date.parse(topologies.now) - 60000;
      hi = Date.parse(topologies.now);
    }
    // Up to now, not to the last window: a topology that stopped reporting shows a gap.
    hi = Math.max(hi, Date.parse(topologies.now));
    return [lo, Math.max(hi, lo + 1000)];
  }

  window.flowctlCharts = {
    fmt,
    clock,
    stamp,
    shortId,
    colourOf,
    el,
    html,
    niceTicks,
    frame,
    empty,
    polyline,
    legend,
    contiguous,
    stretches,
    series,
    byTopology,
    timeDomain,
  };
})();
