"""The metrics page in a real ``airflow standalone``, rendered by headless Chromium.

Airflow runs on free ports with a temporary home (AirflowService, the same
path as ``flowctl airflow up``); its ``flowctl_db`` connection points at the
home's SQLite database, into which known rows are written first. The API must
refuse a call without a token and answer one with a token from Airflow's
``/auth/token``; the browser, given the UI's session cookie, must render the
pipeline's figures, and its Chart.js charts must hold the seeded series (read
from ``window.flowctlCharts``). The screenshots are left in ``tests/artifacts/``.
"""

from __future__ import annotations

import dataclasses
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flowctl.config import Settings
from flowctl.services.airflow import ADMIN_USER, AirflowService, admin_password
from flowctl.services.ports import free_port
from tests.ui import seed as data
from tests.ui.browser import chromium

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.airflow]

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    home = tmp_path_factory.mktemp("ui_home")
    settings = dataclasses.replace(
        Settings(home=home),
        airflow_port=free_port(),
        kafka_port=free_port(),
        memcached_port=free_port(),
    )
    service = AirflowService()
    try:
        service.up(settings)
        # Seeded once Airflow is up, 30 s windows ending now: the ACTIVE topology's last
        # window stays current (younger than two windows) while the module's tests run.
        data.seed(settings.resolved_database_url, window_s=30.0, ago_s=0.0)
        yield settings
    finally:
        service.down(settings)


def base_url(settings: Settings) -> str:
    return f"http://{settings.host}:{settings.airflow_port}"


def request(
    url: str, *, token: str | None = None, body: dict[str, Any] | None = None
) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    payload = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=payload, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


@pytest.fixture(scope="module")
def token(airflow: Settings) -> str:
    password = admin_password(airflow)
    assert password, "Airflow wrote no generated admin password"
    status, body = request(
        f"{base_url(airflow)}/auth/token", body={"username": ADMIN_USER, "password": password}
    )
    assert status == 201, body
    return str(body["access_token"])


def test_the_api_refuses_without_a_token_and_answers_with_one(
    airflow: Settings, token: str
) -> None:
    url = f"{base_url(airflow)}/flowctl/api/pipelines"
    status, body = request(url)
    assert (status, body) == (401, {"detail": "Not authenticated"})

    status, body = request(url, token=token)
    assert status == 200
    wordcount = next(p for p in body["pipelines"] if p["pipeline"] == data.PIPELINE)
    assert (wordcount["current_topology"], wordcount["parallelism"]) == (data.GREEN, 4)

    status, body = request(f"{url}/{data.PIPELINE}/replacements", token=token)
    assert status == 200
    assert [e["pause_ms"] for e in body["replacements"]] == [data.PAUSE_MS]

    status, body = request(f"{url}/{data.PIPELINE}/metrics?limit=0", token=token)
    assert status == 422
    assert body["detail"] == "limit='0': Input should be greater than or equal to 1"


def test_the_page_is_in_the_airflow_navigation(airflow: Settings, token: str) -> None:
    status, body = request(f"{base_url(airflow)}/api/v2/plugins", token=token)
    assert status == 200
    [plugin] = [p for p in body["plugins"] if p["name"] == "flowctl"]
    assert plugin["fastapi_apps"][0]["url_prefix"] == "/flowctl"
    [view] = plugin["external_views"]
    assert (view["href"], view["destination"], view["url_route"]) == (
        "flowctl/",
        "nav",
        "flowctl-metrics",
    )


