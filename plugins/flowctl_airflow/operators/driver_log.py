"""The Spark driver's output as the stream task relays it: short lines, one timestamp.

spark-submit's output becomes the task log line by line, and Airflow stamps
each line itself. A driver line arrives with its own timestamp, level and
logger name (``2026-11-23 21:00:01,123 INFO flowctl.spark.flow: flow
wordcount-blue-manual-2026-11-23t21-00-00-000000-00-00-1: ...``), so the
content started off screen in the log viewer. Here the second timestamp and
our logger names go, and warnings keep their level. Topology ids and paths stay
as they are: a reader copies them into ``flowctl stream stop`` or a shell (an id
once shortened to ``wordcount/blue`` made paths that do not exist).

Each line reaches the task log with its own level: a ``WARN`` from Spark or a
``WARNING`` from flowctl is a warning in Airflow's log view (filtering by level
finds it), the lines of a stack trace take the level of the line that logged
it (an uncaught trace: ERROR), everything else is INFO. The provider's hook
logs every line of spark-submit's output with ``log.info(line)``;
:class:`DriverLogHook` is that hook with a ``log`` that reads each such line's
level (:class:`LevelReader`) and logs it at that level, without the level word.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from flowctl.adapters import driver_jvm
from flowctl.config import Settings

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


def quiet_driver_conf(conf: dict[str, Any] | None, log4j: Path) -> dict[str, Any]:
    """``conf`` with the driver's log4j2 file (``log4j``), log level WARN and JVM set.

    Spark's startup INFO lines (SparkContext, SecurityManager, BlockManager, ...) mean
    nothing to a reader of the task log: the log4j2 file keeps them out from the JVM's
    start, with one timestamp format; the jobs' own lines are Python logging. The driver
    JVM's heap is fixed and reserved at its start, and it maps the class-data sharing
    archive once built (:mod:`flowctl.adapters.driver_jvm`). A value already in ``conf``
    wins (a ``spark.driver.memory`` there sets the fixed heap's size).
    """
    conf = dict(conf or {})
    settings = Settings.from_env()
    memory = conf.get("spark.driver.memory") or settings.spark_driver_memory
    jvm = driver_jvm.driver_conf(str(memory), settings.spark_class_archive)
    jvm["spark.driver.extraJavaOptions"] = (
        f"-Dlog4j2.configurationFile=file:{log4j} {jvm['spark.driver.extraJavaOptions']}"
    )
    return {"spark.log.level": "WARN", **jvm, **conf}


def tidy_line(line: str) -> str:
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
    return line


def tidy_lines(lines: Iterable[str]) -> Iterator[str]:
    """The driver's lines as the task log shows them, without :data:`JVM_NOISE`."""
    for line in lines:
        line = line.rstrip("\n")
        if line not in JVM_NOISE:
            yield tidy_line(line)


#: Level words as flowctl's Python logging and Spark's log4j write them.
LEVELS = {
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "WARNING": logging.WARNING,
    "ERROR": logging.ERROR,
    "CRITICAL": logging.CRITICAL,
    "FATAL": logging.CRITICAL,
}
_LEVEL_WORD = re.compile(r"^(DEBUG|INFO|WARN|WARNING|ERROR|CRITICAL|FATAL):? (?=\S)")
_LOG4J_LEVEL = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (?P<level>[A-Z]+) ")
# A stack trace's lines once spark-submit's relay has stripped their indentation: Java's
# "at ...", "Caused by: ...", "... 12 more"; Python's "Traceback ...", 'File "...", line'.
_TRACE_START = re.compile(
    r"^(Traceback \(most recent call last\)|Caused by: |Exception in thread )"
)
_TRACE_LINE = re.compile(r"^(at |File \"|\.\.\. \d+ more|During handling |The above exception )")


class LevelReader:
    """The level of each tidied driver line (see the module docstring); one per process.

    Stateful: a trace's lines follow the warning or error that logged it, and take its
    level; any other trace (an uncaught exception) is an ERROR, and so is each line
    after it up to the next levelled line (its source lines, the exception's own line).
    """

    def __init__(self) -> None:
        self._level = logging.INFO
        self._just_levelled = False
        self._in_trace = False

    def read(self, raw: str) -> tuple[int, str]:
        """``(level, text)`` of a driver line as spark-submit printed it: the text is
        :func:`tidy_line`'s, without a level word (the level carries it)."""
        line = tidy_line(raw)
        stamped = _PYTHON_LINE.match(raw) or _LOG4J_LEVEL.match(raw)
        word = stamped.group("level") if stamped else None
        match = _LEVEL_WORD.match(line)
        if match:  # "WARNING message", "WARN Class: message", "INFO py4j: message"
            word, line = match.group(1), line[match.end() :]
        if word in LEVELS:
            self._level = LEVELS[word]
            self._just_levelled, self._in_trace = True, False
            return self._level, line
        follows = self._in_trace or self._just_levelled
        if _TRACE_START.match(line) or (follows and _TRACE_LINE.match(line)):
            logged = self._just_levelled and self._level >= logging.WARNING
            if not (self._in_trace or logged):
                self._level = logging.ERROR  # no warning or error logged it: it escaped
            self._in_trace, self._just_levelled = True, False
            return self._level, line
        self._just_levelled = False
        return (self._level if self._in_trace else logging.INFO), line


def relay_line(log: Any, levels: LevelReader, raw: str) -> None:
    """Log one driver line (as spark-submit printed it) at its own level, tidied; the
    JVM's noise is dropped. How a stream task relays its detached driver's log file."""
    line = raw.rstrip("\n")
    if line in JVM_NOISE:
        return
    level, text = levels.read(line)
    getattr(log, logging.getLevelName(level).lower())("%s", text)


class _DriverLines:
    """A hook's logger whose plain ``info(line)`` calls (the relayed driver lines) are
    tidied and logged at their own level; every other call goes to the logger as is."""

    def __init__(self, log: Any) -> None:
        self._log = log
        self._levels = LevelReader()

    def info(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        if args or kwargs or not isinstance(msg, str):
            self._log.info(msg, *args, **kwargs)
            return
        line = msg.rstrip("\n")
        if line in JVM_NOISE:
            return
        level, text = self._levels.read(line)
        getattr(self._log, logging.getLevelName(level).lower())("%s", text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)


class DriverLogHook(SparkSubmitHook):
    """The provider's ``SparkSubmitHook`` relaying the driver's lines tidied and levelled.

    Built from the hook the operator configured (:meth:`adopt`), so every submit
    option stays the provider's; only ``log`` differs.
    """

    _driver_lines: _DriverLines | None = None

    @classmethod
    def adopt(cls, hook: SparkSubmitHook) -> DriverLogHook:
        """This class's hook with ``hook``'s whole configuration."""
        adopted = cls.__new__(cls)
        adopted.__dict__.update(hook.__dict__)
        adopted._driver_lines = _DriverLines(hook.log)
        return adopted

    @property
    def log(self) -> Any:
        """The driver-line relay once adopted; the provider's logger before."""
        return self._driver_lines if self._driver_lines is not None else super().log
