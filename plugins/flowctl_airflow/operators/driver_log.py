"""The Spark driver's output as the stream task relays it: short lines, one timestamp.

spark-submit's output becomes the task log line by line, and Airflow stamps
each line itself. A driver line arrives with its own timestamp, level and
logger name (``2026-11-23 21:00:01,123 INFO flowctl.spark.flow: flow
wordcount-blue-manual-2026-11-23t21-00-00-000000-00-00-1: ...``), so the
content started off screen in the log viewer. Here the second timestamp and
our logger names go, warnings keep their level, and the topology id (up to
~75 characters) becomes a short label such as ``wordcount/blue``; the operator
logs the full id once, at submission.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

# flowctl's Python logging format: "%(asctime)s %(levelname)s %(name)s: %(message)s"; the
# planner process (Spark's source runner) tags its lines "%(name)s [planner]: ".
_PYTHON_LINE = re.compile(
    r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[,.]\d+)? "
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<name>[\w.]+)(?: \[planner\])?: "
    r"(?P<message>.*)$"
)
# Spark's log4j format: "25/11/23 21:00:01 WARN DAGScheduler: ...".
_LOG4J_STAMP = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d ")
#: Lines the JVM prints before any logging is set up, which say nothing to a reader of
#: the task log (Spark 4 enables the Vector API incubator module on Java 17).
JVM_NOISE = ("WARNING: Using incubator modules: jdk.incubator.vector",)


def topology_label(pipeline: str, colour: str) -> str:
    """The short name of a topology in its task log: pipeline and blue-green slot."""
    return f"{pipeline}/{colour}"


def tidy_line(line: str, topology_id: str | None, label: str) -> str:
    """One driver line as the task log shows it (see the module docstring)."""
    match = _PYTHON_LINE.match(line)
    if match:
        level, name, message = match.group("level", "name", "message")
        if name.startswith("flowctl") or name == "__main__":
            line = message if level == "INFO" else f"{level} {message}"
        else:
            line = f"{level} {name}: {message}"
    else:
        line = _LOG4J_STAMP.sub("", line, count=1)
    if topology_id:
        line = line.replace(topology_id, label)
    return line


def tidy_lines(lines: Iterable[str], topology_id: str | None, label: str) -> Iterator[str]:
    """The driver's lines as the task log shows them, without :data:`JVM_NOISE`."""
    for line in lines:
        line = line.rstrip("\n")
        if line not in JVM_NOISE:
            yield tidy_line(line, topology_id, label)
