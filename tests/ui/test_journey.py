"""A new user's journey through the Airflow UI, in a real browser, on the real platform.

The platform is started the way ``flowctl demo up`` starts it (Apache Kafka, memcached,
``airflow standalone`` with its api-server, scheduler, dag-processor and
triggerer; Spark local), on free ports in a temporary home. Debian's Chromium,
driven by playwright, then does what a user does: log in, find the DAGs,
trigger them from their forms, read the stream task's log, watch the metrics
page, rescale from the form (whose one field offers only valid changes; the
REST API refuses anything else), and find the metrics page closed once logged
out. The DAGs a user triggers by hand are unpaused at creation: no step
depends on the form's unpause (an unpause racing the trigger once left a run
queued behind a paused DAG). Each step asserts what the page
shows and leaves a screenshot in ``tests/artifacts/journey/``. At the end,
the demo's ``down`` path must leave no DAG run open, and the logs of the healthy runs
(ingest, stream, the rescale, the green it started) hold no WARNING or ERROR line beyond
those :data:`KEPT_WARNINGS` names (none today).
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from flowctl import demo
from flowctl.config import Settings
from flowctl.services import manager
from flowctl.services.airflow import ADMIN_USER, AirflowService, admin_password
from flowctl.services.airflow_runs import AirflowApi, close_runs
from flowctl.services.base import ServiceError
from flowctl.services.ports import free_port
from flowctl.services.stopping import stop_topologies
from tests.ui.browser import chromium

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.airflow,
    pytest.mark.spark,
    pytest.mark.timeout(1800),  # the platform starts, a rescale runs, on a shared machine
]

SHOTS = Path(__file__).resolve().parents[1] / "artifacts" / "journey"
PIPELINE = "wordcount"
KINDS = ("ingest", "stream", "rescale", "autoscale", "reconcile")


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """Services and Airflow as ``flowctl demo up`` starts them; ``demo down`` at the end."""
    settings = dataclasses.replace(
        Settings(home=tmp_path_factory.mktemp("journey_home")),
        airflow_port=free_port(),
        kafka_port=free_port(),
        memcached_port=free_port(),
    )
    try:
        list(manager.up(settings))
        AirflowService().up(settings)
        names = demo.pipeline_names()
        demo.wait_for_dags(settings, [f"{k}_{n}" for n in names for k in KINDS])
        yield settings
    finally:
        demo.down(settings, say=lambda _: None)


def _base(settings: Settings) -> str:
    return f"http://{settings.host}:{settings.airflow_port}"


def _shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SHOTS / f"{name}.png", full_page=True)


def _poll(what: str, timeout_s: float, probe: Callable[[], object], every_s: float = 3.0) -> object:
    """``probe()`` until it returns something truthy; AssertionError naming ``what`` if not."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not seen within {timeout_s:.0f} s")
        time.sleep(every_s)


def _open_trigger_form(page: Page, base: str, dag_id: str, api: AirflowApi) -> None:
    """The DAG's trigger form; the DAG must be unpaused already (it is at creation)."""
    assert api._call("GET", f"/api/v2/dags/{dag_id}")["is_paused"] is False, dag_id
    page.goto(f"{base}/dags/{dag_id}")
    page.get_by_test_id("trigger-dag-button").first.click()
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_test_id("trigger-dag-submit")).to_be_visible(timeout=30_000)
    # Nothing to unpause: the form's trigger is the run's only request.
    expect(dialog.get_by_role("checkbox", name=re.compile(r"^Unpause "))).to_have_count(0)


def _submit_trigger(page: Page) -> None:
    page.get_by_role("dialog").get_by_test_id("trigger-dag-submit").click()


def _choose(page: Page, param: str, option: str) -> None:
    """Pick ``option`` in a select-type Params field (a react-select in Airflow's form)."""
    page.locator(f"#element_{param}").click()
    page.get_by_role("option", name=re.compile(rf"^{re.escape(option)}\b")).first.click()


def _newest_run(api: AirflowApi, dag_id: str) -> dict[str, object]:
    """The DAG's newest run; a failed one fails the test at once (its log says why)."""
    body = api._call("GET", f"/api/v2/dags/{dag_id}/dagRuns?order_by=-run_after&limit=1")
    runs = body["dag_runs"]
    run = runs[0] if runs else {}
    assert run.get("state") != "failed", f"{dag_id} run {run.get('dag_run_id')} failed"
    return run