def test_the_page_renders_the_pipeline_in_chromium(airflow: Settings, token: str) -> None:
    base = base_url(airflow)
    with chromium(width=1400, height=2400) as browser:
        browser.add_cookies([{"name": "_token", "value": token, "url": base, "httpOnly": True}])
        page = browser.new_page()
        page.goto(f"{base}/flowctl/#pipeline={data.PIPELINE}")
        rendered = page.wait_for_function(
            "document.body && document.body.dataset.rendered", timeout=30_000
        ).json_value()
        dom = page.content()
        charts = charts_of(page)
        page.screenshot(path=ARTIFACTS / "metrics_page.png", full_page=True)
        # The next refresh (every 5 s) updates the same charts in place.
        page.evaluate("window.flowctlCharts.throughput.$seen = true")
        status = page.inner_text("#status")
        page.wait_for_function(
            f"document.getElementById('status').textContent !== {json.dumps(status)}"
        )
        kept = page.evaluate(
            "[window.flowctlCharts.throughput.$seen, document.querySelectorAll('.chart canvas')"
            ".length, Object.keys(window.flowctlCharts).length]"
        )
    assert kept == [True, 6, 6]
    assert rendered == data.PIPELINE
    check_the_charts(charts, metrics_of(airflow, token))
    assert page_text_has(dom, f'<option value="{data.PIPELINE}">{data.PIPELINE}</option>')
    cards = {card: value for card, value in cards_of(dom)}
    assert cards["records/s"] == "4322"  # 4321.5 shown without decimals (>= 100)
    assert cards["DLQ size"] == str(data.DLQ_TOTAL)
    assert cards["parallelism"] == "4"
    assert cards["topology"] == data.GREEN
    assert cards["health"] == "HEALTHY"
    assert cards["rebuilds"] == "1"
    assert f"{data.BLUE} → {data.GREEN}" in dom  # the replacement row
    assert ">321<" in dom  # its pause in ms
    assert ">overlap 1.90 s<" in dom  # how it handed over: both topologies admitting
    # what the sensor saw when it decided: the dispersion, utilisation and backlog
    assert "adaptive policy, cause load · E(M) 2, S² 5 (C 4)" in dom
    assert "utilisation 93% · backlog 12000 (+3000)" in dom
    assert dom.count('class="state BUSY"') == 1  # one busy lane in the latest window
    assert (ARTIFACTS / "metrics_page.png").stat().st_size > 10_000


def metrics_of(airflow: Settings, token: str) -> dict[str, Any]:
    url = f"{base_url(airflow)}/flowctl/api/pipelines/{data.PIPELINE}/metrics"
    status, body = request(url, token=token)
    assert status == 200, body
    return dict(body)


def check_the_charts(charts: dict[str, Any], metrics: dict[str, Any]) -> None:
    """The seeded series (tests/ui/seed.py), chart by chart, as Chart.js holds them."""
    assert set(charts) == {"throughput", "latency", "failures", "dispersion", "timeline", "backlog"}
    blue, green = data.BLUE, data.GREEN

    throughput = series(charts["throughput"])
    assert throughput[blue, None] == [1000.0, 1001.0, 1002.0, 1003.0]
    assert throughput[green, None] == [3000.0, data.RECORDS_PER_S]
    colours = {d["topology"]: d["colour"] for d in charts["throughput"]["datasets"]}
    assert colours[blue] != colours[green]

    # p50 and p99 per topology, on a logarithmic axis; green's first window had no p99.
    assert charts["latency"]["y_type"] == "logarithmic"
    latency = series(charts["latency"])
    assert set(latency) == {(blue, "p50"), (blue, "p99"), (green, "p50"), (green, "p99")}
    assert latency[blue, "p50"] == [40.0, 41.0, 42.0, 43.0]
    assert latency[blue, "p99"] == [90.0, 91.0, 92.0, 93.0]
    assert latency[green, "p99"] == [None, 70.0]

    # failNum per window, red where the rule says up (blue's fourth window: 4 + 2 > E(M)).
    [bars] = [d for d in charts["failures"]["datasets"] if d["type"] == "bar"]
    assert [p["y"] for p in bars["points"]] == [0, 2, 0, 6, 0, 0]
    signals = [w["signal"] for w in metrics["windows"]]
    assert [c == "#e53e3e" for c in bars["resolved"]] == [s == "up" for s in signals]
    assert any(s == "up" for s in signals)
    means = series(charts["failures"])
    assert means[blue, None] == [w["mean"] for w in metrics["windows"][:4]]

    dispersion = series(charts["dispersion"])
    assert dispersion[blue, None] == [w["s2"] for w in metrics["windows"][:4]]
    [c_line] = [d for d in charts["dispersion"]["datasets"] if d["topology"] is None]
    assert {p["y"] for p in c_line["points"]} == {metrics["threshold_c"]}

    backlog = series(charts["backlog"])
    assert backlog[blue, "backlog"] == [0, 200, 400, 600]
    assert backlog[blue, "backpressure level"] == [0, 0, 0, 1]

    # One bar per topology, labelled with its parallelism; the replacement with its
    # overlap (1.9 s) and pause (321 ms) marked.
    timeline = {d["label"]: d for d in charts["timeline"]["datasets"]}
    bands = timeline["topologies"]["points"]
    assert [(p["y"], p["label"]) for p in bands] == [
        ("gen 1", "blue ×2 · STOPPED"),
        ("gen 2", "green ×4 · ACTIVE"),
    ]
    assert all(p["x"][0] < p["x"][1] for p in bands)
    fills = timeline["topologies"]["colours"]
    assert len(set(fills)) == 2
    [replacement] = timeline["replacements"]["points"]
    assert replacement["label"] == "2→4 · overlap 1.90 s · pause 321 ms · ok"
    assert replacement["overlap"][1] - replacement["overlap"][0] == data.OVERLAP_S * 1000
    assert replacement["pause"][1] - replacement["pause"][0] == data.PAUSE_MS


