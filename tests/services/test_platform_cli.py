"""``flowctl ingest`` and ``flowctl stream list|stop|counts`` against the session's services."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from flowctl.adapters import kafka_ends
from flowctl.adapters.control_plane import ControlPlane
from flowctl.adapters.db import engine_for
from flowctl.cli import main
from flowctl.config import Settings
from flowctl.core.window_figures import WindowFigures
from flowctl.pipelines.config import PIPELINES_DIR, load_pipeline_config
from flowctl.pipelines.sinks import result_store
from flowctl.pipelines.wordcount import count_words
from flowctl.textgen import zipf_lines

pytestmark = pytest.mark.integration

#: The word count's apply/stored, routed as the flusher and reconcile route them ([sink]).
WORDCOUNT = result_store(load_pipeline_config("wordcount"))


@pytest.fixture
def cli_env(flowctl_settings: Settings, sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    for key, value in flowctl_settings.to_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("FLOWCTL_DATABASE_URL", sqlite_url)
    return sqlite_url


def test_ingest_reports_progress_and_writes_every_line(
    cli_env: str, kafka_bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A private copy of the pipeline: other tests read wordcount.eden on the same broker.
    text = (PIPELINES_DIR / "wordcount.toml").read_text()
    config = tmp_path / "wccli.toml"
    config.write_text(
        text.replace('"wordcount"', '"wccli"').replace("wordcount.eden", "wccli.eden")
    )
    assert main(["ingest", "--pipeline", str(config), "--lines", "1200", "--seed", "5"]) == 0
    out = capsys.readouterr()
    assert "produced 1,200/1,200 (100%)" in out.err
    assert "ingested 1,200 records into wccli.eden" in out.out
    assert sum(kafka_ends.latest_offsets(kafka_bootstrap, "wccli.eden").values()) == 1200


def test_ingest_rejects_bad_input_naming_it(
    cli_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ingest", "--lines", "0"]) == 1
    assert "lines=0 must be between 1 and" in capsys.readouterr().err
    assert main(["ingest", "--file", "/nonexistent/book.txt"]) == 1
    assert "path='/nonexistent/book.txt' is not a readable file" in capsys.readouterr().err


def test_stream_list_stop_and_counts(cli_env: str, capsys: pytest.CaptureFixture[str]) -> None:
    plane = ControlPlane(cli_env)
    plane.ensure_schema()
    plane.register_topology("wordcount-blue-t1", "wordcount", "blue", 2)
    plane.set_state("wordcount-blue-t1", "ACTIVE")
    expected = count_words(zipf_lines(50, seed=3))
    with engine_for(cli_env).begin() as conn:
        WORDCOUNT.apply(conn, "wordcount", [dict(expected)])

    assert main(["stream", "list"]) == 0
    assert "wordcount-blue-t1  ACTIVE" in capsys.readouterr().out
    assert main(["stream", "stop", "--pipeline", "wordcount"]) == 0
    assert "sent stop to wordcount-blue-t1" in capsys.readouterr().out
    assert [s.kind for s in plane.pending_signals("wordcount-blue-t1")] == ["stop"]
    assert main(["stream", "counts", "--top", "1"]) == 0
    out = capsys.readouterr().out
    top_word, top_count = expected.most_common(1)[0]
    assert (
        f"{len(expected):,d} results (word) stored in word_counts, count summing to "
        f"{sum(expected.values()):,d}; the 1 largest:"
    ) in out
    assert re.search(rf"^  {top_word} +{top_count:,d}$", out, re.M), out


def test_stream_status_says_each_live_topologys_health(
    cli_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import datetime as dt

    from flowctl.core.clock import utc_text

    plane = ControlPlane(cli_env)
    plane.ensure_schema()
    # the windows end about now: current (wordcount's windows are 10 s long)
    t0 = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(seconds=15)
    at = [utc_text(t0 + dt.timedelta(seconds=s)) for s in (10, 20, 30)]
    for tid in ("wordcount-blue-s1", "wordcount-green-s2"):
        plane.register_topology(tid, "wordcount", tid.split("-")[1], 2)
    plane.set_state("wordcount-blue-s1", "ACTIVE")
    plane.write_metrics_window("wordcount-blue-s1", t0, t0 + dt.timedelta(seconds=10))
    assert main(["stream", "status"]) == 0
    out = capsys.readouterr().out
    assert f"wordcount-blue-s1  ACTIVE    parallelism=2  HEALTHY at {at[0]}" in out
    assert "wordcount-green-s2  STARTING  parallelism=2  health unknown (no metrics window" in out
    cause = "backlog 40, nothing durable for 61 s; reading the log ends: KafkaTimeoutError"
    plane.write_metrics_window(
        "wordcount-blue-s1", t0 + dt.timedelta(seconds=10), t0 + dt.timedelta(seconds=20),
        health="STALLED", health_cause=cause,
    )  # fmt: skip
    assert main(["stream", "status"]) == 3
    assert f"STALLED at {at[1]}: {cause}" in capsys.readouterr().out
    gap = "rebuild 2 after lost MRWQ items: gap at seq 412; rebuilding, backlog 40"
    plane.write_metrics_window(
        "wordcount-blue-s1", t0 + dt.timedelta(seconds=20), t0 + dt.timedelta(seconds=30),
        health="RECOVERING", health_cause=gap, figures=WindowFigures(rebuilds=1),
    )  # fmt: skip
    assert main(["stream", "status"]) == 0  # a warning: it resolves itself, or stalls
    assert (
        f"wordcount-blue-s1  ACTIVE    parallelism=2 rebuilds=1  RECOVERING at {at[2]}: {gap}"
    ) in capsys.readouterr().out


def test_stream_status_shows_a_window_older_than_two_windows_as_stale(
    cli_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A driver that can store no window (or is gone) leaves its last HEALTHY window
    standing: it is shown as stale, never as current, and the exit code says so."""
    import datetime as dt

    plane = ControlPlane(cli_env)
    plane.ensure_schema()
    plane.register_topology("wordcount-blue-s3", "wordcount", "blue", 2)
    plane.set_state("wordcount-blue-s3", "ACTIVE")
    end = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=45)
    plane.write_metrics_window("wordcount-blue-s3", end - dt.timedelta(seconds=10), end)
    assert main(["stream", "status"]) == 3
    out = capsys.readouterr().out
    assert re.search(
        r"wordcount-blue-s3  ACTIVE    parallelism=2  STALE: no metrics window for 4\d s "
        r"\(windows of 10 s\), health now unknown; the last said HEALTHY at ",
        out,
    ), out


def test_stream_stop_needs_exactly_one_target(
    cli_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["stream", "stop"]) == 1
    assert "give either a topology id or --pipeline NAME" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--lines", "0"], "argument --lines: 0 must be >= 1"),
        (["--watch-seconds", "nan"], "argument --watch-seconds: 'nan' must be >= 0 and finite"),
        (["--feed-rate", "-1"], "argument --feed-rate: -1 must be >= 0"),
    ],
)
def test_demo_up_refuses_bad_numbers_before_starting_anything(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "up", "--home", str(tmp_path), *args])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # no service was started
