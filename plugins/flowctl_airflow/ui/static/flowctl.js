// flowctl metrics page: fetches the JSON API every few seconds and draws inline SVG charts.
// No framework and no external code: the machines running Airflow may have no internet,
// and a page inside Airflow's iframe must not pull scripts from elsewhere.
// Every URL is relative: the app is mounted under the api-server's base path.
"use strict";

(function () {
  const REFRESH_MS = 5000;
  const {
    fmt,
    clock,
    stamp,
    shortId,
    colourOf,
    el,
    html,
    frame,
    empty,
    legend,
    series,
    byTopology,
    timeDomain,
  } = window.flowctlCharts;
  const state = { pipeline: null, timer: null, busy: false };

  const $ = (id) => document.getElementById(id);

  // ---- data ------------------------------------------------------------------------------

  async function getJSON(path) {
    const response = await fetch(path, { credentials: "same-origin", cache: "no-store" });
    if (response.status === 401 || response.status === 403) {
      throw new Error("not signed in to Airflow (HTTP " + response.status + "): reload to log in");
    }
    const body = await response.json().catch(() => ({}));
    if (!response.ok) {
      const detail = typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail);
      throw new Error(path + ": HTTP " + response.status + " " + (detail || ""));
    }
    return body;
  }

  // A and C are sent only when typed in; otherwise the server uses the pipeline's
  // [scaling] section, so the page shows what the autoscaler computes.
  function params() {
    const query = new URLSearchParams({ limit: String(parseInt($("limit").value, 10) || 120) });
    const history = parseInt($("history").value, 10);
    const threshold = parseFloat($("threshold").value);
    if (Number.isFinite(history)) query.set("history", String(history));
    if (Number.isFinite(threshold)) query.set("threshold_c", String(threshold));
    return query;
  }

  function showRule(metrics) {
    $("history").placeholder = String(metrics.history);
    $("threshold").placeholder = String(metrics.threshold_c);
    const from = { query: "as typed", config: "from the pipeline's [scaling]", default: "defaults" };
    const rule = $("rule");
    rule.textContent = from[metrics.rule_source] || metrics.rule_source;
    rule.title = metrics.rule_problem || "";
  }

  async function refresh() {
    if (state.busy) return;
    state.busy = true;
    try {
      const list = await getJSON("api/pipelines");
      fillSelector(list.pipelines);
      if (!state.pipeline) {
        setStatus("no pipelines in the flowctl database yet", false);
        clearAll();
        return;
      }
      const base = "api/pipelines/" + encodeURIComponent(state.pipeline);
      const [metrics, topologies, replacements] = await Promise.all([
        getJSON(base + "/metrics?" + params()),
        getJSON(base + "/topologies"),
        getJSON(base + "/replacements?limit=50"),
      ]);
      render(metrics, topologies, replacements);
      setStatus("updated " + clock(Date.now()) + " UTC · every " + REFRESH_MS / 1000 + " s", false);
    } catch (error) {
      setStatus(String(error.message || error), true);
    } finally {
      state.busy = false;
    }
  }

  function setStatus(text, isError) {
    const el = $("status");
    el.textContent = text;
    el.classList.toggle("error", Boolean(isError));
  }

  function fillSelector(pipelines) {
    const select = $("pipeline");
    const names = pipelines.map((p) => p.pipeline);
    const wanted = new URLSearchParams(location.hash.slice(1)).get("pipeline");
    if (!state.pipeline || !names.includes(state.pipeline)) {
      // The one named in the URL (#pipeline=...), else the running one with the newest
      // metrics window, else the first.
      const running = pipelines
        .filter((p) => p.live_topologies.length > 0)
        .sort((a, b) => String(b.last_window_end || "").localeCompare(String(a.last_window_end || "")));
      state.pipeline = names.includes(wanted) ? wanted : (running[0] || pipelines[0] || {}).pipeline || null;
    }
    const current = Array.from(select.options).map((o) => o.value);
    if (current.join("\n") !== names.join("\n")) {
      select.replaceChildren(
        ...pipelines.map((p) => {
          const option = document.createElement("option");
          option.value = p.pipeline;
          option.textContent = p.pipeline;
          return option;
        }),
      );
    }
    if (state.pipeline) select.value = state.pipeline;
  }

  function drawThroughput(metrics, domain) {
    const box = $("chart-throughput");
    if (!metrics.windows.length) return empty(box, "no metrics windows yet");
    const f = frame(box, domain, Math.max(...metrics.windows.map((w) => w.records_per_s)), "rec/s");
    const items = [];
    for (const [id, group] of byTopology(metrics.windows)) {
      series(f, group.rows, "records_per_s", colourOf(group.colour), shortId(id));
      items.push([shortId(id), colourOf(group.colour), false, id]);
    }
    legend(f, items);
  }

  function drawLatency(metrics, domain) {
    const box = $("chart-latency");
    const values = metrics.windows.flatMap((w) => [w.latency_p50_ms, w.latency_p99_ms]).filter((v) => v !== null);
    if (!values.length) return empty(box, "no latency samples yet");
    const f = frame(box, domain, Math.max(...values), "ms");
    // One series per topology in its colour, as in the throughput chart: p50 solid, p99 dashed.
    const items = [];
    for (const [id, group] of byTopology(metrics.windows)) {
      const colour = colourOf(group.colour);
      series(f, group.rows, "latency_p50_ms", colour, shortId(id) + " p50");
      series(f, group.rows, "latency_p99_ms", colour, shortId(id) + " p99", { "stroke-dasharray": "5 3" });
      items.push([shortId(id), colour, false, id]);
    }
    legend(f, [...items, ["p50", "#2d3748"], ["p99", "#2d3748", true]]);
  }

  function drawFailures(metrics, domain) {
    const box = $("chart-failures");
    const disp = $("chart-dispersion");
    if (!metrics.windows.length) {
      empty(box, "no metrics windows yet");
      return empty(disp, "");
    }
    const maxFail = Math.max(...metrics.windows.map((w) => Math.max(w.fail_num, w.mean)));
    const f = frame(box, domain, maxFail, "tuples");
    for (const w of metrics.windows) {
      const x0 = f.x(Date.parse(w.window_start));
      const x1 = f.x(Date.parse(w.window_end));
      const colour = w.signal === "up" ? "#e53e3e" : w.signal === "down" ? "#38a169" : "#a0aec0";
      const bar = el("rect", {
        x: x0 + 1, y: f.y(w.fail_num), width: Math.max(x1 - x0 - 2, 1),
        height: Math.max(f.y(0) - f.y(w.fail_num), 0), fill: colour, opacity: 0.8,
      });
      bar.append(el("title", {}, `${w.topology_id} ${clock(Date.parse(w.window_end))}: failNum=${w.fail_num} (failed ${w.failed}, timed out ${w.timed_out}), E(M)=${fmt(w.mean)}, S^2=${fmt(w.s2)}, signal ${w.signal}`));
      f.svg.append(bar);
    }
    for (const [, group] of byTopology(metrics.windows)) {
      series(f, group.rows, "mean", "#2d3748", "E(M)", { "stroke-dasharray": "4 3" });
    }
    legend(f, [["failNum (red: rule says up, green: down)", "#a0aec0"], ["E(M)", "#2d3748", true]]);

    const c = metrics.threshold_c;
    const g = frame(disp, domain, Math.max(c, ...metrics.windows.map((w) => w.s2)), "S^2");
    g.svg.append(el("line", { class: "threshold", x1: g.m.left, x2: g.width - g.m.right, y1: g.y(c), y2: g.y(c) }));
    g.svg.append(el("text", { x: g.width - g.m.right, y: g.y(c) - 4, "text-anchor": "end" }, `C = ${fmt(c)}`));
    for (const [, group] of byTopology(metrics.windows)) {
      series(g, group.rows, "s2", "#805ad5", "S^2");
    }
    legend(g, [[`S^2 over A = ${metrics.history} windows`, "#805ad5"], ["C", "#e53e3e", true]]);
  }

  function drawBacklog(metrics, domain) {
    const box = $("chart-backlog");
    if (!metrics.windows.length) return empty(box, "no metrics windows yet");
    const maxBacklog = Math.max(...metrics.windows.map((w) => w.backlog));
    const f = frame(box, domain, maxBacklog, "records");
    const maxLevel = Math.max(1, ...metrics.windows.map((w) => w.backpressure_level));
    for (const [id, group] of byTopology(metrics.windows)) {
      series(f, group.rows, "backlog", "#319795", shortId(id));
      const scaled = group.rows.map((w) => ({ ...w, level: (w.backpressure_level / maxLevel) * (maxBacklog || 1) }));
      series(f, scaled, "level", "#dd6b20", "backpressure", { "stroke-dasharray": "2 2" });
    }
    legend(f, [["backlog", "#319795"], [`backpressure level (max ${fmt(maxLevel)})`, "#dd6b20", true]]);
  }

  function drawTimeline(topologies, replacements, domain) {
    const box = $("chart-timeline");
    const bands = topologies.topologies;
    if (!bands.length) return empty(box, "no topologies registered");
    const now = Date.parse(topologies.now);
    // The same time axis as the charts above; bands that started earlier are clipped.
    const [lo, hi] = domain;
    const rowH = 26;
    box.style.height = Math.max(120, bands.length * rowH + 60) + "px";
    const f = frame(box, [lo, hi], 0, "");
    // Bands have no y scale: drop the value grid and its labels the frame drew.
    f.svg.querySelectorAll(".grid, text[text-anchor=end]").forEach((n) => n.remove());
    bands.forEach((b, i) => {
      const start = Date.parse(b.started_at);
      const end = b.ended_at ? Date.parse(b.ended_at) : now;
      const y = f.m.top + 14 + i * rowH;
      f.svg.append(el("text", { x: f.m.left - 6, y: y + rowH / 2 + 1, "text-anchor": "end" }, `gen ${b.generation}`));
      if (end < lo) return; // over before the charts' time axis starts
      const x0 = f.x(Math.max(start, lo));
      const x1 = Math.max(f.x(end), x0 + 3);
      const rect = el("rect", { x: x0, y, width: x1 - x0, height: rowH - 6, rx: 3, fill: colourOf(b.colour), opacity: b.ended_at ? 0.55 : 0.95 });
      rect.append(el("title", {}, `${b.topology_id}: ${b.colour}, parallelism ${b.parallelism}, ${b.state}, ${clock(start)} – ${b.ended_at ? clock(end) : "now"}${b.cause ? `\ncause: ${b.cause}` : ""}`));
      f.svg.append(rect);
      const text = `${b.colour} ×${b.parallelism} · ${b.state}${b.cause ? " (cause below)" : ""}`;
      // Inside the band when it fits, else just after it.
      const fits = x1 - x0 > text.length * 7 + 12;
      f.svg.append(el("text", { class: fits ? "band-label" : "", x: fits ? x0 + 6 : x1 + 6, y: y + rowH / 2 + 1 }, text));
    });
    // Why a topology failed, in words (records lost, a read error): below the chart.
    const failed = bands.filter((b) => b.cause);
    const causes = $("timeline-causes");
    causes.replaceChildren(...failed.map((b) => html("li", {}, `gen ${b.generation} ${b.topology_id} ${b.state}: ${b.cause}`)));
    for (const r of replacements.replacements) {
      const start = Math.max(Date.parse(r.started_at), lo);
      const end = r.finished_at ? Date.parse(r.finished_at) : now;
      if (end < lo) continue; // before the time axis
      const pauseStart = r.deactivated_at ? Date.parse(r.deactivated_at) : null;
      const top = f.m.top + 4;
      const bottom = f.m.top + 14 + bands.length * rowH;
      const colour = r.outcome === "ok" ? "#2d3748" : r.outcome === "running" ? "#dd6b20" : "#e53e3e";
      f.svg.append(el("line", { x1: f.x(start), x2: f.x(start), y1: top, y2: bottom, stroke: colour, "stroke-width": 1.5, "stroke-dasharray": "3 3" }));
      f.svg.append(el("line", { x1: f.x(end), x2: f.x(end), y1: top, y2: bottom, stroke: colour, "stroke-width": 1.5 }));
      if (pauseStart !== null && r.pause_ms !== null) {
        const px0 = f.x(pauseStart);
        const px1 = Math.max(f.x(pauseStart + r.pause_ms), px0 + 2);
        const pause = el("rect", { x: px0, y: top, width: px1 - px0, height: bottom - top, fill: "#e53e3e", opacity: 0.35 });
        pause.append(el("title", {}, `pause ${fmt(r.pause_ms)} ms`));
        f.svg.append(pause);
      }
      const h = r.handover;
      if (h && h.green_admitting_at && h.blue_gone_at) {
        // The overlap: green admitting beside blue until blue is gone.
        const ox0 = f.x(Math.max(Date.parse(h.green_admitting_at), lo));
        const ox1 = Math.max(f.x(Date.parse(h.blue_gone_at)), ox0 + 2);
        const overlap = el("rect", { class: "overlap", x: ox0, y: top, width: ox1 - ox0, height: bottom - top, fill: "#38a169", opacity: 0.3 });
        overlap.append(el("title", {}, `overlap ${fmt(h.overlap_s)} s: both topologies admitting`));
        f.svg.append(overlap);
      }
      const pause = r.pause_ms == null ? "" : ` · pause ${fmt(r.pause_ms)} ms`;
      const text = `${r.old_parallelism}→${r.new_parallelism} · ${handoverText(r)}${pause} · ${outcomeText(r.outcome)}`;
      // After the end line when it fits in the chart, else before it (never clipped).
      const after = f.x(end) + 4 + text.length * 7 <= f.width;
      const label = el("text", { x: after ? f.x(end) + 4 : f.x(end) - 4, y: top - 6, "text-anchor": after ? "start" : "end" }, text);
      label.append(el("title", {}, r.reason));
      f.svg.append(label);
    }
  }

  // ---- tables and cards ------------------------------------------------------------------

  function drawCards(metrics, topologies) {
    const live = topologies.topologies.filter((t) => !t.ended_at);
    // The ACTIVE topology is the one users mean: not a warm standby, not a STARTING green.
    const active = live.filter((t) => t.state === "ACTIVE");
    const current = active[active.length - 1] || live[live.length - 1] || topologies.topologies[topologies.topologies.length - 1];
    const own = current ? metrics.windows.filter((w) => w.topology_id === current.topology_id) : [];
    const last = own[own.length - 1] || metrics.windows[metrics.windows.length - 1];
    const now = (current && metrics.latest.find((t) => t.topology_id === current.topology_id)) || last;
    // A window older than two windows is not the health now (the driver stores none): STALE.
    const stale = now && now.stale_s != null;
    const health = now ? (stale ? "STALE" : now.health || "HEALTHY") : null;
    const healthNote = stale
      ? `no metrics window for ${fmt(now.stale_s)} s: the health now is unknown; the last window said ${now.health || "HEALTHY"}${now.health_cause ? ": " + now.health_cause : ""}`
      : health && health !== "HEALTHY" ? `${now.health_cause || "no cause recorded"}; the autoscaler does not scale a ${health} topology` : "";
    // The other live topologies, labelled by what they are: a warm standby (READY), a green
    // starting up (STARTING), a blue draining: beside the ACTIVE one, never instead of it.
    const others = live.filter((t) => !current || t.topology_id !== current.topology_id);
    const roles = { READY: "standby", STARTING: "starting", DRAINING: "draining", DEACTIVATED: "deactivated" };
    const beside = others.map((t) => `${roles[t.state] || t.state.toLowerCase()} ${t.colour} ×${t.parallelism}`);
    const cards = [
      ["pipeline", metrics.pipeline, ""],
      ["topology", current ? shortId(current.topology_id) : "–", "", current && shortId(current.topology_id) !== current.topology_id ? current.topology_id : ""],
      ["parallelism", current ? current.parallelism : "–", ""],
      ["state", current ? current.state : "–", current && current.state === "FAILED" ? "bad" : ""],
      ["beside it", beside.length ? beside.join(" · ") : "none", "", others.map((t) => `${t.topology_id} (${t.state})`).join(", ")],
      ["health", health || "–", health === "HALTED" ? "bad" : ["STALLED", "RECOVERING", "STALE"].includes(health) ? "warn" : "", healthNote],
      ["rebuilds", now && now.rebuilds != null ? fmt(now.rebuilds) : "0", now && now.rebuilds ? "warn" : "", "rebuilds after lost MRWQ items (each dispatches again what was not durable)"],
      ["records/s", last ? fmt(last.records_per_s) : "–", ""],
      ["latency p99 ms", last ? fmt(last.latency_p99_ms) : "–", ""],
      ["DLQ size", fmt(metrics.dlq_total), metrics.dlq_total > 0 ? "warn" : ""],
      ["backpressure level", last ? fmt(last.backpressure_level) : "–", last && last.backpressure_level > 0 ? "warn" : ""],
      ["backlog", last ? fmt(last.backlog) : "–", ""],
      ["failNum / E(M)", last ? `${last.fail_num} / ${fmt(last.mean)}` : "–", last && last.signal !== "none" ? "bad" : ""],
    ];
    $("cards").replaceChildren(
      ...cards.map(([label, value, cls, title]) =>
        html("div", { class: "card", "data-card": label }, [
          html("div", { class: "label" }, label),
          html("div", { class: "value " + cls, ...(title ? { title } : {}) }, String(value)),
          ...(label === "health" && healthNote ? [html("div", { class: "cause muted" }, healthNote)] : []),
        ]),
      ),
    );
  }

  function table(headers, rows) {
    const head = html("tr", {}, headers.map(([h, num]) => html("th", num ? { class: "num" } : {}, h)));
    const body = rows.map((cells) =>
      html("tr", {}, cells.map(([v, num]) => html("td", num ? { class: "num" } : {}, v))),
    );
    return html("table", {}, [html("thead", {}, head), html("tbody", {}, body)]);
  }

  function drawLanes(metrics, topologies) {
    const box = $("lanes");
    if (!metrics.latest.length) {
      // Just after a replacement the new ACTIVE topology may not have closed a window yet.
      const live = topologies.topologies.filter((t) => !t.ended_at);
      const text = live.length
        ? `${live.map((t) => `${shortId(t.topology_id)} (${t.state})`).join(", ")}: no metrics window closed yet; the lanes show once one is`
        : "no live topology";
      return box.replaceChildren(html("p", { class: "muted" }, text));
    }
    const parts = [];
    // The ACTIVE topology's lanes first, then a standby's or a starting green's.
    const ordered = metrics.latest.slice().sort((a, b) => (b.state === "ACTIVE") - (a.state === "ACTIVE"));
    for (const t of ordered) {
      const lanes = Array.isArray(t.lanes) ? t.lanes : [];
      parts.push(html("h3", { title: t.topology_id }, `${shortId(t.topology_id)} · ${t.colour} ×${t.parallelism} · window ending ${clock(Date.parse(t.window_end))}`));
      if (!lanes.length) {
        parts.push(html("p", { class: "muted" }, "no per-lane figures in this window"));
        continue;
      }
      const maxWindow = Math.max(1, ...lanes.map((l) => l.window || 0));
      parts.push(
        table(
          [["lane"], ["state"], ["send window", true], [""], ["in flight", true]],
          lanes.map((l) => [
            [l.lane],
            [html("span", { class: "state " + l.state }, l.state)],
            [fmt(l.window), true],
            [html("span", { class: "bar", style: `width:${(100 * (l.window || 0)) / maxWindow}px` })],
            [fmt(l.in_flight), true],
          ]),
        ),
      );
    }
    box.replaceChildren(...parts);
  }

  // The figures a scaling decision was taken on (Decision.to_dict()); none for a
  // replacement triggered by hand.
  function sensorSaw(d) {
    if (!d || !d.policy) return "– (triggered by hand)";
    const f = d.figures || {};
    const parts = [`${d.policy} policy, cause ${d.cause}`];
    parts.push(`E(M) ${fmt(d.mean)}, S² ${fmt(d.s2)} (C ${fmt(d.threshold_c)})`);
    if (f.fail_num != null) parts.push(`failed ${fmt(f.fail_num)}`);
    if (f.saturation != null) parts.push(`utilisation ${fmt(100 * f.saturation, 0)}%`);
    if (f.backlog != null) {
      const delta = f.backlog_delta == null ? "" : ` (${f.backlog_delta >= 0 ? "+" : ""}${fmt(f.backlog_delta, 0)})`;
      parts.push(`backlog ${fmt(f.backlog, 0)}${delta}`);
    }
    if (f.ds2_target != null) parts.push(`DS2 target ${fmt(f.ds2_target, 0)}`);
    return parts.join(" · ");
  }

  // A replacement's handover row is written once an overlapped handover begins: until
  // then (green starting) a running replacement's handover is not known yet; a
  // sequential one has begun once blue was deactivated.
  // The words for a replacement's outcome: "rolled back", not the column's "rolled_back".
  function outcomeText(outcome) {
    return String(outcome).replace(/_/g, " ");
  }

  function handoverText(r) {
    const h = r.handover;
    if (!h && r.outcome === "running") return r.deactivated_at ? "sequential (in progress)" : "not begun yet";
    // Rolled back before blue was deactivated: there was no handover at all.
    if (!h && r.outcome !== "ok" && !r.deactivated_at) return "none (rolled back before the handover)";
    if (!h) return "sequential";
    if (h.overlap_s !== null) return `overlap ${fmt(h.overlap_s)} s`;
    return h.frontier_at ? "overlap (in progress)" : "overlap (frontier pending)";
  }

  function drawReplacements(replacements) {
    const box = $("replacements");
    const rows = replacements.replacements.slice().reverse();
    if (!rows.length) return box.replaceChildren(html("p", { class: "muted" }, "no replacements yet"));
    box.replaceChildren(
      table(
        [["started"], ["old → new"], ["parallelism"], ["outcome"], ["handover"], ["pause ms", true], ["duplicates", true], ["took s", true], ["what the sensor saw"], ["reason / error"]],
        rows.map((r) => [
          [stamp(Date.parse(r.started_at))],
          [html("span", { title: `${r.old_topology_id} → ${r.new_topology_id || "–"}` }, `${shortId(r.old_topology_id)} → ${r.new_topology_id ? shortId(r.new_topology_id) : "–"}`)],
          [`${r.old_parallelism} → ${r.new_parallelism}`],
          [html("span", { class: "state " + r.outcome }, outcomeText(r.outcome))],
          [html("span", { title: r.handover ? `frontier ${r.handover.frontier_at || "–"}, green admitting ${r.handover.green_admitting_at || "–"}, blue gone ${r.handover.blue_gone_at || "–"}` : r.outcome === "running" ? "green is starting; the handover follows once it is ready" : r.deactivated_at ? "blue drained, then green activated" : "blue was never deactivated" }, handoverText(r))],
          [r.pause_ms == null && r.outcome === "running" ? "pending" : fmt(r.pause_ms), true],
          [fmt(r.duplicates), true],
          [fmt(r.duration_s), true],
          [sensorSaw(r.decision)],
          [r.error ? `${r.reason} — ${r.error}` : r.reason],
        ]),
      ),
    );
  }

  function clearAll() {
    for (const id of ["chart-throughput", "chart-latency", "chart-failures", "chart-dispersion", "chart-timeline", "chart-backlog", "lanes", "replacements", "cards"]) {
      $(id).replaceChildren();
    }
  }

  function render(metrics, topologies, replacements) {
    const domain = timeDomain(metrics.windows, topologies);
    showRule(metrics);
    drawCards(metrics, topologies);
    drawThroughput(metrics, domain);
    drawLatency(metrics, domain);
    drawFailures(metrics, domain);
    drawTimeline(topologies, replacements, domain);
    drawBacklog(metrics, domain);
    drawLanes(metrics, topologies);
    drawReplacements(replacements);
    document.body.dataset.rendered = metrics.pipeline;
  }

  // ---- wiring ----------------------------------------------------------------------------

  function start() {
    $("pipeline").addEventListener("change", (event) => {
      state.pipeline = event.target.value;
      location.hash = "pipeline=" + encodeURIComponent(state.pipeline);
      refresh();
    });
    for (const id of ["history", "threshold", "limit"]) $(id).addEventListener("change", refresh);
    refresh();
    state.timer = setInterval(refresh, REFRESH_MS);
  }

  document.addEventListener("DOMContentLoaded", start);
})();