def test_the_page_shows_inside_the_airflow_ui(airflow: Settings, token: str) -> None:
    """The nav entry's route shows the page in Airflow's iframe, same origin, same session."""
    base = base_url(airflow)
    frame = "document.querySelector('iframe')"
    with chromium(width=1400, height=1000) as browser:
        browser.add_cookies([{"name": "_token", "value": token, "url": base, "httpOnly": True}])
        page = browser.new_page()
        page.goto(f"{base}/plugin/flowctl-metrics")
        src = page.wait_for_function(
            f"{frame} && {frame}.getAttribute('src')", timeout=30_000
        ).json_value()
        rendered = page.wait_for_function(
            f"{frame}.contentDocument && {frame}.contentDocument.body "
            f"&& {frame}.contentDocument.body.dataset.rendered",
            timeout=30_000,
        ).json_value()
        page.screenshot(path=ARTIFACTS / "metrics_page_in_airflow.png")
    assert src.rstrip("/").endswith("flowctl")
    assert rendered == data.PIPELINE  # the running pipeline with the newest window


def test_the_page_sends_a_browser_without_session_to_the_login(airflow: Settings) -> None:
    with chromium() as browser:
        page = browser.new_page()
        page.goto(f"{base_url(airflow)}/flowctl/")
        location = page.wait_for_function(
            "location.pathname.startsWith('/auth/login') && location.href", timeout=30_000
        ).json_value()
    assert "next=" in location and "flowctl" in location


def test_the_page_shows_a_window_older_than_two_windows_as_stale(
    airflow: Settings, token: str
) -> None:
    """An ACTIVE topology whose driver stores no window: its last HEALTHY window is shown
    STALE with its age, never as the health now. Its replacement rolled back before any
    handover says so (not "sequential"), in words ("rolled back")."""
    import datetime as dt
    import re

    from flowctl.adapters.control_plane import ControlPlane
    from flowctl.adapters.replacements import ReplacementLog

    plane = ControlPlane(airflow.resolved_database_url)
    quiet = "clickstream-blue-quiet"
    plane.register_topology(quiet, "clickstream", "blue", 2)
    plane.set_state(quiet, "ACTIVE")
    end = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=60)
    plane.write_metrics_window(quiet, end - dt.timedelta(seconds=10), end)
    ReplacementLog(airflow.resolved_database_url).record_replacement(
        "clickstream", quiet, None, 2, 4, "by hand", started_at=end, outcome="rolled_back",
        finished_at=end + dt.timedelta(seconds=5), error="green not ready in 5 s",
    )  # fmt: skip
    dom, charts = _rendered(airflow, token, "clickstream", "metrics_page_stale.png", 1200)
    timeline = charts["timeline"]
    [replacements] = [d for d in timeline["datasets"] if d["label"] == "replacements"]
    assert [p["label"] for p in replacements["points"]] == [
        "2→4 · none (rolled back before the handover) · rolled back"
    ]
    health = re.search(r'data-card="health">.*?class="value warn"[^>]*>([^<]*)<', dom)
    assert health is not None and health.group(1) == "STALE", dom
    age = re.search(r"no metrics window for (\d+) s: the health now is unknown", dom)
    assert age is not None and 55 <= int(age.group(1)) <= 120, dom
    assert "the last window said HEALTHY" in dom
    assert ">none (rolled back before the handover)<" in dom and ">rolled back<" in dom
    assert "sequential" not in dom


