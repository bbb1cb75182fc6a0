// flowctl metrics page: how numbers, times, ids, replacements and topologies are written
// and coloured. Loaded first (index.html): the charts (flowctl_charts.js) and the page
// (flowctl.js) take these from window.flowctlFormat, so a topology reads and looks the
// same in a chart, a card and a table.
"use strict";

(function () {
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
  // hover (a title, a tooltip).
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

  function html(tag, attrs, children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    for (const child of [].concat(children === undefined ? [] : children)) {
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  // ---- replacements ----------------------------------------------------------------------

  // The words for a replacement's outcome: "rolled back", not the column's "rolled_back".
  function outcomeText(outcome) {
    return String(outcome).replace(/_/g, " ");
  }

  // A replacement's handover row is written once an overlapped handover begins: until
  // then (green starting) a running replacement's handover is not known yet; a
  // sequential one has begun once blue was deactivated.
  function handoverText(r) {
    const h = r.handover;
    if (!h && r.outcome === "running") return r.deactivated_at ? "sequential (in progress)" : "not begun yet";
    // Rolled back before blue was deactivated: there was no handover at all.
    if (!h && r.outcome !== "ok" && !r.deactivated_at) return "none (rolled back before the handover)";
    if (!h) return "sequential";
    if (h.overlap_s !== null) return `overlap ${fmt(h.overlap_s)} s`;
    return h.frontier_at ? "overlap (in progress)" : "overlap (frontier pending)";
  }

  // ---- colours ---------------------------------------------------------------------------

  // Hue and saturation of each colour family; a topology of another colour gets a hue from
  // its name.
  const FAMILIES = { blue: [210, 62], green: [145, 48], red: [0, 70], orange: [25, 70] };
  // Lightness of the 1st, 2nd, 3rd... topology of a family: neighbours differ most. On a
  // dark page the same shades mirrored (100 - l): the darkest would not show.
  const SHADES = [46, 30, 62, 38, 54];

  function family(name) {
    if (FAMILIES[name]) return FAMILIES[name];
    let h = 0;
    for (const ch of String(name)) h = (h * 31 + ch.charCodeAt(0)) >>> 0;
    return [h % 360, 45];
  }

  // A colour per topology, as [hue, saturation, lightness]: its colour's family, in the
  // shade of its rank among the pipeline's topologies of that colour (oldest first). Two
  // blues of one rescale chain (blue → green → blue) never share a shade, and a topology
  // keeps its shade across refreshes: the API lists every topology of the pipeline,
  // oldest first. Returns colourOf(topology id, colour name).
  function topologyColours(topologies, dark) {
    const shade = (rank) => (dark ? 100 - SHADES[rank % SHADES.length] : SHADES[rank % SHADES.length]);
    const seen = {};
    const colours = new Map();
    for (const t of topologies) {
      const rank = seen[t.colour] || 0;
      seen[t.colour] = rank + 1;
      colours.set(t.topology_id, [...family(t.colour), shade(rank)]);
    }
    return (id, colour) => colours.get(id) || [...family(colour), shade(0)];
  }

  function hsl([h, s, l], alpha) {
    return `hsla(${h}, ${s}%, ${l}%, ${alpha === undefined ? 1 : alpha})`;
  }

  window.flowctlFormat = {
    fmt,
    clock,
    stamp,
    shortId,
    html,
    outcomeText,
    handoverText,
    topologyColours,
    hsl,
  };
})();
