"""The metrics API inside Airflow's real api-server app, on real SQLite and PostgreSQL.

The app is Airflow's own (``create_app``), with the plugin mounted by Airflow's
plugin manager and the simple auth manager issuing real JWTs through
``POST /auth/token``; nothing about authentication is overridden. Requests go
through FastAPI's TestClient (in process, no port). The ``flowctl_db``
connection comes from an ``AIRFLOW_CONN_FLOWCTL_DB`` variable pointing at the
test's database, and the rows are written through the control plane.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.ui import seed as data

pytestmark = [pytest.mark.airflow, pytest.mark.integration]

ENDPOINTS = [
    "/flowctl/api/pipelines",
    "/flowctl/api/pipelines/wordcount/metrics",
    "/flowctl/api/pipelines/wordcount/topologies",
    "/flowctl/api/pipelines/wordcount/replacements",
]


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    from airflow.api_fastapi.app import create_app, purge_cached_app

    with TestClient(create_app("core")) as test_client:
        yield test_client
    purge_cached_app()


@pytest.fixture(scope="module")
def token(client: TestClient) -> str:
    passwords = Path(os.environ["AIRFLOW_HOME"]) / "simple_auth_manager_passwords.json.generated"
    password = json.loads(passwords.read_text())["admin"]
    response = client.post("/auth/token", json={"username": "admin", "password": password})
    assert response.status_code == 201, response.text
    return response.json()["access_token"]


@pytest.fixture
def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _use_database(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    conn = {"conn_type": "generic", "extra": {"sqlalchemy_url": url}}
    monkeypatch.setenv("AIRFLOW_CONN_FLOWCTL_DB", json.dumps(conn))


@pytest.fixture
def seeded(database_url: str, monkeypatch: pytest.MonkeyPatch) -> data.Seeded:
    _use_database(monkeypatch, database_url)
    return data.seed(database_url)


@pytest.fixture
def seeded_sqlite(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> data.Seeded:
    _use_database(monkeypatch, sqlite_url)
    return data.seed(sqlite_url)


# -- authentication ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", ENDPOINTS)
def test_a_request_without_a_token_is_refused(
    client: TestClient, seeded_sqlite: data.Seeded, path: str
) -> None:
    response = client.get(path)
    assert response.status_code == 401
    assert response.json() == {"detail": "Not authenticated"}


def test_a_forged_token_is_refused(client: TestClient, seeded_sqlite: data.Seeded) -> None:
    response = client.get(ENDPOINTS[0], headers={"Authorization": "Bearer not.a.jwt"})
    assert response.status_code == 403
    assert response.json() == {"detail": "Invalid JWT token"}


def test_a_user_without_a_role_may_not_read_the_view(
    client: TestClient, seeded_sqlite: data.Seeded
) -> None:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    token = get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="nobody", role=None))
    response = client.get(ENDPOINTS[0], headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 403
    assert response.json() == {
        "detail": "user 'nobody' may not read the custom view 'flowctl'",
    }


def test_the_ui_session_cookie_is_accepted(
    client: TestClient, seeded_sqlite: data.Seeded, token: str
) -> None:
    """The page's fetch() carries the Airflow UI's ``_token`` cookie, no header."""
    client.cookies.set("_token", token)
    try:
        response = client.get(ENDPOINTS[0])
    finally:
        client.cookies.clear()
    assert response.status_code == 200
    assert [p["pipeline"] for p in response.json()["pipelines"]] == ["other", "wordcount"]


def test_the_page_sends_a_visitor_without_session_to_the_login(client: TestClient) -> None:
    response = client.get("/flowctl/", follow_redirects=False)
    assert response.status_code == 307
    assert response.headers["location"].startswith("/auth/login?next=")
    assert "flowctl" in response.headers["location"]


def test_the_page_and_its_script_are_served_to_a_signed_in_user(
    client: TestClient, token: str
) -> None:
    client.cookies.set("_token", token)
    try:
        page = client.get("/flowctl/", follow_redirects=False)
    finally:
        client.cookies.clear()
    assert page.status_code == 200
    assert '<script src="static/flowctl.js"></script>' in page.text
    script = client.get("/flowctl/static/flowctl.js")
    assert script.status_code == 200
    assert 'getJSON("api/pipelines")' in script.text


# -- data -------------------------------------------------------------------------------------


def test_pipelines_list_the_current_topology(
    client: TestClient, seeded: data.Seeded, auth: dict[str, str]
) -> None:
    response = client.get("/flowctl/api/pipelines", headers=auth)
    assert response.status_code == 200
    pipelines = {p["pipeline"]: p for p in response.json()["pipelines"]}
    assert pipelines["wordcount"] == {
        "pipeline": "wordcount",
        "topologies": 2,
        "live_topologies": [data.GREEN],
        "current_topology": data.GREEN,
        "parallelism": 4,
        "state": "ACTIVE",
        "replacements": 1,
        "last_window_end": (seeded.start + dt.timedelta(seconds=60)).isoformat(),
    }
    assert pipelines["other"]["current_topology"] == "other-blue-1"
    assert pipelines["other"]["last_window_end"] is None
    assert pipelines["other"]["state"] == "STARTING"


def test_metrics_carry_fail_num_e_m_s2_and_the_rule_signal(
    client: TestClient, seeded: data.Seeded, auth: dict[str, str]
) -> None:
    response = client.get(
        "/flowctl/api/pipelines/wordcount/metrics",
        params={"history": 4, "threshold_c": 4},
        headers=auth,
    )
    assert response.status_code == 200
    body = response.json()
    assert (body["history"], body["threshold_c"], body["limit"]) == (4, 4.0, 120)
    assert body["rule_source"] == "query"
    windows = body["windows"]
    assert [w["topology_id"] for w in windows] == [data.BLUE] * 4 + [data.GREEN] * 2
    assert [w["fail_num"] for w in windows] == [0, 2, 0, 6, 0, 0]
    assert windows == sorted(windows, key=lambda w: w["window_end"])
    last_blue = windows[3]
    # X = [0, 2, 0, 6]: E(M) = 2; S^2 = (1/4*4 + 2/4*0 + 3/4*4 + 1*16) / 4 = 5.
    assert (last_blue["mean"], last_blue["s2"], last_blue["signal"]) == (2.0, 5.0, "up")
    assert (last_blue["failed"], last_blue["timed_out"]) == (4, 2)
    # The green topology's ring starts empty: no failures, nothing to decide.
    assert [(w["mean"], w["s2"], w["signal"]) for w in windows[4:]] == [(0.0, 0.0, "none")] * 2
    assert windows[5]["records_per_s"] == data.RECORDS_PER_S
    assert windows[4]["latency_p99_ms"] is None
    assert [(w["health"], w["health_cause"]) for w in windows] == [("HEALTHY", None)] * 6
    assert "lanes" not in windows[0]
    assert body["dlq_total"] == data.DLQ_TOTAL
    [latest] = body["latest"]
    assert (latest["topology_id"], latest["parallelism"], latest["state"]) == (
        data.GREEN,
        4,
        "ACTIVE",
    )
    assert latest["lanes"] == data.GREEN_LANES
    assert latest["stale_s"] is None  # its window ended 10 s ago: current


def test_a_live_topologys_window_older_than_two_windows_is_marked_stale(
    client: TestClient, seeded: data.Seeded, database_url: str, auth: dict[str, str]
) -> None:
    """A driver that stores no window leaves its last one standing: the page is told how
    old it is, so it never shows it as current (wordcount's windows are 10 s long)."""
    from flowctl.adapters.control_plane import ControlPlane

    plane = ControlPlane(database_url)
    quiet = "wordcount-blue-quiet"
    plane.register_topology(quiet, "wordcount", "blue", 2)
    plane.set_state(quiet, "ACTIVE")
    end = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=50)
    plane.write_metrics_window(quiet, end - dt.timedelta(seconds=10), end)
    body = client.get("/flowctl/api/pipelines/wordcount/metrics", headers=auth).json()
    stale = {t["topology_id"]: t["stale_s"] for t in body["latest"]}
    assert stale[data.GREEN] is None
    assert 45 <= stale[quiet] <= 60


