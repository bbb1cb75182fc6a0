"""A recurring event is summed up in one line at most once a minute (fake time)."""

from __future__ import annotations

import pytest

from flowctl.core.log_pacing import QUIET_EVERY_S, Tally


def test_the_first_event_is_due_at_once_then_a_sum_once_a_minute() -> None:
    tally = Tally()
    assert tally.add(0.0, items=2) == (1, {"items": 2}, 0.0)
    due = [tally.add(float(t), items=2) for t in range(1, 61)]  # one flush a second
    assert due[:-1] == [None] * 59
    assert due[-1] == (60, {"items": 120}, QUIET_EVERY_S)
    assert tally.add(61.0, items=2) is None  # counting again from the last summary


def test_a_quiet_spell_makes_the_next_event_due_at_once() -> None:
    tally = Tally(every_s=60.0)
    tally.add(0.0, tuples=1)
    assert tally.add(500.0, tuples=3) == (1, {"tuples": 3}, 500.0)


def test_a_period_that_is_not_positive_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match=r"every_s=0 must be > 0"):
        Tally(every_s=0)
