"""The slot plan's arithmetic: the jobs that may run at once fit the workers it sizes."""

from __future__ import annotations

import pytest

from flowctl.core.slot_plan import DEFAULT_PLAN, SlotPlan


def test_the_default_plan_fits_three_streams_and_a_reconcile_on_two_workers() -> None:
    # ACTIVE + warm standby + a rescale's green at 2 cores each, a reconcile at 1.
    assert DEFAULT_PLAN.cores_needed() == 3 * 2 + 1
    assert DEFAULT_PLAN.worker_cores() == 4
    assert DEFAULT_PLAN.worker_memory_mb() == 4 * 512
    # The layout (2 workers x 2 slots) could not: a stream and its green filled it.
    assert DEFAULT_PLAN.cores_needed() > 2 * 2


def test_worker_cores_round_up_so_the_need_always_fits() -> None:
    plan = SlotPlan(workers=3, stream_cores=2, streams_at_once=2, batch_at_once=1)
    assert plan.cores_needed() == 5
    assert plan.worker_cores() == 2  # 6 slots >= 5
    assert plan.worker_cores() * plan.workers >= plan.cores_needed()


def test_more_pipelines_need_proportionally_more_slots() -> None:
    two = SlotPlan(pipelines=2)
    assert two.cores_needed() == 2 * DEFAULT_PLAN.cores_needed()
    assert two.worker_cores() == 7


@pytest.mark.parametrize(
    ("field", "value"), [("workers", 0), ("stream_cores", -1), ("batch_cores", True)]
)
def test_a_bad_plan_value_is_refused_by_name(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"slot plan: {field}={value!r} must be an integer >= 1"):
        SlotPlan(**{field: value})  # type: ignore[arg-type]