def test_a_and_c_default_to_the_pipeline_config(
    client: TestClient, seeded: data.Seeded, auth: dict[str, str]
) -> None:
    from flowctl.pipelines.config import load_pipeline_config

    scaling = load_pipeline_config("wordcount").scaling
    body = client.get("/flowctl/api/pipelines/wordcount/metrics", headers=auth).json()
    assert (body["history"], body["threshold_c"], body["rule_source"], body["rule_problem"]) == (
        scaling.history_windows,
        scaling.threshold_c,
        "config",
        None,
    )


def test_a_pipeline_without_config_gets_the_autoscaler_defaults(
    client: TestClient, seeded: data.Seeded, auth: dict[str, str]
) -> None:
    from flowctl.pipelines.config import ScalingConfig

    body = client.get("/flowctl/api/pipelines/other/metrics", headers=auth).json()
    assert (body["history"], body["threshold_c"], body["rule_source"]) == (
        ScalingConfig().history_windows,
        ScalingConfig().threshold_c,
        "default",
    )
    assert "does not exist" in body["rule_problem"]
    assert body["windows"] == [] and body["latest"] == []


def test_a_higher_threshold_silences_the_signal(
    client: TestClient, seeded: data.Seeded, auth: dict[str, str]
) -> None:
    response = client.get(
        "/flowctl/api/pipelines/wordcount/metrics",
        params={"history": 4, "threshold_c": 5},
        headers=auth,
    )
    assert response.json()["windows"][3]["signal"] == "none"  # S^2 = 5 is not > 5