def _metrics_page(page: Page, base: str) -> dict[str, str]:
    """Open the metrics page and read its summary cards once rendered."""
    page.goto(f"{base}/flowctl/#pipeline={PIPELINE}")
    page.wait_for_function("document.body && document.body.dataset.rendered", timeout=30_000)
    return page.evaluate(
        """() => Object.fromEntries(Array.from(document.querySelectorAll('.card')).map(
            (c) => [c.dataset.card, c.querySelector('.value').textContent]))"""
    )


def test_a_new_user_drives_the_platform_from_the_airflow_ui(platform: Settings) -> None:
    base = _base(platform)
    api = AirflowApi(platform)
    with chromium(width=1400, height=1000) as browser:
        page = browser.new_page()

        # 1. log in
        page.goto(f"{base}/")
        page.wait_for_url(re.compile(r"/auth/login"), timeout=60_000)
        page.locator("input[name=username]").fill(ADMIN_USER)
        page.locator("input[name=password]").fill(admin_password(platform) or "")
        _shot(page, "01_login")
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(lambda url: "/auth/login" not in url, timeout=60_000)
        expect(page.get_by_role("link", name=re.compile("Dags", re.I)).first).to_be_visible(
            timeout=30_000
        )
        _shot(page, "02_logged_in")

        # 2. the DAG list shows every generated DAG
        page.goto(f"{base}/dags")
        for name in demo.pipeline_names():
            for kind in KINDS:
                expect(page.get_by_text(f"{kind}_{name}", exact=True).first).to_be_visible(
                    timeout=60_000
                )
        _shot(page, "03_dag_list")

        # 3. ingest_wordcount from its untouched form
        _open_trigger_form(page, base, f"ingest_{PIPELINE}", api)
        _shot(page, "04_ingest_form")
        _submit_trigger(page)
        expect(page.get_by_text("Dag Run Triggered").first).to_be_visible(timeout=30_000)
        _shot(page, "05_ingest_triggered")
        _poll(
            "the ingest run succeeded",
            300,
            lambda: _newest_run(api, f"ingest_{PIPELINE}").get("state") == "success",
        )

        # 4. stream_wordcount from its form
        _open_trigger_form(page, base, f"stream_{PIPELINE}", api)
        _shot(page, "06_stream_form")
        _submit_trigger(page)
        expect(page.get_by_text("Dag Run Triggered").first).to_be_visible(timeout=30_000)
        stream_run = _poll(
            "the stream run is running",
            180,
            lambda: (r := _newest_run(api, f"stream_{PIPELINE}")).get("state") == "running" and r,
        )
        assert isinstance(stream_run, dict)

        # 5. its task log shows a window or checkpoint line within a minute
        log_url = f"{base}/dags/stream_{PIPELINE}/runs/{stream_run['dag_run_id']}/tasks/topology"
        pattern = re.compile(r"checkpoint|windows? .*(->|→)", re.I)  # a change, not the config

        page.set_viewport_size({"width": 1400, "height": 3000})  # the viewer renders what fits

        def log_shows_the_story() -> bool:
            page.goto(log_url)
            page.wait_for_load_state("networkidle")
            return bool(pattern.search(page.inner_text("body")))

        _poll("a window or checkpoint line in the stream task's log", 120, log_shows_the_story, 5)
        _each_driver_line_has_its_own_level(page.inner_text("body"))
        _shot(page, "07_stream_task_log")
        page.set_viewport_size({"width": 1400, "height": 1000})

        # 6. the metrics page shows throughput > 0
        def throughput() -> float:
            value = _metrics_page(page, base).get("records/s", "–")
            return float(value) if value not in ("–", "") else 0.0

        _poll("records/s > 0 on the metrics page", 180, lambda: throughput() > 0, 5)
        cards = _metrics_page(page, base)
        assert cards["parallelism"] == "2", cards
        # the health card: a topology making durable progress with no code error
        assert cards["health"] == "HEALTHY", cards
        _shot(page, "08_metrics_live")

        # 7. rescale_wordcount, change up, from the form
        _open_trigger_form(page, base, f"rescale_{PIPELINE}", api)
        _choose(page, "change", "up")
        page.locator("#element_reason").fill("journey test: one step up")
        _shot(page, "09_rescale_form")
        _submit_trigger(page)
        expect(page.get_by_text("Dag Run Triggered").first).to_be_visible(timeout=30_000)

        # 8. the metrics page shows the replacement with its pause and the new parallelism
        def replaced() -> bool:
            cards = _metrics_page(page, base)
            rows = page.locator("#replacements tbody tr")
            return (
                cards.get("parallelism") == "4"
                and rows.count() >= 1
                and "2 → 4" in rows.first.inner_text()
                and "ok" in rows.first.inner_text()
            )

        _poll("the replacement 2 → 4 on the metrics page", 300, replaced, 5)
        headers = [
            " ".join(h.split()) for h in page.locator("#replacements thead th").all_inner_texts()
        ]
        cells = page.locator("#replacements tbody tr").first.locator("td").all_inner_texts()
        cell = dict(zip(headers, cells, strict=True))
        pause_ms, handover = cell["pause ms"], " ".join(cell["handover"].split())
        assert re.fullmatch(r"\d+(\.\d+)?", pause_ms), f"pause ms cell reads {pause_ms!r}"
        # the rescale DAG hands over overlapped by default: the row says for how long
        assert re.fullmatch(r"overlap \d+(\.\d+)? s", handover), f"handover cell: {handover!r}"
        _shot(page, "10_metrics_after_rescale")

        # 9. a bad rescale cannot be submitted: the form offers valid changes only, the
        # REST API refuses anything else naming the field, and no run is created.
        # Independent of step 10: a failure here is reported after step 10 has run too.
        refused: Exception | None = None
        try:
            _bad_rescale_is_refused(page, base, api)
        except (AssertionError, PlaywrightTimeoutError) as exc:
            refused = exc
        finally:
            _shot(page, "11_bad_rescale")
            page.set_viewport_size({"width": 1400, "height": 1000})

        # 10. logged out, the metrics page and its API refuse the browser
        browser.clear_cookies()
        page.goto(f"{base}/flowctl/")
        page.wait_for_url(re.compile(r"/auth/login"), timeout=30_000)
        assert "flowctl" in page.url  # sent to the login, with the page to come back to
        _shot(page, "12_logged_out_metrics")
        response = browser.request.get(f"{base}/flowctl/api/pipelines")
        assert response.status == 401, response.text()

    # `flowctl demo down`'s first steps: no DAG run may stay open once Airflow stops.
    stop_topologies(platform, say=lambda _: None)
    close_runs(platform, wait_s=60.0, note="closed by the journey test's teardown")
    assert api.open_runs() == []
    if refused is not None:
        raise refused
    loud = _warnings_of_healthy_runs(platform)
    assert not loud, "warnings in the logs of a healthy journey:\n" + "\n".join(loud[:30])


