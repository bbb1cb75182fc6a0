"""The stream job's command line: defaults, and bad arguments named by argparse."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from flowctl.spark.entry import main
from flowctl.spark.job import default_topology_id, parse_args


def test_defaults() -> None:
    args = parse_args([])
    assert (args.pipeline_config, args.colour, args.parallelism, args.poll_seconds) == (
        "wordcount",
        "blue",
        None,
        0.1,
    )
    assert args.topology_id is None and args.checkpoint_dir is None


def test_the_airflow_command_line_parses() -> None:
    args = parse_args(
        ["--topology-id", "wc-green-1", "--colour", "green", "--parallelism", "4",
         "--airflow-run-id", "manual__2026"]
    )  # fmt: skip
    assert (args.topology_id, args.colour, args.parallelism, args.airflow_run_id) == (
        "wc-green-1",
        "green",
        4,
        "manual__2026",
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--colour", "red"], "argument --colour: invalid choice: 'red'"),
        (["--parallelism", "0"], "argument --parallelism: '0' must be >= 1"),
        (["--parallelism", "two"], "argument --parallelism: 'two' is not an integer"),
        (["--poll-seconds", "-1"], "argument --poll-seconds: '-1' must be > 0"),
    ],
)
def test_bad_arguments_are_named(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        parse_args(argv)
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_default_topology_id_is_pipeline_colour_utc_time() -> None:
    when = dt.datetime(2026, 3, 4, 5, 6, 7, 89, tzinfo=dt.UTC)
    assert (
        default_topology_id("wordcount", "green", when) == "wordcount-green-20260304T050607000089"
    )


def test_a_bad_pipeline_config_exits_2_naming_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOWCTL_HOME", str(tmp_path))
    assert main(["--pipeline-config", str(tmp_path / "missing.toml")]) == 2
    assert "missing.toml" in caplog.text and "does not exist" in caplog.text
    last = caplog.records[-1]  # the driver's log ends saying why, at ERROR
    assert last.levelname == "ERROR" and "cannot start" in last.getMessage()


def test_parallelism_outside_the_configured_bounds_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOWCTL_HOME", str(tmp_path))
    with pytest.raises(SystemExit) as info:
        main(["--parallelism", "1000"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--parallelism=1000 is not allowed" in err and "within [1, 16]" in err, err
    assert "wordcount.toml" in err and "[1, 2, 4, 8, 16]" in err, err


@pytest.mark.parametrize("script", ["stream.py", "logetl_stream.py"])
def test_a_parallelism_the_dags_do_not_offer_is_refused_naming_the_script_run(
    script: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.argv", [f"/opt/spark_jobs/{script}"])
    with pytest.raises(SystemExit) as info:
        parse_args(["--parallelism", "3"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (
        f"{script}: error: --parallelism=3 is not allowed: it must be a power of two within "
        f"[1, 16] of {Path(__file__).parents[2] / 'include/pipelines/wordcount.toml'}, "
        "i.e. one of [1, 2, 4, 8, 16]"
    ), err
    assert "wordcount_stream.py" not in err


def test_the_power_of_two_holds_even_when_the_config_cannot_be_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--pipeline-config", str(tmp_path / "gone.toml"), "--parallelism", "6"])
    assert "--parallelism=6 is not allowed" in capsys.readouterr().err
    args = parse_args(["--pipeline-config", str(tmp_path / "gone.toml"), "--parallelism", "64"])
    assert args.parallelism == 64  # the bounds are the job's to report, naming the file


def test_flowctl_ingest_file_passes_skip_empty_through() -> None:
    from flowctl.cli import build_parser

    args = build_parser().parse_args(["ingest", "--file", "x.txt", "--skip-empty"])
    assert (args.file, args.skip_empty) == ("x.txt", True)
    assert build_parser().parse_args(["ingest", "--file", "x.txt"]).skip_empty is False
