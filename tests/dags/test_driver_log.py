"""The stream task's log: the driver's lines with one timestamp, ids and paths as they are."""

from __future__ import annotations

import logging

from flowctl_airflow.operators.driver_log import (
    DriverLogHook,
    LevelReader,
    tidy_line,
    tidy_lines,
)

TOPOLOGY = "wordcount-blue-manual-2026-11-23t21-00-00-000000-00-00-1"


def test_a_flowctl_info_line_keeps_only_its_message_with_the_full_id() -> None:
    line = (
        f"2026-11-23 21:00:01,123 INFO flowctl.spark.flow: flow {TOPOLOGY}: batch 3: "
        "12 tuple(s) dispatched"
    )
    assert tidy_line(line) == f"flow {TOPOLOGY}: batch 3: 12 tuple(s) dispatched"


def test_a_path_holding_the_id_stays_a_real_path() -> None:
    line = (
        f"spark-submit started detached: keeper pid 7 on h, log /home/drivers/{TOPOLOGY}/driver.log"
    )
    assert tidy_line(line) == line


def test_warnings_keep_their_level_and_other_loggers_their_name() -> None:
    ours = "2026-11-23 21:00:01,123 WARNING flowctl.spark.job: lag unknown: timeout"
    theirs = "2026-11-23 21:00:01,123 ERROR py4j.clientserver: closed"
    assert tidy_line(ours) == "WARNING lag unknown: timeout"
    assert tidy_line(theirs) == "ERROR py4j.clientserver: closed"


def test_spark_lines_lose_their_timestamp_and_other_lines_pass_unchanged() -> None:
    spark = "25/11/23 21:00:01 WARN NativeCodeLoader: Unable to load native-hadoop library"
    assert tidy_line(spark) == "WARN NativeCodeLoader: Unable to load native-hadoop library"
    assert tidy_line("Traceback (most recent call last):") == "Traceback (most recent call last):"
    assert list(tidy_lines(["a\n", f"stop {TOPOLOGY}\n"])) == ["a", f"stop {TOPOLOGY}"]


def test_the_jvm_incubator_notice_is_left_out_and_everything_else_kept() -> None:
    lines = ["WARNING: Using incubator modules: jdk.incubator.vector\n", "WARNING: disk low\n"]
    assert list(tidy_lines(lines)) == ["WARNING: disk low"]


def test_the_drivers_log4j2_file_starts_at_warn() -> None:
    from flowctl_airflow.operators.stream import DRIVER_LOG4J

    settings = dict(
        line.split(" = ", 1) for line in DRIVER_LOG4J.read_text().splitlines() if " = " in line
    )
    assert settings["rootLogger.level"] == "warn"


def test_a_planner_line_keeps_only_its_message_like_the_drivers() -> None:
    line = (
        f"2026-11-23 21:00:01,123 INFO flowctl.spark.flow.planner [planner]: "
        f"lane 1 window 8 -> 7 (SLOW) of {TOPOLOGY}"
    )
    assert tidy_line(line) == f"lane 1 window 8 -> 7 (SLOW) of {TOPOLOGY}"


# -- levels -----------------------------------------------------------------------------------


def _levels(lines: list[str]) -> list[tuple[str, str]]:
    reader = LevelReader()
    return [(logging.getLevelName(level), text) for level, text in map(reader.read, lines)]


def test_spark_and_flowctl_warnings_are_warnings_and_the_rest_info() -> None:
    lines = [
        "25/11/23 21:00:01 WARN ProcessingTimeExecutor: Current batch is falling behind.",
        f"2026-11-23 21:00:01,123 WARNING flowctl.spark.flow: flow lane 1 of {TOPOLOGY}: poison",
        "2026-11-23 21:00:01,123 INFO flowctl.spark.job: batch 0: 3 records",
        "25/11/23 21:00:02 ERROR Executor: Exception in task 0.0",
        "a line nobody levelled",
    ]
    assert _levels(lines) == [
        ("WARNING", "ProcessingTimeExecutor: Current batch is falling behind."),
        ("WARNING", f"flow lane 1 of {TOPOLOGY}: poison"),
        ("INFO", "batch 0: 3 records"),
        ("ERROR", "Executor: Exception in task 0.0"),
        ("INFO", "a line nobody levelled"),
    ]


def test_a_trace_takes_the_level_of_the_line_that_logged_it() -> None:
    lines = [
        "25/11/23 21:00:02 WARN TaskSetManager: Lost task 0.0: java.io.IOException: gone",
        "at org.apache.spark.rdd.RDD.iterator(RDD.scala:1)",
        "Caused by: java.net.SocketException: reset",
        "... 12 more",
        "2026-11-23 21:00:03,000 ERROR flowctl.job: topology failed: boom",
        "Traceback (most recent call last):",
        'File "job.py", line 3, in run',
        "raise ValueError('boom')",
        "ValueError: boom",
        "2026-11-23 21:00:04,000 INFO flowctl.job: Spark stopped in 0.50 s",
    ]
    assert [level for level, _ in _levels(lines)] == [
        *["WARNING"] * 4, *["ERROR"] * 5, "INFO",
    ]  # fmt: skip


def test_a_trace_nobody_logged_is_an_error_even_after_an_info_line() -> None:
    lines = [
        "2026-11-23 21:00:03,000 INFO flowctl.job: topology started",
        "Traceback (most recent call last):",
        'File "stream.py", line 9, in <module>',
        "KeyError: 'x'",
    ]
    assert [level for level, _ in _levels(lines)] == ["INFO", "ERROR", "ERROR", "ERROR"]


def test_the_hook_relays_the_drivers_lines_at_their_level(monkeypatch) -> None:
    """The provider's own relay loop, through the adopted hook's ``log``."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    from structlog.testing import capture_logs

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "local[1]"}')
    hook = DriverLogHook.adopt(SparkSubmitHook(conn_id="spark_default"))
    lines = [
        "WARNING: Using incubator modules: jdk.incubator.vector\n",
        "25/11/23 21:00:01 WARN NativeCodeLoader: Unable to load native-hadoop library\n",
        f"2026-11-23 21:00:01,123 INFO flowctl.spark.job: topology {TOPOLOGY} ACTIVE\n",
    ]
    with capture_logs() as logs:
        hook._process_spark_submit_log(iter(lines))
        hook.log.info("Spark-Submit cmd: %s", "spark-submit x.py")  # the hook's own lines
    relayed = [(entry["log_level"], entry["event"]) for entry in logs]
    assert relayed == [
        ("warning", "NativeCodeLoader: Unable to load native-hadoop library"),
        ("info", f"topology {TOPOLOGY} ACTIVE"),
        ("info", "Spark-Submit cmd: spark-submit x.py"),
    ], relayed