def test_limit_keeps_the_latest_windows_but_their_full_history(
    client: TestClient, seeded: data.Seeded, auth: dict[str, str]
) -> None:
    response = client.get(
        "/flowctl/api/pipelines/wordcount/metrics",
        params={"history": 4, "threshold_c": 4, "limit": 3},
        headers=auth,
    )
    windows = response.json()["windows"]
    assert [w["fail_num"] for w in windows] == [6, 0, 0]
    assert (windows[0]["windows_in_history"], windows[0]["s2"]) == (4, 5.0)


def test_topologies_are_bands_closed_only_when_final(
    client: TestClient, seeded: data.Seeded, auth: dict[str, str]
) -> None:
    response = client.get("/flowctl/api/pipelines/wordcount/topologies", headers=auth)
    assert response.status_code == 200
    bands = response.json()["topologies"]
    assert [(b["topology_id"], b["colour"], b["parallelism"], b["state"]) for b in bands] == [
        (data.BLUE, "blue", 2, "STOPPED"),
        (data.GREEN, "green", 4, "ACTIVE"),
    ]
    assert bands[0]["ended_at"] is not None and bands[0]["ended_at"] >= bands[0]["started_at"]
    assert bands[1]["ended_at"] is None


def test_a_failed_topologys_cause_is_on_its_band(
    client: TestClient, seeded: data.Seeded, auth: dict[str, str], database_url: str
) -> None:
    from flowctl.adapters.control_plane import ControlPlane
    from flowctl.adapters.data_loss import record_cause

    ControlPlane(database_url).set_state(data.GREEN, "FAILED")
    cause = (
        "records lost before processing (on_data_loss = fail): wordcount.eden partition 1: "
        "offsets [100, 250) (150 record(s)) lost before processing: the log now starts at 250"
    )
    record_cause(database_url, data.GREEN, cause)
    response = client.get("/flowctl/api/pipelines/wordcount/topologies", headers=auth)
    bands = response.json()["topologies"]
    assert [(b["topology_id"], b["state"], b["cause"]) for b in bands] == [
        (data.BLUE, "STOPPED", None),
        (data.GREEN, "FAILED", cause),
    ]


def test_replacements_carry_steps_pause_and_duplicates(
    client: TestClient, seeded: data.Seeded, auth: dict[str, str]
) -> None:
    response = client.get("/flowctl/api/pipelines/wordcount/replacements", headers=auth)
    assert response.status_code == 200
    [event] = response.json()["replacements"]
    assert event["id"] == seeded.replacement_id
    assert (event["old_topology_id"], event["new_topology_id"]) == (data.BLUE, data.GREEN)
    assert (event["old_parallelism"], event["new_parallelism"]) == (2, 4)
    assert (event["pause_ms"], event["duplicates"], event["outcome"]) == (
        data.PAUSE_MS,
        data.DUPLICATES,
        "ok",
    )
    assert event["decision"] == data.DECISION.to_dict()
    assert math.isclose(event["duration_s"], 6.5)
    handover = event["handover"]  # overlapped: when both topologies admitted
    assert (handover["blue"], handover["green"]) == (data.BLUE, data.GREEN)
    assert math.isclose(handover["overlap_s"], data.OVERLAP_S)
    assert handover["frontier_at"] < handover["green_admitting_at"] < handover["blue_gone_at"]


