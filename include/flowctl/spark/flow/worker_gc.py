"""Spark's Python workers collect garbage after every task; keep their imports out of it.

PySpark's worker daemon runs a full ``gc.collect()`` in a reused worker after each task
(``pyspark/daemon.py``). A full collection walks every tracked object of the process:
pyspark, pyarrow, kafka-python, flowctl and their caches, some 60,000 objects, tens of
milliseconds each time. With several lanes per micro-batch and a batch every second or
so that was about a third of the workers' CPU in py-spy profiles of the throughput
benchmark (``bench/README.md``, "profile"), on a machine whose two cores the lanes, the
driver and the JVM share.

:func:`freeze_long_lived` moves what is alive when a worker starts its *second* task (by
then the first task has imported everything and built the caches; what it allocated for
its tuples was collected by the daemon after it) into the permanent generation
(``gc.freeze``), which later collections skip. Only the cyclic collector is affected:
frozen objects are still freed when their reference count drops to zero; a frozen
object that later becomes part of an unreachable cycle is not reclaimed, which is why
the freeze happens once per process, on long-lived state, not per task. The lane's
reader (:meth:`~flowctl.spark.flow.reader.FlowStreamReader.read`, executors only) calls
it, never :func:`~flowctl.spark.flow.lane.run_lane`, which tests drive in their own
process.

The planner's process (Spark's source runner) has the same collector and a batch's plan
waits for it: a full collection there walked the imports too, 20-50 ms once every few
dozen batches, the slowest batches' planning (``bench/planning.py``).
:func:`freeze_planner` freezes it once, after its second ``latestOffset`` (the first has
imported everything, connected and built the spout); the reader calls it, never the
planner object itself, which tests drive in their own process.
"""

from __future__ import annotations

import gc
import sys
import types
from collections.abc import Callable
from typing import Protocol, cast

_STATE_MODULE = "flowctl._flow_worker_gc"
_PLANNER_STATE_MODULE = "flowctl._flow_planner_gc"


class GcState(Protocol):
    """What a process's state module holds: its tasks (or calls) seen, whether it froze."""

    tasks: int
    frozen: bool


def _state(module: str = _STATE_MODULE) -> GcState:
    """Per-process state in ``sys.modules`` (a reused worker keeps it between tasks)."""
    state = sys.modules.get(module)
    if state is None:
        state = types.ModuleType(module, "Calls seen and freeze done, per process.")
        vars(state).update(tasks=0, frozen=False)
        sys.modules[module] = state
    # A module answers any attribute: the type checker cannot see the ones set above.
    return cast("GcState", state)


def freeze_long_lived(state: GcState | None = None, freeze: Callable[[], None] = gc.freeze) -> bool:
    """Call at the start of every lane task in a Spark worker: the second call in a
    process freezes what is alive (see the module docstring); returns whether this call
    froze. ``state`` and ``freeze`` are for tests (a fresh state, a fake freeze)."""
    state = _state() if state is None else state
    state.tasks += 1
    if state.frozen or state.tasks < 2:
        return False
    freeze()
    state.frozen = True
    return True


def freeze_planner(state: GcState | None = None, freeze: Callable[[], None] = gc.freeze) -> bool:
    """Call after every ``latestOffset`` in the planner's process: the second call freezes
    what is alive (see the module docstring); returns whether this call froze."""
    return freeze_long_lived(_state(_PLANNER_STATE_MODULE) if state is None else state, freeze)