#: Warnings a healthy run may log: (a piece of the line, why it is kept). None today; one
#: kept here must also be explained in docs/operations.md, where an operator reads it.
KEPT_WARNINGS: tuple[tuple[str, str], ...] = ()


def _warnings_of_healthy_runs(settings: Settings) -> list[str]:
    """WARNING, ERROR and CRITICAL lines of the task logs of every run that succeeded
    (the runs this test failed on purpose, the bad rescales, are left out), but those
    :data:`KEPT_WARNINGS` names: ``<dag>/<run>: <level> <message>``."""
    import json

    from flowctl.services.airflow import airflow_home

    loud: list[str] = []
    api = AirflowApi(settings)
    for dag_dir in sorted((airflow_home(settings) / "logs").glob("dag_id=*")):
        dag_id = dag_dir.name.removeprefix("dag_id=")
        for run_dir in sorted(dag_dir.glob("run_id=*")):
            run_id = run_dir.name.removeprefix("run_id=")
            state = api._call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"]
            if state != "success":
                continue
            for path in sorted(run_dir.glob("*/attempt=*.log")):
                for line in path.read_text(errors="replace").splitlines():
                    try:
                        entry = json.loads(line)
                    except ValueError:
                        continue
                    level = str(entry.get("level", "")).upper()
                    event = str(entry.get("event", ""))
                    if level in ("WARNING", "ERROR", "CRITICAL") and not any(
                        piece in event for piece, _ in KEPT_WARNINGS
                    ):
                        loud.append(f"{dag_id}/{run_id}: {level} {event[:300]}")
    return loud


