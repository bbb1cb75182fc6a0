"""The ends' bench splits a profiled read into the client's parts (bench.planning_ends)."""

from __future__ import annotations

import cProfile
import selectors
import socket

from kafka.record import MemoryRecords, MemoryRecordsBuilder

from bench.planning_ends import profile_parts


def _parse_records() -> int:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    for _ in range(2000):
        builder.append(timestamp=None, key=None, value=b"x" * 50, headers=[])
    builder.close()
    records, n = MemoryRecords(bytes(builder.buffer())), 0
    while records.has_next():
        n += sum(1 for _ in records.next_batch())
    return n


def test_parsing_and_waiting_are_told_apart_and_the_shares_add_up() -> None:
    a, b = socket.socketpair()
    selector = selectors.DefaultSelector()
    selector.register(a, selectors.EVENT_READ)
    profile = cProfile.Profile()
    profile.enable()
    assert _parse_records() == 2000
    selector.select(timeout=0.2)  # nothing to read: the builtin poll waits, called from here
    profile.disable()
    selector.close()
    a.close()
    b.close()
    parts = profile_parts(profile)
    assert parts["kafka-python record parsing"] > 0.0
    assert parts["waiting in the selector"] > 0.0
    assert abs(sum(parts.values()) - 1.0) < 0.01


def test_cpu_seconds_sum_a_roles_ticks_over_the_spans_of_one_phase_unrounded() -> None:
    """Spans of a few milliseconds: the sum of their ticks, not of rounded shares."""
    import os

    from bench._profile import CpuPhases

    hz = os.sysconf("SC_CLK_TCK")
    phases = CpuPhases()
    ticks = [(0, 0), (1, 0), (3, 1), (3, 1), (4, 1)]  # (Tansu, lanes) at each mark
    for name, (broker, lanes), t in zip(
        ["feed", "read", "feed", "read", "end"],
        ticks,
        [0.0, 0.001, 0.003, 0.004, 0.006],
        strict=True,
    ):
        phases.marks.append(
            (name, t, {7: ("broker (Tansu)", broker), 8: ("lanes (Spark Python workers)", lanes)})
        )
    assert (
        phases.cpu_seconds("broker (Tansu)", "read") == 3 / hz
    )  # 2 ticks in the first read, 1 in the second
    assert phases.cpu_seconds("broker (Tansu)", "feed") == 1 / hz
    assert phases.cpu_seconds("lanes (Spark Python workers)", "read") == 1 / hz
