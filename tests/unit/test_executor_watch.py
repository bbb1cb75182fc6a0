"""What the driver logs while its application waits for executors (time passed in)."""

from __future__ import annotations

import logging

from flowctl.spark.executor_watch import WARN_AFTER_S, ExecutorWatch

MASTER = "spark://127.0.0.1:7077"


def _watch() -> ExecutorWatch:
    return ExecutorWatch(lambda: 0, MASTER, started_at=100.0, clock=lambda: 0.0)


def test_no_word_while_executors_come_in_time() -> None:
    watch = _watch()
    assert watch.check(100.0 + WARN_AFTER_S - 1, 0) is None
    assert watch.check(100.0 + WARN_AFTER_S - 0.5, 2) is None
    assert watch.done.is_set()


def test_a_job_without_executors_warns_within_30_s_and_again_while_it_waits() -> None:
    watch = _watch()
    level, message = watch.check(100.0 + WARN_AFTER_S, 0) or (None, "")
    assert WARN_AFTER_S <= 30
    assert level == logging.WARNING
    assert message.startswith(
        f"waiting for cluster resources: no executor after {WARN_AFTER_S:.0f} s"
    )
    assert MASTER in message and "slot plan" in message
    assert watch.check(100.0 + WARN_AFTER_S + 1, 0) is None  # not every check
    again = watch.check(100.0 + 2 * WARN_AFTER_S, 0)
    assert again is not None and again[0] == logging.WARNING
    assert not watch.done.is_set()


def test_executors_arriving_after_a_warning_are_logged_once() -> None:
    watch = _watch()
    watch.check(100.0 + WARN_AFTER_S, 0)
    assert watch.check(100.0 + 40, 2) == (logging.INFO, "2 executor(s) registered after 40 s")
    assert watch.done.is_set()