def test_the_cards_follow_the_active_topology_with_a_standby_and_a_starting_green(
    airflow: Settings, token: str
) -> None:
    """A warm standby (READY, its window's backlog 0) and a green starting mid-rescale
    (STARTING, no window yet) stand beside the ACTIVE topology, labelled as what they are:
    the cards and the lanes are the ACTIVE one's."""
    import datetime as dt
    import re

    from flowctl.adapters.control_plane import ControlPlane

    plane = ControlPlane(airflow.resolved_database_url)
    active, standby, starting = "logetl-blue-a", "logetl-green-s", "logetl-green-r"
    end = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=2)
    for tid, colour, lanes, state in (
        (active, "blue", 8, "ACTIVE"), (standby, "green", 2, "READY"),
        (starting, "green", 16, "STARTING"),
    ):  # fmt: skip
        plane.register_topology(tid, "logetl", colour, lanes)
        plane.set_state(tid, state)
    for tid, backlog, lanes in ((active, 120, 8), (standby, 0, 2)):
        plane.write_metrics_window(
            tid, end - dt.timedelta(seconds=10), end, backlog=backlog,
            lanes=[{"lane": i, "window": 4, "state": "NORMAL", "in_flight": 1}
                   for i in range(lanes)],
        )  # fmt: skip
    dom, charts = _rendered(airflow, token, "logetl", "metrics_page_standby.png", 1600)
    cards = dict(cards_of(dom))
    assert (cards["topology"], cards["parallelism"], cards["state"]) == (active, "8", "ACTIVE")
    assert cards["beside it"] == "standby green ×2 · starting green ×16"
    assert cards["backlog"] == "120"
    lanes = re.findall(r'<h3 title="([^"]+)">', dom)
    assert lanes[0] == active, lanes  # the ACTIVE topology's lanes first
    # Two green topologies side by side: each its own shade of green, on every chart.
    [bands] = [d for d in charts["timeline"]["datasets"] if d["label"] == "topologies"]
    assert [p["label"] for p in bands["points"]] == [
        "blue ×8 · ACTIVE", "green ×2 · READY", "green ×16 · STARTING"
    ]  # fmt: skip
    assert len(set(bands["colours"])) == 3
    colours = {d["topology"]: d["colour"] for d in charts["throughput"]["datasets"]}
    assert set(colours) == {active, standby}  # the starting green has no window yet
    assert [opaque(colours[active]), opaque(colours[standby])] == [
        opaque(c) for c in bands["colours"][:2]
    ]


#: Each Chart.js chart's data (window.flowctlCharts), as plain JSON: per dataset its
#: label, topology and figure (stat), colour and points; the bars' resolved colours.
CHART_DATA = """() => Object.fromEntries(Object.entries(window.flowctlCharts).map(
  ([name, chart]) => [name, {
    y_type: chart.options.scales.y.type,
    datasets: chart.data.datasets.map((d, i) => ({
      label: d.label, type: d.type || chart.config.type, topology: d.topology || null,
      stat: d.stat || null, colour: typeof d.borderColor === "string" ? d.borderColor : null,
      colours: Array.isArray(d.backgroundColor) ? d.backgroundColor : null,
      resolved: chart.getDatasetMeta(i).data.map((e) => e.options.backgroundColor),
      points: d.data.map((p) => ({
        x: p.x, y: p.y, gap: Boolean(p.gap), label: p.label || null, overlap: p.overlap || null,
        pause: p.pause || null,
      })),
    })),
  }]))"""


def charts_of(page: Any) -> dict[str, Any]:
    """The page's charts' data, read from Chart.js (``window.flowctlCharts``)."""
    return dict(page.evaluate(CHART_DATA))


def series(chart: dict[str, Any]) -> dict[tuple[str, str | None], list[float | None]]:
    """``(topology, stat) -> y values`` of a chart's per-topology lines, without the null
    points that break a line between two stretches (None: a window without the value)."""
    return {
        (d["topology"], d["stat"]): [p["y"] for p in d["points"] if not p["gap"]]
        for d in chart["datasets"]
        if d["topology"] is not None and d["type"] == "line"
    }


def opaque(colour: str) -> str:
    """``hsla(h, s%, l%, a)`` without its alpha: a topology's colour in every chart."""
    return colour.rsplit(",", 1)[0]


def _rendered(
    airflow: Settings, token: str, pipeline: str, shot: str, height: int
) -> tuple[str, dict[str, Any]]:
    """The page of ``pipeline`` rendered in Chromium: its DOM and its charts' data; the
    whole page is left in ``tests/artifacts/<shot>``."""
    base = base_url(airflow)
    with chromium(width=1400, height=height) as browser:
        browser.add_cookies([{"name": "_token", "value": token, "url": base, "httpOnly": True}])
        page = browser.new_page()
        page.goto(f"{base}/flowctl/#pipeline={pipeline}")
        page.wait_for_function(
            f"document.body && document.body.dataset.rendered === '{pipeline}'", timeout=30_000
        )
        dom, charts = page.content(), charts_of(page)
        page.screenshot(path=ARTIFACTS / shot, full_page=True)
    return dom, charts


def page_text_has(dom: str, fragment: str) -> bool:
    return fragment in dom


def cards_of(dom: str) -> list[tuple[str, str]]:
    """``(label, value)`` of the summary cards, read from the rendered DOM."""
    import re

    pattern = re.compile(
        r'<div class="card" data-card="([^"]+)"><div class="label">[^<]*</div>'
        r'<div class="value[^"]*"(?: title="[^"]*")?>([^<]*)</div></div>'
    )
    return pattern.findall(dom)
