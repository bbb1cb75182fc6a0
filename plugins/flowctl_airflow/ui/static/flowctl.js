// flowctl metrics page: fetches the JSON API every few seconds and fills the page: the
// cards and tables here, the charts through flowctl_charts.js (Chart.js, vendored in
// static/vendor/). No external code at run time: the machines running Airflow may have no
// internet, and a page inside Airflow's iframe must not pull scripts from elsewhere.
// Every URL is relative: the app is mounted under the api-server's base path.
"use strict";

(function () {
  const REFRESH_MS = 5000;
  const { fmt, clock, stamp, shortId, html, outcomeText, handoverText } = window.flowctlFormat;
  const charts = window.flowctlChartKit;
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

  // Why a topology failed, in words (records lost, a read error): below the timeline.
  function drawCauses(topologies) {
    const failed = topologies.topologies.filter((b) => b.cause);
    $("timeline-causes").replaceChildren(...failed.map((b) => html("li", {}, `gen ${b.generation} ${b.topology_id} ${b.state}: ${b.cause}`)));
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
      ? `no metrics window for ${Math.round(now.stale_s)} s: the health now is unknown; the last window said ${now.health || "HEALTHY"}${now.health_cause ? ": " + now.health_cause : ""}`
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
    charts.clear();
    for (const id of ["timeline-causes", "lanes", "replacements", "cards"]) $(id).replaceChildren();
  }

  function render(metrics, topologies, replacements) {
    showRule(metrics);
    drawCards(metrics, topologies);
    charts.draw(metrics, topologies, replacements);
    drawCauses(topologies);
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
