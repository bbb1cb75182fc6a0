"""SPEC G: the three backoff policies of seed 003 and the retry helper."""

from __future__ import annotations

import itertools
import logging
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowctl.core.backoff import (
    FlumeBackoff,
    HadoopBackoff,
    RetryError,
    TruncatedBinaryBackoff,
    retry,
)

# --- CSMA/CD -------------------------------------------------------------------------


def test_csma_without_jitter_waits_the_top_of_the_range() -> None:
    policy = TruncatedBinaryBackoff(1.0, jitter=False)
    assert list(itertools.islice(policy, 4)) == [1.0, 3.0, 7.0, 15.0]


def test_csma_range_is_truncated_at_ten_collisions() -> None:
    policy = TruncatedBinaryBackoff(1.0, jitter=False)
    assert policy.delay(10) == 1023.0
    assert policy.delay(11) == 1023.0
    assert policy.delay(16) == 1023.0


def test_csma_gives_up_after_sixteen_collisions() -> None:
    policy = TruncatedBinaryBackoff(0.5, jitter=False)
    assert len(list(policy)) == 16
    assert policy.delay(17) is None


def test_csma_jitter_is_reproducible_with_a_seeded_rng() -> None:
    a = list(TruncatedBinaryBackoff(1.0, rng=random.Random(7)))
    b = list(TruncatedBinaryBackoff(1.0, rng=random.Random(7)))
    assert a == b


@settings(max_examples=50)
@given(collision=st.integers(1, 16), seed=st.integers(0, 2**32))
def test_csma_delay_is_a_whole_number_of_slots_in_range(collision: int, seed: int) -> None:
    slot = 0.0000512
    wait = TruncatedBinaryBackoff(slot, rng=random.Random(seed)).delay(collision)
    assert wait is not None
    k = round(wait / slot)
    assert 0 <= k <= 2 ** min(collision, 10) - 1
    assert wait == k * slot


# --- Flume ---------------------------------------------------------------------------


def test_flume_starts_at_250ms_and_doubles_to_the_4s_cap() -> None:
    policy = FlumeBackoff()
    assert list(itertools.islice(policy, 7)) == [0.25, 0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


def test_flume_resets_to_the_start_with_a_fresh_iterator() -> None:
    policy = FlumeBackoff()
    first = iter(policy)
    assert [next(first), next(first), next(first)] == [0.25, 0.5, 1.0]
    assert next(iter(policy)) == 0.25


def test_flume_never_gives_up_unless_bounded() -> None:
    assert FlumeBackoff().delay(10_000) == 4.0
    assert list(FlumeBackoff(max_attempts=2)) == [0.25, 0.5]


def test_flume_rejects_a_start_above_the_cap() -> None:
    with pytest.raises(ValueError, match=r"initial_s=5.*max_s=4"):
        FlumeBackoff(5.0, 4.0)


# --- Hadoop --------------------------------------------------------------------------


def test_hadoop_without_jitter_doubles_from_twice_the_base() -> None:
    assert list(HadoopBackoff(0.1, 3, jitter=False)) == [0.2, 0.4, 0.8]


def test_hadoop_cap_bounds_the_base_time() -> None:
    assert list(HadoopBackoff(1.0, 4, cap_s=5.0, jitter=False)) == [2.0, 4.0, 5.0, 5.0]


def test_hadoop_zero_retries_gives_up_at_once() -> None:
    assert list(HadoopBackoff(1.0, 0)) == []


@pytest.mark.parametrize("bad", [-1, 63, 100])
def test_hadoop_rejects_max_retries_out_of_range(bad: int) -> None:
    with pytest.raises(ValueError, match=f"max_retries = {bad}"):
        HadoopBackoff(1.0, bad)


def test_hadoop_accepts_62_retries() -> None:
    assert HadoopBackoff(1.0, 62, jitter=False).delay(62) == float(2**62)


@settings(max_examples=50)
@given(retry_no=st.integers(1, 20), seed=st.integers(0, 2**32))
def test_hadoop_jitter_stays_within_half_and_one_and_a_half(retry_no: int, seed: int) -> None:
    base = min(0.01 * 2**retry_no, 30.0)
    wait = HadoopBackoff(0.01, 20, cap_s=30.0, rng=random.Random(seed)).delay(retry_no)
    assert wait is not None
    assert 0.5 * base <= wait < 1.5 * base


# --- argument checks -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("factory", "name"),
    [
        (lambda: TruncatedBinaryBackoff(0), "slot_s"),
        (lambda: TruncatedBinaryBackoff(1.0, max_collisions=0), "max_collisions"),
        (lambda: FlumeBackoff(-1.0), "initial_s"),
        (lambda: HadoopBackoff(float("nan"), 3), "base_s"),
        (lambda: HadoopBackoff(1.0, 3, cap_s=0), "cap_s"),
    ],
)
def test_invalid_arguments_name_the_argument(factory, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        factory()


def test_delay_rejects_attempt_zero() -> None:
    with pytest.raises(ValueError, match="attempt must be an int >= 1, got 0"):
        FlumeBackoff().delay(0)


# --- retry ---------------------------------------------------------------------------


class Flaky:
    """Fails ``failures`` times with ``error`` then returns ``"ok"``."""

    def __init__(self, failures: int, error: BaseException | None = None) -> None:
        self.failures = failures
        self.error = error or ConnectionError("broker unreachable")
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "ok"


def test_retry_sleeps_the_policy_delays_then_returns() -> None:
    slept: list[float] = []
    fn = Flaky(3)
    result = retry(fn, FlumeBackoff(), sleep=slept.append, describe="produce to t.eden")
    assert result == "ok"
    assert fn.calls == 4
    assert slept == [0.25, 0.5, 1.0]


def test_retry_gives_up_naming_the_operation_and_attempts() -> None:
    slept: list[float] = []
    fn = Flaky(10)
    with pytest.raises(RetryError, match=r"flush batch 7: gave up after 3 attempt\(s\)") as info:
        retry(fn, HadoopBackoff(0.1, 2, jitter=False), sleep=slept.append, describe="flush batch 7")
    assert info.value.attempts == 3
    assert isinstance(info.value.last_error, ConnectionError)
    assert info.value.__cause__ is info.value.last_error
    assert slept == [0.2, 0.4]


def test_retry_does_not_retry_other_exceptions() -> None:
    fn = Flaky(1, KeyError("bug"))
    with pytest.raises(KeyError):
        retry(fn, FlumeBackoff(), sleep=lambda s: None, retry_on=OSError, describe="x")
    assert fn.calls == 1


def test_retry_max_attempts_bounds_an_endless_policy() -> None:
    slept: list[float] = []
    with pytest.raises(RetryError, match="after 4 attempt"):
        retry(
            Flaky(99), FlumeBackoff(), sleep=slept.append, describe="memcached incr", max_attempts=4
        )
    assert slept == [0.25, 0.5, 1.0]


def test_retry_logs_each_failed_attempt(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="flowctl.core.backoff"):
        retry(Flaky(1), FlumeBackoff(), sleep=lambda s: None, describe="signal stage-2")
    assert "signal stage-2: attempt 1 failed" in caplog.text


def test_retry_requires_a_description() -> None:
    with pytest.raises(ValueError, match="describe"):
        retry(lambda: 1, FlumeBackoff(), sleep=lambda s: None, describe="")
