"""Helpers of the flow-controlled topology tests (tests/spark and tests/faults).

A module of its own, not a test module: the fault suite imports these, and importing a
test module would collect its tests a second time under another name.

:class:`Flow` starts topologies with ``spark-submit`` (:mod:`bench.lib.submit`, what
the benchmarks use too); :func:`flow_config` gives each test a pipeline of its own (a
renamed copy of a shipped config, so its topics never meet another test's on the
session's broker) with test-sized settings.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import sqlalchemy as sa

from bench.lib.derive import derive_config
from bench.lib.submit import LocalJob, job_env, submit_stream
from flowctl.adapters import kafka_ends, kafka_log, results
from flowctl.adapters.control_plane import ControlPlane
from flowctl.adapters.db import DatabaseUnavailable
from flowctl.config import Settings

WORDS = ["alpha", "Beta", "gamma", "DELTA", "épée", "zeta", "eta", "theta", "iota", "kappa"]

#: [flow] values every test config starts from: small tuples and windows, quick windows.
FLOW_DEFAULTS = {
    "w_init": 4,
    "w_max": 24,
    "latency_target_s": 2.0,
    "linger_s": 0.5,
    "flush_update_time_s": 0.5,
    "metrics_window_s": 2.0,
    "tuple_timeout_s": 10.0,
    "gap_grace_s": 2.0,
    "replay_backoff_initial_s": 0.2,
    "replay_backoff_max_s": 0.5,
}


def lines(n: int, seed: int, prefix: str = "") -> list[str]:
    rng = random.Random(seed)
    return [
        f"{prefix}" + " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) + f", {i}!"
        for i in range(n)
    ]


def flow_config(
    tmp_path: Path,
    name: str,
    *,
    definition: str = "flowctl.pipelines.wordcount",
    partitions: int = 3,
    tuple_size: int = 50,
    flow: Mapping[str, object] | None = None,
    shipped: str = "wordcount",
    scaling: Mapping[str, object] | None = None,
    topics: Mapping[str, object] | None = None,
) -> Path:
    """The shipped ``shipped`` config renamed ``name``, with test-sized settings
    (``scaling``: the ``[scaling]`` keys a replacement test sizes, e.g. its timeouts;
    ``topics``: more ``[topics]`` keys, e.g. ``on_data_loss``)."""
    return derive_config(
        tmp_path,
        name,
        shipped=shipped,
        definition=definition if shipped == "wordcount" else None,
        sections={
            "topics": {"partitions": partitions, **(topics or {})},
            "stream": {"trigger_interval_s": 0.5, "tuple_size": tuple_size},
            "flow": {**FLOW_DEFAULTS, **(flow or {})},
            **({"scaling": dict(scaling)} if scaling else {}),
        },
    )


@dataclass
class Flow:
    """Starts flow-controlled jobs against the session's broker and memcached."""

    settings: Settings
    database_url: str
    work_dir: Path
    jobs: list[LocalJob] = field(default_factory=list)

    def submit(
        self, config: Path, topology_id: str, lanes: int, *extra: str, master: str = "local[2]"
    ) -> LocalJob:
        """``master``: ``local[2,4]`` retries a failed task up to 4 times, as an executor's
        loss is retried on a cluster (``local[2]`` fails the batch at the first)."""
        self.plane.ensure_schema()  # so the test can read results before the job is up
        job = submit_stream(
            config,
            topology_id,
            lanes,
            env=job_env(self.settings, self.database_url),  # test definitions live in tests/
            log_dir=self.work_dir,
            extra=extra,
            master=master,
        )
        self.jobs.append(job)
        return job

    def kill_leftovers(self) -> None:
        """SIGKILL every job this harness started that still runs (a test that failed
        before stopping its job must not leave Spark running on the machine)."""
        for job in self.jobs:
            job.kill_hard()

    @property
    def plane(self) -> ControlPlane:
        return ControlPlane(self.database_url)

    def state(self, topology_id: str) -> str | None:
        try:
            return self.plane.get_topology(topology_id).state
        except Exception:  # not registered yet, or the database is away on purpose
            return None

    def stop(self, job: LocalJob, topology_id: str) -> None:
        assert job.topology_id == topology_id, (job.topology_id, topology_id)
        code = job.stop(self.database_url, timeout_s=120)
        assert code == 0, job.log_tail()
        assert self.state(topology_id) == "STOPPED"


def wait_for(condition: Callable[[], bool], *, timeout_s: float, job: LocalJob, what: str) -> None:
    """Poll ``condition()``; fail with the job's log if it exits or time runs out.

    A database error while polling counts as "not yet": the job has not created the
    schema yet, or the test has taken the database away on purpose.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except (sa.exc.OperationalError, DatabaseUnavailable):
            pass
        if job.process.poll() is not None:
            pytest.fail(
                f"job exited ({job.process.returncode}) waiting for {what}; log:\n{job.log_tail()}"
            )
        time.sleep(0.5)
    job.kill_hard()
    pytest.fail(f"timed out after {timeout_s} s waiting for {what}; log:\n{job.log_tail()}")


def read_topic(bootstrap: str, topic: str) -> list[bytes]:
    """Every record value of ``topic`` (all partitions)."""
    consumer = kafka_log.new_consumer(bootstrap)
    try:
        latest = kafka_ends.latest_offsets(consumer, topic)
        values: list[bytes] = []
        for partition, end in latest.items():
            values.extend(r.value for r in kafka_log.read_range(consumer, topic, partition, 0, end))
        return values
    finally:
        consumer.close()


def counted(flow: Flow, pipeline: str) -> dict[str, int]:
    return results.word_counts(flow.database_url, pipeline)


def mrwq_length(settings: Settings, pipeline: str) -> int:
    """Items waiting in the pipeline's MRWQ, read from memcached like the planner does."""
    from flowctl.adapters.memcached_store import MemcachedStore
    from flowctl.core.persistence import mrwq_namespace, queue_length

    store = MemcachedStore(settings.memcached_address)
    return queue_length(store, mrwq_namespace(pipeline)) or 0


def rename_database(admin: sa.Engine, old: str, new: str) -> None:
    """Rename a PostgreSQL database, terminating the sessions that keep it busy."""
    deadline = time.monotonic() + 30
    while True:
        with admin.connect() as conn:
            conn.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = :name AND pid <> pg_backend_pid()"
                ),
                {"name": old},
            )
            try:
                conn.execute(sa.text(f'ALTER DATABASE "{old}" RENAME TO "{new}"'))
                return
            except sa.exc.OperationalError:
                if time.monotonic() > deadline:
                    raise
        time.sleep(0.05)
