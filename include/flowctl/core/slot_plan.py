"""The slot plan of a Spark standalone cluster: how many cores each kind of job takes.

The standalone master gives an application up to ``spark.cores.max`` cores and queues
the rest: an application that gets none waits, its first job stuck behind ``Initial job
has not accepted any resources``. With every application taking both workers' slots, a
stream and its green filled the four slots of the 2 x 2 layout, and a reconcile (or the
green of a rescale beside a warm standby) waited for ever: the rescale rolled back.

The plan fixes each job's share and sizes the workers so that the jobs that may run at
the same time always fit:

- a stream topology (blue, a green, a warm standby) takes :attr:`SlotPlan.stream_cores`
  cores, whatever its parallelism: one single-core executor per worker, so it spreads
  over both; its lanes are tasks, and more lanes than cores run in turns;
- a batch job (reconcile) takes :attr:`SlotPlan.batch_cores`;
- at most :attr:`SlotPlan.streams_at_once` streams of a pipeline run at once: the
  ACTIVE one, a warm standby, and a green started beside it (a replacement takes the
  standby as green when it can; the next standby starts only once blue has stopped);
- at most :attr:`SlotPlan.batch_at_once` batch jobs.

The cluster's layout (``flowctl.services.cluster_layout``) and the compose file take
their worker cores and memory from :meth:`SlotPlan.worker_cores` and
:meth:`SlotPlan.worker_memory_mb`; the submitting operators set ``spark.cores.max``.
docs/deployment.md has the plan as a table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class SlotPlan:
    """Cores per job and the jobs that may run at once, for ``pipelines`` pipelines."""

    workers: int = 2
    stream_cores: int = 2
    batch_cores: int = 1
    streams_at_once: int = 3
    batch_at_once: int = 1
    executor_memory_mb: int = 512
    pipelines: int = 1

    def __post_init__(self) -> None:
        for name in (
            "workers",
            "stream_cores",
            "batch_cores",
            "streams_at_once",
            "batch_at_once",
            "executor_memory_mb",
            "pipelines",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"slot plan: {name}={value!r} must be an integer >= 1")

    def cores_needed(self) -> int:
        """Cores of every job that may run at once, on all pipelines."""
        per_pipeline = (
            self.streams_at_once * self.stream_cores + self.batch_at_once * self.batch_cores
        )
        return per_pipeline * self.pipelines

    def worker_cores(self) -> int:
        """Cores (slots) each worker offers: the need spread evenly, rounded up."""
        return math.ceil(self.cores_needed() / self.workers)

    def worker_memory_mb(self) -> int:
        """Memory each worker offers: one executor of ``executor_memory_mb`` per slot
        (every executor has one core)."""
        return self.worker_cores() * self.executor_memory_mb


#: The plan of ``flowctl cluster`` and docker-compose.yaml: 2 workers x 4 slots x 2 GB.
DEFAULT_PLAN = SlotPlan()