# -- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "detail"),
    [
        ("metrics?limit=0", "limit='0': Input should be greater than or equal to 1"),
        ("metrics?limit=5000", "limit='5000': Input should be less than or equal to 2000"),
        ("metrics?history=0", "history='0': Input should be greater than or equal to 1"),
        (
            "metrics?history=x",
            "history='x': Input should be a valid integer, unable to parse string as an integer",
        ),
        ("metrics?threshold_c=-1", "threshold_c='-1': Input should be greater than or equal to 0"),
        ("metrics?threshold_c=nan", "threshold_c='nan': Input should be a finite number"),
        ("replacements?limit=501", "limit='501': Input should be less than or equal to 500"),
    ],
)
def test_bad_parameters_are_named_with_their_value(
    client: TestClient, seeded_sqlite: data.Seeded, auth: dict[str, str], path: str, detail: str
) -> None:
    response = client.get(f"/flowctl/api/pipelines/wordcount/{path}", headers=auth)
    assert response.status_code == 422
    assert response.json()["detail"] == detail


def test_a_bad_pipeline_name_is_named(
    client: TestClient, seeded_sqlite: data.Seeded, auth: dict[str, str]
) -> None:
    response = client.get("/flowctl/api/pipelines/word%20count/topologies", headers=auth)
    assert response.status_code == 422
    assert response.json()["detail"].startswith("pipeline='word count': String should match")


def test_an_unknown_pipeline_is_404_naming_it(
    client: TestClient, seeded_sqlite: data.Seeded, auth: dict[str, str]
) -> None:
    response = client.get("/flowctl/api/pipelines/nosuch/metrics", headers=auth)
    assert response.status_code == 404
    assert response.json() == {"detail": "pipeline='nosuch' has no topologies and no replacements"}


def test_a_missing_connection_is_503_naming_it(
    client: TestClient, auth: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_FLOWCTL_DB", raising=False)
    response = client.get("/flowctl/api/pipelines", headers=auth)
    assert response.status_code == 503
    assert response.json()["detail"].startswith("connection 'flowctl_db' is not defined")


def test_an_empty_database_lists_no_pipelines(
    client: TestClient, sqlite_url: str, auth: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _use_database(monkeypatch, sqlite_url)
    response = client.get("/flowctl/api/pipelines", headers=auth)
    assert response.status_code == 200
    assert response.json() == {"pipelines": []}


def test_the_metrics_page_reads_the_same_windows_over_rolled_up_history(
    client: TestClient, seeded: data.Seeded, auth: dict[str, str], database_url: str
) -> None:
    """Old windows rolled up hourly: the series and its E(M), S^2 are the recent windows'
    as before, and the DLQ total still counts the rolled-up windows' DLQ records."""
    from flowctl.adapters.control_plane import ControlPlane

    url = "/flowctl/api/pipelines/wordcount/metrics"
    params = {"history": 4, "threshold_c": 4}
    before = client.get(url, params=params, headers=auth).json()
    plane = ControlPlane(database_url)
    old = seeded.start.replace(minute=0, second=0, microsecond=0) - dt.timedelta(hours=30)
    for k in range(3):
        start = old + dt.timedelta(minutes=5 * k)
        plane.write_metrics_window(
            data.BLUE, start, start + dt.timedelta(minutes=5), acked=10, failed=9, dlq=2
        )
    assert plane.roll_up_windows(seeded.start - dt.timedelta(hours=24)) == 3
    after = client.get(url, params=params, headers=auth).json()
    assert after["windows"] == before["windows"] and after["latest"] == before["latest"]
    assert after["dlq_total"] == data.DLQ_TOTAL + 3 * 2
