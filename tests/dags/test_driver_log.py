"""The stream task's log: the driver's lines with one timestamp and a short topology label."""

from __future__ import annotations

from flowctl_airflow.operators.driver_log import tidy_line, tidy_lines, topology_label

TOPOLOGY = "wordcount-blue-manual-2026-11-23t21-00-00-000000-00-00-1"
LABEL = topology_label("wordcount", "blue")


def test_a_flowctl_info_line_keeps_only_its_message_with_the_label() -> None:
    line = (
        f"2026-11-23 21:00:01,123 INFO flowctl.spark.flow: flow {TOPOLOGY}: batch 3: "
        "12 tuple(s) dispatched"
    )
    assert (
        tidy_line(line, TOPOLOGY, LABEL) == "flow wordcount/blue: batch 3: 12 tuple(s) dispatched"
    )


def test_warnings_keep_their_level_and_other_loggers_their_name() -> None:
    ours = "2026-11-23 21:00:01,123 WARNING flowctl.spark.job: lag unknown: timeout"
    theirs = "2026-11-23 21:00:01,123 ERROR py4j.clientserver: closed"
    assert tidy_line(ours, TOPOLOGY, LABEL) == "WARNING lag unknown: timeout"
    assert tidy_line(theirs, TOPOLOGY, LABEL) == "ERROR py4j.clientserver: closed"


def test_spark_lines_lose_their_timestamp_and_other_lines_pass_unchanged() -> None:
    spark = "25/11/23 21:00:01 WARN NativeCodeLoader: Unable to load native-hadoop library"
    assert (
        tidy_line(spark, None, LABEL)
        == "WARN NativeCodeLoader: Unable to load native-hadoop library"
    )
    assert tidy_line("Traceback (most recent call last):", TOPOLOGY, LABEL) == (
        "Traceback (most recent call last):"
    )
    assert list(tidy_lines(["a\n", f"stop {TOPOLOGY}\n"], TOPOLOGY, LABEL)) == [
        "a",
        "stop wordcount/blue",
    ]


def test_the_jvm_incubator_notice_is_left_out_and_everything_else_kept() -> None:
    lines = ["WARNING: Using incubator modules: jdk.incubator.vector\n", "WARNING: disk low\n"]
    assert list(tidy_lines(lines, TOPOLOGY, LABEL)) == ["WARNING: disk low"]


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
    assert tidy_line(line, TOPOLOGY, LABEL) == "lane 1 window 8 -> 7 (SLOW) of wordcount/blue"