#: A line of Airflow's log view: "[2026-11-26 14:38:19] INFO - message".
_VIEW_LINE = re.compile(
    r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] (DEBUG|INFO|WARNING|ERROR|CRITICAL) - (.*)"
)
#: The driver's own stamp and level at the start of a message: a line relayed as the
#: text of an INFO line (Spark's log4j "26/11/26 14:38:19 WARN ..." or flowctl's
#: "2026-11-26 14:38:19,123 WARNING ...") instead of at its own level.
_RELAYED_STAMP = re.compile(
    r"^(\d\d/\d\d/\d\d \d\d:\d\d:\d\d |\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ )"
    r"(DEBUG|INFO|WARN|WARNING|ERROR)\b"
)


def _each_driver_line_has_its_own_level(text: str) -> None:
    """The log view shows the driver's lines with their levels: each line is a record at
    its own level (the view's level column, which its level filter uses), never the
    driver's stamped line as the message of an INFO record."""
    lines = [m.groups() for m in _VIEW_LINE.finditer(text)]
    assert len(lines) >= 5, f"the log view shows {len(lines)} levelled lines: {text[:400]!r}"
    relayed = [message for _, message in lines if _RELAYED_STAMP.match(message)]
    assert relayed == [], f"lines relayed as text, not at their level: {relayed[:3]}"


def _bad_rescale_is_refused(page: Page, base: str, api: AirflowApi) -> None:
    """The form's one field offers each valid change and nothing else (its empty first
    entry says what to choose: no "required" error before it is touched); through the
    REST API a bad change is refused at once, naming the field, and no run is created (the
    old form accepted up with 8 lanes, said "triggered", and the run failed). The old
    form's two fields make a run whose task fails at once, naming the new field."""
    _open_trigger_form(page, base, f"rescale_{PIPELINE}", api)
    page.locator("#element_change").click()
    offered = [" ".join(t.split()) for t in page.get_by_role("option").all_inner_texts()]
    _shot(page, "11_rescale_choices")
    assert offered == [
        "(choose: up, down or a number of lanes)",
        "up (double)", "down (halve)", "1 lane", "2 lanes", "4 lanes", "8 lanes", "16 lanes",
    ], offered  # fmt: skip
    page.keyboard.press("Escape")
    runs_path = f"/api/v2/dags/rescale_{PIPELINE}/dagRuns"
    before = api._call("GET", f"{runs_path}?limit=100")["total_entries"]
    for conf, field in (
        ({"change": "sideways", "reason": "journey test: bad change"}, "change"),
        ({"change": "up", "reason": ""}, "reason"),
    ):
        with pytest.raises(ServiceError, match=rf"HTTP 400 .*param {field}"):
            api._call("POST", runs_path, {"logical_date": None, "conf": conf})
    assert api._call("GET", f"{runs_path}?limit=100")["total_entries"] == before
    old = {"direction": "up", "target_parallelism": 8, "reason": "old form"}
    run = api._call("POST", runs_path, {"logical_date": None, "conf": old})
    run_path = f"{runs_path}/{run['dag_run_id']}"
    _poll(
        "the old form's run failed", 180, lambda: api._call("GET", run_path)["state"] == "failed", 2
    )
    tries = api._call("GET", f"{run_path}/taskInstances/replace")["try_number"]
    assert tries == 1, f"the old form's run was retried ({tries} tries)"


def _texts_naming(page: Page, pattern: str) -> set[str]:
    """Visible messages matching ``pattern``: short texts holding no form control.

    A form row holds its label, its control and its description, so a row never
    counts; an error text under a field, in the dialog or in a toast does.
    """
    return set(
        page.evaluate(
            """(pattern) => {
                const re = new RegExp(pattern, 's');
                return Array.from(document.querySelectorAll('body *'))
                  .filter((e) => e.offsetParent !== null)
                  .filter((e) => !e.querySelector('input, textarea, button, [role=combobox]'))
                  .map((e) => e.innerText || '')
                  .filter((t) => t.length < 400 && re.test(t));
            }""",
            pattern,
        )
    )
