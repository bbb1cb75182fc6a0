"""The lanes' one freeze per Spark worker (flowctl.spark.flow.worker_gc), with a fake freeze."""

from __future__ import annotations

import types

from flowctl.spark.flow.worker_gc import freeze_long_lived, freeze_planner


def test_the_second_task_of_a_worker_freezes_once_and_never_again() -> None:
    state = types.ModuleType("fake_worker_state")
    state.tasks, state.frozen = 0, False  # type: ignore[attr-defined]
    calls: list[int] = []

    def freeze() -> None:
        calls.append(state.tasks)  # type: ignore[attr-defined]

    done = [freeze_long_lived(state, freeze) for _ in range(5)]
    # the first task imports and builds the caches; its tuples' garbage is collected after it
    assert done == [False, True, False, False, False]
    assert calls == [2]


def test_the_planner_process_freezes_once_at_its_second_plan() -> None:
    state = types.ModuleType("fake_planner_state")
    state.tasks, state.frozen = 0, False  # type: ignore[attr-defined]
    calls: list[int] = []
    done = [freeze_planner(state, lambda: calls.append(1)) for _ in range(4)]
    assert done == [False, True, False, False] and calls == [1]
