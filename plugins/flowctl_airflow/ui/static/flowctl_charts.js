// flowctl metrics page: the charts, drawn with Chart.js (vendor/chart.umd.min.js, checked
// in by scripts/vendor-chartjs: the machines running Airflow may have no internet).
// draw() builds each chart's data from the API's answers, creates the chart once and
// updates it in place on every refresh (a legend entry clicked away stays hidden); a chart
// with nothing to show is destroyed and says why.
// The live charts are window.flowctlCharts (name -> Chart): tests read their data there.
"use strict";

(function () {
  const { fmt, clock, shortId, html, topologyColours, hsl } = window.flowctlFormat;
  const live = {};
  window.flowctlCharts = live;
  // The page's font in the charts too.
  Chart.defaults.font.family = getComputedStyle(document.body).fontFamily;

  // name -> [the id of its box on the page, its builder]; the timeline is added by
  // flowctl_timeline.js.
  const CHARTS = {};

  // ---- shared pieces ---------------------------------------------------------------------

  // The page's CSS colours (light or dark), read at each draw.
  function theme() {
    const css = getComputedStyle(document.documentElement);
    const v = (name) => css.getPropertyValue(name).trim();
    return { fg: v("--fg"), muted: v("--muted"), grid: v("--grid"), panel: v("--panel"), bad: v("--bad"), warn: v("--warn"), ok: v("--ok") };
  }

  // Time ticks on whole seconds, minutes or hours of UTC, about eight per axis.
  const STEPS_S = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
  function timeTicks(lo, hi) {
    const step = 1000 * (STEPS_S.find((s) => s * 8000 >= hi - lo) || STEPS_S[STEPS_S.length - 1]);
    const ticks = [];
    for (let t = Math.ceil(lo / step) * step; t <= hi; t += step) ticks.push({ value: t });
    return ticks;
  }

  // A logarithmic axis's bounds and ticks: on 1, 2 and 5 × 10^n, or only on 10^n when the
  // values span more than three decades.
  function logSteps(lo, hi) {
    return hi / lo > 1000 ? [1] : [1, 2, 5];
  }

  function logBounds(lo, hi) {
    const steps = logSteps(lo, hi);
    const nice = (v) => steps.flatMap((k) => [-1, 0, 1].map((e) => k * Math.pow(10, Math.floor(Math.log10(v)) + e)));
    return [Math.max(...nice(lo).filter((v) => v <= lo)), Math.min(...nice(hi).filter((v) => v >= hi))];
  }

  function logTicks(lo, hi) {
    const ticks = [];
    for (let d = Math.pow(10, Math.floor(Math.log10(lo))); d <= hi; d *= 10) {
      for (const k of logSteps(lo, hi)) if (k * d >= lo * 0.9999 && k * d <= hi * 1.0001) ticks.push({ value: k * d });
    }
    return ticks;
  }

  // Every chart's x axis: epoch ms from the oldest window to now, labelled like clock().
  function timeAxis(domain, t) {
    return {
      type: "linear",
      min: domain[0],
      max: domain[1],
      offset: false,
      grid: { color: t.grid },
      afterBuildTicks: (scale) => { scale.ticks = timeTicks(scale.min, scale.max); },
      ticks: { color: t.muted, maxRotation: 0, autoSkipPadding: 16, callback: (v) => clock(v) },
    };
  }

  function valueAxis(t, title, extra) {
    return {
      beginAtZero: true,
      grace: "8%",
      grid: { color: t.grid },
      title: { display: true, text: title, color: t.muted },
      ticks: { color: t.muted, callback: (v) => fmt(v) },
      ...extra,
    };
  }

  // Lines show as a line in the legend (dashed when dashed), bars as a box.
  function legendLabels(chart) {
    return Chart.defaults.plugins.legend.labels.generateLabels(chart).map((item) => {
      const ds = chart.data.datasets[item.datasetIndex];
      if ((ds.type || chart.config.type) === "bar") {
        const colour = ds.legendColour || item.fillStyle;
        return { ...item, fillStyle: colour, strokeStyle: colour, pointStyle: "rect" };
      }
      return { ...item, strokeStyle: ds.borderColor, lineWidth: ds.borderWidth, lineDash: ds.borderDash || [], pointStyle: "line" };
    });
  }

  // ``label`` writes a tooltip's lines for one item; ``title`` its heading (default: the
  // point's time).
  function options(t, domain, y, label, title) {
    return {
      animation: false,
      responsive: true,
      maintainAspectRatio: false,
      interaction: { mode: "nearest", axis: "xy", intersect: false },
      plugins: {
        legend: {
          align: "start",
          labels: { color: t.fg, usePointStyle: true, pointStyleWidth: 22, boxHeight: 8, generateLabels: legendLabels, sort: (a, b) => a.datasetIndex - b.datasetIndex },
        },
        tooltip: { callbacks: { title: title || ((items) => (items.length ? clock(items[0].parsed.x) + " UTC" : "")), label } },
      },
      scales: { x: timeAxis(domain, t), y },
    };
  }

  function line(label, data, colour, extra) {
    return {
      type: "line",
      label,
      data,
      borderColor: colour,
      backgroundColor: colour,
      borderWidth: 2,
      pointRadius: 2.5,
      pointHoverRadius: 4,
      spanGaps: false,
      ...extra,
    };
  }

  function byTopology(windows) {
    const groups = new Map();
    for (const w of windows) {
      if (!groups.has(w.topology_id)) groups.set(w.topology_id, { colour: w.colour, rows: [] });
      groups.get(w.topology_id).rows.push(w);
    }
    return groups;
  }

  // Two windows of a topology are one stretch of line when the second starts within a
  // window's length of the first one's end; a longer silence (an idle or stopped
  // topology) and a window without the value (no latency sample) leave a gap.
  function contiguous(prev, next) {
    const prevEnd = Date.parse(prev.window_end);
    const length = prevEnd - Date.parse(prev.window_start);
    return Date.parse(next.window_start) - prevEnd <= Math.max(1000, length);
  }

  // One topology's points of ``key`` at each window's end; a null point breaks the line
  // (one marked ``gap`` between two stretches). ``floor`` lifts values a logarithmic axis
  // cannot show (the tooltip says the value, v).
  function series(rows, key, floor) {
    const points = [];
    let prev = null;
    for (const w of rows) {
      if (prev && !contiguous(prev, w)) points.push({ x: Date.parse(w.window_start), y: null, gap: true });
      const v = w[key] === undefined ? null : w[key];
      points.push({ x: Date.parse(w.window_end), y: v === null || floor === undefined ? v : Math.max(v, floor), v });
      prev = w;
    }
    return points;
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

  // ---- the charts: each returns a Chart.js config, or why there is nothing to draw -------

  function throughput({ metrics, colourOf, domain, t }) {
    if (!metrics.windows.length) return "no metrics windows yet";
    const datasets = [];
    for (const [id, g] of byTopology(metrics.windows)) {
      datasets.push(line(shortId(id), series(g.rows, "records_per_s"), hsl(colourOf(id, g.colour)), { topology: id }));
    }
    const label = (item) => `${item.dataset.topology}: ${fmt(item.parsed.y)} records/s`;
    return { type: "line", data: { datasets }, options: options(t, domain, valueAxis(t, "records/s"), label) };
  }

  // Logarithmic: a backlog's first windows (tens of seconds of waiting in Kafka) and the
  // steady state after it (tens of ms) both stay readable. Below 1 ms is drawn at 1 ms.
  function latency({ metrics, colourOf, domain, t }) {
    if (!metrics.windows.some((w) => w.latency_p50_ms !== null || w.latency_p99_ms !== null)) return "no latency samples yet";
    const datasets = [];
    for (const [id, g] of byTopology(metrics.windows)) {
      const colour = hsl(colourOf(id, g.colour));
      datasets.push(line(`${shortId(id)} p50`, series(g.rows, "latency_p50_ms", 1), colour, { topology: id, stat: "p50" }));
      datasets.push(line(`${shortId(id)} p99`, series(g.rows, "latency_p99_ms", 1), colour, { topology: id, stat: "p99", borderDash: [6, 4] }));
    }
    const values = datasets.flatMap((d) => d.data.map((p) => p.y)).filter((v) => v !== null);
    const [min, max] = logBounds(Math.min(...values), Math.max(...values) * 1.05);
    const y = {
      type: "logarithmic",
      min,
      max,
      afterBuildTicks: (scale) => { scale.ticks = logTicks(scale.min, scale.max); },
      grid: { color: t.grid },
      title: { display: true, text: "ms (log scale)", color: t.muted },
      ticks: { color: t.muted, callback: (v) => (v >= 1000 ? fmt(v / 1000) + "k" : fmt(v)) },
    };
    const label = (item) => `${item.dataset.topology} ${item.dataset.stat}: ${fmt(item.raw.v)} ms`;
    return { type: "line", data: { datasets }, options: options(t, domain, y, label) };
  }

  const SIGNAL_WORDS = { up: "the rule says scale up", down: "the rule says scale down", none: "no signal" };

  // failNum per window as a bar over the window (red: the rule says up, green: down), and
  // each topology's E(M) dashed in its colour.
  function failures({ metrics, colourOf, domain, t }) {
    if (!metrics.windows.length) return "no metrics windows yet";
    const signalColour = { up: t.bad, down: t.ok };
    const bars = {
      type: "bar",
      label: "failNum (red: rule says up, green: down)",
      legendColour: "#a0aec0",
      data: metrics.windows.map((w) => ({ x: (Date.parse(w.window_start) + Date.parse(w.window_end)) / 2, y: w.fail_num, w })),
      backgroundColor: (c) => (c.raw ? signalColour[c.raw.w.signal] || "#a0aec0" : "#a0aec0"),
      categoryPercentage: 1,
      barPercentage: 0.94,
      grouped: false,
      order: 2,
    };
    const datasets = [bars];
    for (const [id, g] of byTopology(metrics.windows)) {
      const colour = hsl(colourOf(id, g.colour));
      datasets.push(line(`E(M) ${shortId(id)}`, series(g.rows, "mean"), colour, { topology: id, borderDash: [4, 3], order: 1 }));
    }
    const label = (item) => {
      if (item.dataset.type === "line") return `${item.dataset.topology}: E(M) = ${fmt(item.parsed.y)}`;
      const w = item.raw.w;
      return [
        w.topology_id,
        `failNum ${w.fail_num} (failed ${w.failed}, timed out ${w.timed_out})`,
        `E(M) ${fmt(w.mean)}, S^2 ${fmt(w.s2)} (C ${fmt(metrics.threshold_c)}): ${SIGNAL_WORDS[w.signal] || w.signal}`,
      ];
    };
    // A bar's heading is its window, a point's its time.
    const title = ([item]) => {
      if (!item) return "";
      if (item.dataset.type === "line") return clock(item.parsed.x) + " UTC";
      return `window ${clock(Date.parse(item.raw.w.window_start))} – ${clock(Date.parse(item.raw.w.window_end))} UTC`;
    };
    const y = valueAxis(t, "tuples", { ticks: { color: t.muted, precision: 0 } });
    return { type: "bar", data: { datasets }, options: options(t, domain, y, label, title) };
  }

  // S^2 per topology against the rule's threshold C.
  function dispersion({ metrics, colourOf, domain, t }) {
    if (!metrics.windows.length) return "";
    const c = metrics.threshold_c;
    const datasets = [];
    for (const [id, g] of byTopology(metrics.windows)) {
      datasets.push(line(`S^2 ${shortId(id)}`, series(g.rows, "s2"), hsl(colourOf(id, g.colour)), { topology: id }));
    }
    datasets.push(line(`C = ${fmt(c)}`, [{ x: domain[0], y: c }, { x: domain[1], y: c }], t.bad, { borderDash: [6, 4], borderWidth: 1.5, pointRadius: 0, pointHitRadius: 0 }));
    const label = (item) => (item.dataset.topology ? `${item.dataset.topology}: S^2 = ${fmt(item.parsed.y)}` : `C = ${fmt(c)}`);
    const y = valueAxis(t, `S^2 (A = ${metrics.history})`, { suggestedMax: c });
    return { type: "line", data: { datasets }, options: options(t, domain, y, label) };
  }

  // Backlog per topology (left axis) and its backpressure level, dotted (right axis).
  function backlog({ metrics, colourOf, domain, t }) {
    if (!metrics.windows.length) return "no metrics windows yet";
    const datasets = [];
    for (const [id, g] of byTopology(metrics.windows)) {
      const colour = hsl(colourOf(id, g.colour));
      datasets.push(line(`backlog ${shortId(id)}`, series(g.rows, "backlog"), colour, { topology: id, stat: "backlog" }));
      datasets.push(line(`backpressure ${shortId(id)}`, series(g.rows, "backpressure_level"), colour, { topology: id, stat: "backpressure level", borderDash: [2, 3], yAxisID: "y1" }));
    }
    const label = (item) => `${item.dataset.topology} ${item.dataset.stat}: ${fmt(item.parsed.y)}`;
    const opts = options(t, domain, valueAxis(t, "records"), label);
    opts.scales.y1 = valueAxis(t, "backpressure level", { position: "right", suggestedMax: 1, grid: { drawOnChartArea: false } });
    return { type: "line", data: { datasets }, options: opts };
  }

  // ---- drawing ---------------------------------------------------------------------------

  // Creates the chart, or updates it in place: datasets are matched by label and
  // topology, so Chart.js keeps their state (a legend entry clicked away stays hidden).
  function show(name, config) {
    const box = document.getElementById(CHARTS[name][0]);
    let chart = live[name];
    if (chart && (typeof config === "string" || !box.contains(chart.canvas))) {
      chart.destroy();
      delete live[name];
      chart = null;
    }
    if (typeof config === "string") {
      box.replaceChildren(html("div", { class: "empty" }, config));
      return;
    }
    // A chart whose height follows its rows (the timeline) sets it on its box.
    if (config.height) box.style.height = config.height + "px";
    if (!chart) {
      const canvas = html("canvas", { role: "img", "aria-label": name + " chart" });
      box.replaceChildren(canvas);
      live[name] = new Chart(canvas, config);
      return;
    }
    const key = (d) => `${d.label}\n${d.topology || ""}`;
    const old = new Map(chart.data.datasets.map((d) => [key(d), d]));
    chart.data.labels = config.data.labels;
    chart.data.datasets = config.data.datasets.map((d) => {
      const kept = old.get(key(d));
      if (!kept) return d;
      for (const prop of Object.keys(kept)) if (!(prop in d)) delete kept[prop];
      return Object.assign(kept, d);
    });
    chart.options = config.options;
    chart.update("none");
  }

  function draw(metrics, topologies, replacements) {
    const ctx = {
      metrics,
      topologies,
      replacements,
      colourOf: topologyColours(topologies.topologies, matchMedia("(prefers-color-scheme: dark)").matches),
      domain: timeDomain(metrics.windows, topologies),
      t: theme(),
    };
    for (const [name, [, build]] of Object.entries(CHARTS)) show(name, build(ctx));
  }

  // Destroys every chart and empties its box (no pipeline to show).
  function clear() {
    for (const [name, [id]] of Object.entries(CHARTS)) {
      if (live[name]) live[name].destroy();
      delete live[name];
      document.getElementById(id).replaceChildren();
    }
  }

  function add(name, boxId, build) {
    CHARTS[name] = [boxId, build];
  }

  add("throughput", "chart-throughput", throughput);
  add("latency", "chart-latency", latency);
  add("failures", "chart-failures", failures);
  add("dispersion", "chart-dispersion", dispersion);
  add("backlog", "chart-backlog", backlog);

  window.flowctlChartKit = { draw, clear, add, timeAxis };
})();
