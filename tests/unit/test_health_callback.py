"""``[stream] on_health_callback``: resolved when the config loads, called once per change."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from flowctl.pipelines.config import PIPELINES_DIR, PipelineConfigError, load_pipeline_config
from flowctl.pipelines.health_callback import HealthCallback

EVENTS: list[dict[str, Any]] = []


def record(event: dict[str, Any]) -> None:
    """The callback under test (this module is importable as ``tests.unit...``)."""
    EVENTS.append(event)


def explode(event: dict[str, Any]) -> None:
    raise RuntimeError(f"webhook down for {event['state']}")


HERE = f"{__name__}:record"


def test_called_once_per_change_to_stalled_halted_or_failed() -> None:
    EVENTS.clear()
    alerts = HealthCallback("wc", "wc-blue-1", HERE)
    states = ("HEALTHY", "RECOVERING", "STALLED", "STALLED", "HEALTHY", "HALTED", "HALTED")
    for state in states:  # RECOVERING is a warning: it resolves itself, or stalls
        alerts.health(state, None if state == "HEALTHY" else f"{state} cause", 1_700_000_000.0)
    alerts.failed("the query ended", 1_700_000_010.0)
    assert [(e["state"], e["cause"]) for e in EVENTS] == [
        ("STALLED", "STALLED cause"),
        ("HALTED", "HALTED cause"),
        ("FAILED", "the query ended"),
    ]
    assert EVENTS[0] == {
        "pipeline": "wc",
        "topology_id": "wc-blue-1",
        "state": "STALLED",
        "cause": "STALLED cause",
        "at": "2023-11-14T22:13:20+00:00",
    }


def test_a_failing_callback_is_logged_and_the_stream_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    alerts = HealthCallback("wc", "wc-blue-1", f"{__name__}:explode")
    with caplog.at_level(logging.ERROR, logger="flowctl.health"):
        alerts.health("HALTED", "code error", 0.0)
    (line,) = caplog.records
    assert "the health callback failed on HALTED" in line.getMessage()
    assert line.exc_info is not None and "webhook down for HALTED" in str(line.exc_info[1])


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("not a path!", r'stream\.on_health_callback=\'not a path!\' must be "package\.module'),
        ("no_such_module_x:alert", r"cannot import 'no_such_module_x'"),
        (f"{__name__}:missing", r"has no callable 'missing'"),
    ],
)
def test_a_bad_callback_is_refused_when_the_config_loads(
    tmp_path: Path, value: str, message: str
) -> None:
    text = (PIPELINES_DIR / "wordcount.toml").read_text()
    config = tmp_path / "wordcount.toml"
    config.write_text(text.replace('on_health_callback = ""', f'on_health_callback = "{value}"'))
    with pytest.raises(PipelineConfigError, match=message):
        load_pipeline_config(config)
    config.write_text(text.replace('on_health_callback = ""', f'on_health_callback = "{HERE}"'))
    assert load_pipeline_config(config).on_health_callback == HERE
