"""The metrics page in a real ``airflow standalone``, rendered by headless Chromium.

Airflow runs on free ports with a temporary home (AirflowService, the same
path as ``flowctl airflow up``); its ``flowctl_db`` connection points at the
home's SQLite database, into which known rows are written first. The API must
refuse a call without a token and answer one with a token from Airflow's
``/auth/token``; the browser, given the UI's session cookie, must render the
pipeline's figures. The screenshot is left in ``tests/artifacts/``.
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
    data.seed(settings.resolved_database_url)
    service = AirflowService()
    try:
        service.up(settings)
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
        page.screenshot(path=ARTIFACTS / "metrics_page.png", full_page=True)
    assert rendered == data.PIPELINE
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
    assert 'class="overlap"' in dom  # and the overlap on the parallelism timeline
    # what the sensor saw when it decided: the dispersion, utilisation and backlog
    assert "adaptive policy, cause load · E(M) 2, S² 5 (C 4)" in dom
    assert "utilisation 93% · backlog 12000 (+3000)" in dom
    assert dom.count('class="state BUSY"') == 1  # one busy lane in the latest window
    assert "<svg" in dom and "polyline" in dom
    assert (ARTIFACTS / "metrics_page.png").stat().st_size > 10_000


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
    base = base_url(airflow)
    with chromium(width=1400, height=1200) as browser:
        browser.add_cookies([{"name": "_token", "value": token, "url": base, "httpOnly": True}])
        page = browser.new_page()
        page.goto(f"{base}/flowctl/#pipeline=clickstream")
        page.wait_for_function(
            "document.body && document.body.dataset.rendered === 'clickstream'", timeout=30_000
        )
        dom = page.content()
        page.screenshot(path=ARTIFACTS / "metrics_page_stale.png")
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
    base = base_url(airflow)
    with chromium(width=1400, height=1600) as browser:
        browser.add_cookies([{"name": "_token", "value": token, "url": base, "httpOnly": True}])
        page = browser.new_page()
        page.goto(f"{base}/flowctl/#pipeline=logetl")
        page.wait_for_function(
            "document.body && document.body.dataset.rendered === 'logetl'", timeout=30_000
        )
        dom = page.content()
        page.screenshot(path=ARTIFACTS / "metrics_page_standby.png", full_page=True)
    cards = dict(cards_of(dom))
    assert (cards["topology"], cards["parallelism"], cards["state"]) == (active, "8", "ACTIVE")
    assert cards["beside it"] == "standby green ×2 · starting green ×16"
    assert cards["backlog"] == "120"
    lanes = re.findall(r'<h3 title="([^"]+)">', dom)
    assert lanes[0] == active, lanes  # the ACTIVE topology's lanes first


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
