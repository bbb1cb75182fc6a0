"""SPEC C: water marks (C1) and Algorithm 1's step-by-step backpressure (C2)."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowctl.core.backoff import FlumeBackoff
from flowctl.core.backpressure import (
    ChannelError,
    LocalChannel,
    QueueMonitor,
    RateController,
    Signal,
    WaterMarks,
    sensitivity,
)
from flowctl.core.backpressure_chain import BackpressureChain, StageSpec
from flowctl.core.clock import FakeClock

# --- C1 ------------------------------------------------------------------------------------


def test_water_marks_throttle_above_high_and_release_only_below_low() -> None:
    marks = WaterMarks(low=2, high=8)
    assert [marks.update(n) for n in (5, 9, 5, 2, 1, 5)] == [False, True, True, True, False, False]


def test_water_marks_require_low_below_high() -> None:
    with pytest.raises(ValueError, match="low water mark 8 must be < high water mark 8"):
        WaterMarks(low=8, high=8)


# --- sensitivity ------------------------------------------------------------------------------


def test_sensitivity_is_half_the_time_to_fill_the_queue() -> None:
    assert sensitivity(100, 80, 10.0, 30.0) == 1.0


def test_sensitivity_is_zero_for_a_full_queue_and_capped_for_a_stalled_task() -> None:
    assert sensitivity(100, 120, 10.0, 30.0) == 0.0
    assert sensitivity(100, 90, 0.0, 30.0) == 30.0


# --- one task and its upstream ------------------------------------------------------------------


class FlakyChannel:
    """Fails the first ``failures`` deliveries (False, then ChannelError), then delivers."""

    def __init__(self, inner: LocalChannel, failures: int, raise_error: bool = False) -> None:
        self.inner = inner
        self.failures = failures
        self.raise_error = raise_error
        self.attempts: list[int] = []

    def deliver(self, signal: Signal) -> bool:
        self.attempts.append(signal.seq)
        if self.failures > 0:
            self.failures -= 1
            if self.raise_error:
                raise ChannelError("control plane unreachable")
            return False
        return self.inner.deliver(signal)


def pair(clock: FakeClock, *, channel=None, qml: int = 100, lf: float = 0.8):
    upstream = RateController("process", 100.0, factor=2.0)
    monitor = QueueMonitor(
        "persist",
        "process",
        qml=qml,
        load_factor=lf,
        channel=channel or LocalChannel({"process": upstream}),
        clock=clock,
    )
    return upstream, monitor


def test_overload_schedules_a_signal_after_sensitivity() -> None:
    clock = FakeClock()
    upstream, monitor = pair(clock)
    assert monitor.step(90, 5.0) is None  # sensitivity = (100 - 90) / (2 * 5) = 1 s
    assert monitor.next_due() == 1.0
    clock.set(0.5)
    assert monitor.step(90, 5.0) is None
    assert upstream.rate == 100.0
    clock.set(1.0)
    signal = monitor.step(90, 5.0)
    assert signal is not None and signal.kind == "backpressure"
    assert (upstream.rate, upstream.v_init, upstream.state) == (50.0, 100.0, "backpressure")


def test_at_most_one_signal_per_sensitivity_period() -> None:
    clock = FakeClock()
    _, monitor = pair(clock)
    delivered = []
    for i in range(13):
        clock.set(i * 0.25)
        if monitor.step(90, 5.0) is not None:
            delivered.append(clock.now())
    assert delivered == [1.0, 2.25]


def test_queue_at_the_threshold_does_not_signal() -> None:
    clock = FakeClock()
    _, monitor = pair(clock)
    monitor.step(80, 5.0)
    assert monitor.pending is None


def test_cancel_after_low_load_for_sensitivity_restores_v_init() -> None:
    clock = FakeClock()
    upstream, monitor = pair(clock)
    monitor.step(100, 5.0)  # full: sensitivity 0, delivered at once
    assert upstream.rate == 50.0
    clock.set(1.0)
    monitor.step(10, 5.0)  # low; sensitivity = 90 / 10 = 9 s
    clock.set(9.5)
    assert monitor.step(10, 5.0) is None
    clock.set(10.0)
    cancel = monitor.step(10, 5.0)
    assert cancel is not None and cancel.kind == "cancel"
    assert (upstream.rate, upstream.v_init, upstream.state) == (100.0, None, "normal")
    assert monitor.outstanding == 0


def test_recovery_is_one_step_per_sensitivity_period() -> None:
    clock = FakeClock()
    upstream, monitor = pair(clock)
    monitor.step(100, 5.0)
    clock.set(0.5)
    monitor.step(100, 5.0)
    assert (upstream.rate, upstream.level) == (25.0, 2)
    clock.set(1.0)
    monitor.step(10, 5.0)
    clock.set(10.0)
    monitor.step(10, 5.0)
    assert (upstream.rate, upstream.state, upstream.v_init) == (50.0, "backpressure", 100.0)
    clock.set(15.0)
    monitor.step(10, 5.0)
    assert upstream.rate == 50.0
    clock.set(19.0)
    monitor.step(10, 5.0)
    assert (upstream.rate, upstream.state) == (100.0, "normal")


def test_a_queue_between_the_marks_restarts_the_low_period() -> None:
    clock = FakeClock()
    upstream, monitor = pair(clock)
    monitor.step(100, 5.0)
    clock.set(1.0)
    monitor.step(10, 5.0)
    clock.set(5.0)
    monitor.step(50, 5.0)  # neither high nor low
    clock.set(10.0)
    monitor.step(10, 5.0)
    assert upstream.rate == 50.0
    clock.set(19.0)
    monitor.step(10, 5.0)
    assert upstream.rate == 100.0


def test_no_cancel_when_nothing_was_signalled() -> None:
    clock = FakeClock()
    _, monitor = pair(clock)
    for t in range(0, 100, 10):
        clock.set(float(t))
        assert monitor.step(0, 5.0) is None


def test_undelivered_signal_is_retried_with_backoff() -> None:
    clock = FakeClock()
    upstream = RateController("process", 100.0)
    channel = FlakyChannel(LocalChannel({"process": upstream}), failures=2)
    _, monitor = pair(clock, channel=channel)
    monitor.step(100, 5.0)  # attempt 1 fails: retry in 0.25 s
    assert monitor.next_due() == 0.25
    clock.set(0.25)
    monitor.step(100, 5.0)  # attempt 2 fails: retry in 0.5 s
    assert monitor.next_due() == 0.75
    clock.set(0.75)
    assert monitor.step(100, 5.0) is not None
    assert channel.attempts == [1, 1, 1]
    assert upstream.rate == 50.0


def test_a_channel_error_counts_as_not_delivered() -> None:
    clock = FakeClock()
    upstream = RateController("process", 100.0)
    channel = FlakyChannel(LocalChannel({"process": upstream}), failures=1, raise_error=True)
    _, monitor = pair(clock, channel=channel)
    assert monitor.step(100, 5.0) is None
    assert monitor.state == "signalling"
    clock.set(0.25)
    assert monitor.step(100, 5.0) is not None


def test_a_duplicate_delivery_is_applied_once() -> None:
    upstream = RateController("process", 100.0)
    signal = Signal("backpressure", "persist", "process", 1, 0.0)
    assert upstream.apply(signal) is True
    assert upstream.apply(signal) is False
    assert upstream.level == 1


def test_cancel_without_backpressure_changes_nothing() -> None:
    upstream = RateController("process", 100.0)
    assert upstream.apply(Signal("cancel", "persist", "process", 1, 0.0)) is False
    assert upstream.rate == 100.0


def test_rate_returns_exactly_to_v_init_with_an_awkward_factor() -> None:
    upstream = RateController("process", 100.0, factor=3.0)
    for seq in range(1, 8):
        upstream.apply(Signal("backpressure", "persist", "process", seq, 0.0))
    for seq in range(8, 15):
        upstream.apply(Signal("cancel", "persist", "process", seq, 0.0))
    assert upstream.rate == 100.0


def test_controller_rejects_a_signal_for_another_stage() -> None:
    with pytest.raises(ValueError, match="signal for target 'source' delivered to controller"):
        RateController("process", 1.0).apply(Signal("cancel", "persist", "source", 1, 0.0))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"load_factor": 0.4}, "load_factor must be in"),
        ({"load_factor": 1.0}, "load_factor must be in"),
        ({"qml": 0}, "qml must be an int >= 1, got 0"),
    ],
)
def test_monitor_names_bad_arguments(kwargs: dict, message: str) -> None:
    args = {"qml": 100, "load_factor": 0.8, **kwargs}
    with pytest.raises(ValueError, match=message):
        QueueMonitor("a", "b", channel=LocalChannel({}), clock=FakeClock(), **args)


def test_controller_factor_must_exceed_one() -> None:
    with pytest.raises(ValueError, match="factor v' must be > 1"):
        RateController("s", 10.0, factor=1.0)


def test_signal_round_trips_through_a_dict() -> None:
    signal = Signal("cancel", "persist", "process", 3, 12.5)
    assert Signal.from_dict(signal.to_dict()) == signal
    with pytest.raises(ValueError, match=r"missing field\(s\) \['seq'\]"):
        Signal.from_dict({"kind": "cancel", "sender": "a", "target": "b", "created_at": 0})
    with pytest.raises(ValueError, match="kind must be one of"):
        Signal("stop", "a", "b", 1, 0.0)


# --- chains -----------------------------------------------------------------------------------


def simulate(chain: BackpressureChain, clock: FakeClock, persist_capacity: float, seconds: float):
    """A fluid model of source -> process -> persist; returns the first signal times."""
    queues = {"process": 0.0, "persist": 0.0}
    first: dict[str, float] = {}
    dt = 0.1
    for _ in range(round(seconds / dt)):
        rates = chain.step({k: int(v) for k, v in queues.items()})
        moved = min(rates["process"] * dt, queues["process"])
        queues["process"] += rates["source"] * dt - moved
        queues["persist"] += moved - min(persist_capacity * dt, queues["persist"] + moved)
        queues["persist"] = max(queues["persist"], 0.0)
        for name, level in chain.levels().items():
            if level and name not in first:
                first[name] = clock.now()
        clock.advance(dt)
    return first, queues


def make_chain(clock: FakeClock) -> BackpressureChain:
    stages = [
        StageSpec("source", qml=1, rate=200.0),
        StageSpec("process", qml=1000, rate=200.0),
        StageSpec("persist", qml=1000, rate=200.0),
    ]
    return BackpressureChain(stages, load_factor=0.8, factor=2.0, clock=clock)


def test_pressure_propagates_step_by_step_to_the_source() -> None:
    clock = FakeClock()
    chain = make_chain(clock)
    first, _ = simulate(chain, clock, persist_capacity=50.0, seconds=60.0)
    assert set(first) == {"process", "source"}
    assert first["process"] < first["source"]
    assert chain.controller("persist").level == 0


def test_a_chain_recovers_to_v_init_when_the_sink_speeds_up() -> None:
    clock = FakeClock()
    chain = make_chain(clock)
    simulate(chain, clock, persist_capacity=50.0, seconds=60.0)
    simulate(chain, clock, persist_capacity=10_000.0, seconds=600.0)
    assert chain.rates() == {"source": 200.0, "process": 200.0, "persist": 200.0}
    assert chain.levels() == {"source": 0, "process": 0, "persist": 0}


def test_chain_snapshot_survives_pickle_and_a_new_clock() -> None:
    clock = FakeClock()
    chain = make_chain(clock)
    chain.step({"process": 900, "persist": 900})  # both schedule a signal 0.25 s out
    snap = pickle.loads(pickle.dumps(chain.snapshot()))
    later = FakeClock(5000.0)
    resumed = make_chain(later)
    resumed.restore(snap)
    assert resumed.monitor("persist").next_due() == 5000.25
    later.set(5000.25)
    resumed.step({"process": 900, "persist": 900})
    assert resumed.levels() == {"source": 1, "process": 1, "persist": 0}


def test_chain_step_names_a_missing_queue() -> None:
    chain = make_chain(FakeClock())
    with pytest.raises(ValueError, match=r"missing stage\(s\) \['persist'\]"):
        chain.step({"process": 1})


# --- properties ---------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    loads=st.lists(st.tuples(st.integers(0, 1500), st.integers(0, 1500)), min_size=1, max_size=60),
    factor=st.sampled_from([1.5, 2.0, 3.0]),
)
def test_rates_never_exceed_v_init_and_return_to_it_once_load_drops(
    loads: list[tuple[int, int]], factor: float
) -> None:
    clock = FakeClock()
    stages = [
        StageSpec("source", qml=1, rate=200.0),
        StageSpec("process", qml=1000, rate=120.0),
        StageSpec("persist", qml=1000, rate=80.0),
    ]
    chain = BackpressureChain(
        stages,
        load_factor=0.75,
        factor=factor,
        clock=clock,
        retry_policy=FlumeBackoff(0.25, 1.0),
        max_sensitivity_s=10.0,
    )
    initial = chain.rates()
    for process_q, persist_q in loads:
        rates = chain.step({"process": process_q, "persist": persist_q})
        assert all(rates[n] <= initial[n] for n in initial)
        clock.advance(0.5)
    for _ in range(10_000):
        if chain.levels() == {"source": 0, "process": 0, "persist": 0}:
            break
        rates = chain.step({"process": 0, "persist": 0})
        assert all(rates[n] <= initial[n] for n in initial)
        clock.advance(0.5)
    assert chain.rates() == initial
