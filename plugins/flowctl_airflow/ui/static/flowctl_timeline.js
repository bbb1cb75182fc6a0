// flowctl metrics page: the parallelism timeline, a Chart.js horizontal floating-bar chart
// on the charts' time axis. One bar per topology (row = generation) from its registration
// to its final state (live ones run to now), and a row of the replacements, each a bar from
// its start to its finish; an inline plugin draws across the rows what a bar cannot: each
// replacement's start (dotted) and finish (solid), its pause (red) and its overlap (green),
// and the bars' labels, always inside the chart (beside a bar too short to hold its own).
"use strict";

(function () {
  const { fmt, clock, shortId, outcomeText, handoverText, hsl } = window.flowctlFormat;
  const { add, timeAxis } = window.flowctlChartKit;
  const REPLACEMENTS = "replacements";
  const ROW_PX = 30;

  function rgb(hex) {
    const m = /^#([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(hex);
    return m ? m.slice(1).map((h) => parseInt(h, 16)) : [255, 255, 255];
  }

  function rgba(hex, alpha) {
    return `rgba(${rgb(hex).join(", ")}, ${alpha})`;
  }

  function hslRgb([h, s, l]) {
    const a = (s / 100) * Math.min(l / 100, 1 - l / 100);
    const f = (n) => {
      const k = (n + h / 30) % 12;
      return 255 * (l / 100 - a * Math.max(-1, Math.min(k - 3, 9 - k, 1)));
    };
    return [f(0), f(8), f(4)];
  }

  // White or dark text, whichever reads on a band of ``colour`` at ``alpha`` on the panel.
  function inkOn(colour, alpha, panel) {
    const back = rgb(panel);
    const [r, g, b] = hslRgb(colour).map((c, i) => alpha * c + (1 - alpha) * back[i]);
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255 < 0.6 ? "#ffffff" : "#1a202c";
  }

  function outcomeColour(outcome, t) {
    return outcome === "ok" ? t.muted : outcome === "running" ? t.warn : t.bad;
  }

  function bandText(b) {
    return `${b.colour} ×${b.parallelism} · ${b.state}${b.cause ? " (cause below)" : ""}`;
  }

  function replacementText(r) {
    const pause = r.pause_ms == null ? "" : ` · pause ${fmt(r.pause_ms)} ms`;
    return `${r.old_parallelism}→${r.new_parallelism} · ${handoverText(r)}${pause} · ${outcomeText(r.outcome)}`;
  }

  function endOf(r, now) {
    return r.finished_at ? Date.parse(r.finished_at) : now;
  }

  // "gen N" per topology; a generation shared by two topologies gets a suffix, since a
  // category axis merges equal labels.
  function rowNames(bands) {
    const seen = {};
    return bands.map((b) => {
      const name = `gen ${b.generation}`;
      seen[name] = (seen[name] || 0) + 1;
      return seen[name] > 1 ? `${name} (${seen[name]})` : name;
    });
  }

  function bandTooltip(b) {
    const end = b.ended_at ? clock(Date.parse(b.ended_at)) : "now";
    const lines = [`${b.colour}, parallelism ${b.parallelism}, ${b.state}`, `${clock(Date.parse(b.started_at))} – ${end} UTC`];
    return b.cause ? [...lines, `cause: ${b.cause}`] : lines;
  }

  function replacementTooltip(d) {
    const r = d.replacement;
    const lines = [d.label, `${shortId(r.old_topology_id)} → ${r.new_topology_id ? shortId(r.new_topology_id) : "–"}`];
    lines.push(`${clock(d.x[0])} – ${r.finished_at ? clock(d.x[1]) : "now"} UTC`);
    if (d.pause) lines.push(`pause ${fmt(r.pause_ms)} ms from ${clock(d.pause[0])} (no output)`);
    if (d.overlap) lines.push(`overlap ${fmt(r.handover.overlap_s)} s: both topologies admitting`);
    lines.push(`reason: ${r.reason}`);
    return r.error ? [...lines, `error: ${r.error}`] : lines;
  }

  function replacementData(r, now) {
    const h = r.handover;
    const paused = r.deactivated_at && r.pause_ms !== null ? Date.parse(r.deactivated_at) : null;
    return {
      x: [Date.parse(r.started_at), endOf(r, now)],
      y: REPLACEMENTS,
      label: replacementText(r),
      pause: paused === null ? null : [paused, paused + r.pause_ms],
      overlap: h && h.green_admitting_at && h.blue_gone_at ? [Date.parse(h.green_admitting_at), Date.parse(h.blue_gone_at)] : null,
      replacement: r,
    };
  }

  // The plugin's legend: what the marks across the rows mean.
  function legendItems(t) {
    const item = (text, fill, stroke, pointStyle, lineDash) => ({ text, fillStyle: fill, strokeStyle: stroke, pointStyle, lineDash, lineWidth: 1.5, fontColor: t.fg, datasetIndex: -1 });
    return [
      item("replacement start", "transparent", t.fg, "line", [3, 3]),
      item("finish", "transparent", t.fg, "line", []),
      item("pause (no output)", rgba(t.bad, 0.35), t.bad, "rect", []),
      item("overlap (both topologies admitting)", rgba(t.ok, 0.3), t.ok, "rect", []),
    ];
  }

  function vline(ctx, x, area, colour, dash) {
    ctx.strokeStyle = colour;
    ctx.lineWidth = 1.5;
    ctx.setLineDash(dash);
    ctx.beginPath();
    ctx.moveTo(x, area.top);
    ctx.lineTo(x, area.bottom);
    ctx.stroke();
  }

  function drawMarks(chart, t) {
    const { ctx, chartArea: area, scales } = chart;
    const ds = chart.data.datasets.find((d) => d.label === REPLACEMENTS);
    if (!ds) return;
    ctx.save();
    ctx.beginPath();
    ctx.rect(area.left, area.top, area.width, area.height);
    ctx.clip();
    for (const d of ds.data) {
      for (const [span, colour, alpha] of [[d.overlap, t.ok, 0.3], [d.pause, t.bad, 0.35]]) {
        if (!span) continue;
        const x0 = scales.x.getPixelForValue(span[0]);
        ctx.fillStyle = rgba(colour, alpha);
        ctx.fillRect(x0, area.top, Math.max(scales.x.getPixelForValue(span[1]) - x0, 2), area.height);
      }
      const colour = outcomeColour(d.replacement.outcome, t);
      vline(ctx, scales.x.getPixelForValue(d.x[0]), area, colour, [3, 3]);
      vline(ctx, scales.x.getPixelForValue(d.x[1]), area, colour, []);
    }
    ctx.restore();
  }

  // Each bar's label: inside it when it fits, else after it, else before it; never past
  // the plot's edges. In a crowded row the newest label wins (the tooltip has the rest).
  function drawLabels(chart, t) {
    const { ctx, chartArea: area } = chart;
    const family = Chart.defaults.font.family;
    const taken = new Map();
    ctx.save();
    ctx.textBaseline = "middle";
    chart.data.datasets.forEach((ds, i) => {
      const meta = chart.getDatasetMeta(i);
      for (let j = ds.data.length - 1; j >= 0; j--) {
        const d = ds.data[j];
        const { x, base, y } = meta.data[j].getProps(["x", "base", "y"], true);
        const left = Math.max(Math.min(x, base), area.left);
        const right = Math.min(Math.max(x, base), area.right);
        if (right < area.left || left > area.right) continue;
        ctx.font = `${d.ink ? "600 " : ""}12px ${family}`;
        const width = ctx.measureText(d.label).width;
        let at = left + 6;
        let align = "left";
        let ink = d.ink || t.fg;
        if (right - left < width + 12) {
          ink = t.fg;
          if (right + 6 + width <= area.right) at = right + 6;
          else [at, align] = [Math.max(left - 6, area.left + width), "right"];
        }
        const span = align === "left" ? [at, at + width] : [at - width, at];
        const row = taken.get(y) || [];
        if (row.some(([l, r]) => span[0] < r + 8 && span[1] > l - 8)) continue;
        taken.set(y, [...row, span]);
        ctx.fillStyle = ink;
        ctx.textAlign = align;
        ctx.fillText(d.label, at, y);
      }
    });
    ctx.restore();
  }

  const marks = {
    id: "flowctlTimeline",
    afterDatasetsDraw(chart, args, opts) {
      drawMarks(chart, opts.t);
      drawLabels(chart, opts.t);
    },
  };

  function timeline({ topologies, replacements, domain, colourOf, t }) {
    const bands = topologies.topologies;
    if (!bands.length) return "no topologies registered";
    const now = Date.parse(topologies.now);
    const shown = replacements.replacements.map((r) => replacementData(r, now)).filter((d) => d.x[1] >= domain[0]);
    const rows = rowNames(bands);
    const labels = shown.length ? [REPLACEMENTS, ...rows] : rows;
    const bars = bands.map((b, i) => {
      const colour = colourOf(b.topology_id, b.colour);
      const alpha = b.ended_at ? 0.55 : 0.95;
      const end = b.ended_at ? Date.parse(b.ended_at) : now;
      return { x: [Date.parse(b.started_at), end], y: rows[i], label: bandText(b), band: b, fill: hsl(colour, alpha), ink: inkOn(colour, alpha, t.panel) };
    });
    const bar = { grouped: false, categoryPercentage: 1, barPercentage: 0.75, borderRadius: 3, borderSkipped: false };
    const datasets = [{ ...bar, label: "topologies", data: bars, backgroundColor: bars.map((d) => d.fill) }];
    if (shown.length) {
      datasets.push({ ...bar, label: REPLACEMENTS, data: shown, minBarLength: 6, backgroundColor: shown.map((d) => outcomeColour(d.replacement.outcome, t)) });
    }
    const label = (item) => (item.raw.band ? bandTooltip(item.raw.band) : replacementTooltip(item.raw));
    const title = (items) => (items.length ? (items[0].raw.band ? items[0].raw.band.topology_id : `replacement ${items[0].raw.replacement.id}`) : "");
    const options = {
      animation: false,
      responsive: true,
      maintainAspectRatio: false,
      indexAxis: "y",
      interaction: { mode: "nearest", intersect: true },
      plugins: {
        flowctlTimeline: { t },
        legend: {
          display: shown.length > 0,
          align: "start",
          onClick: () => {},
          labels: { color: t.fg, usePointStyle: true, pointStyleWidth: 22, boxHeight: 8, generateLabels: () => legendItems(t) },
        },
        tooltip: { callbacks: { title, label } },
      },
      scales: {
        x: timeAxis(domain, t),
        y: { type: "category", labels, grid: { display: false }, ticks: { color: t.muted } },
      },
    };
    return { type: "bar", data: { labels, datasets }, options, plugins: [marks], height: labels.length * ROW_PX + 70 };
  }

  add("timeline", "chart-timeline", timeline);
})();
