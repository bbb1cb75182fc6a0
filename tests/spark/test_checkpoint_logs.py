"""A topology's streaming checkpoint: its offset and commit logs through Hadoop's FileSystem API.

``build_session`` chooses ``FileSystemBasedCheckpointFileManager``
(:data:`flowctl.spark.topology_job.CHECKPOINT_FILE_MANAGER`): Spark's default manager
renames each log file through ``FileContext``, which on the local file system without
Hadoop's native library runs ``readlink`` in a child of the driver JVM for every rename
(two a batch). A real local session runs a micro-batch query twice on one checkpoint: the
logs are written, the second run continues from the first one's last batch, and no child
of the JVM runs ``readlink`` meanwhile.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flowctl.spark.topology_job import CHECKPOINT_FILE_MANAGER, CHECKPOINT_FILE_MANAGER_KEY
from tests.local_spark import local_session

pytestmark = [pytest.mark.spark, pytest.mark.slow]

#: Micro-batches each run of the query waits for.
BATCHES = 4


def _children_of(pid: int) -> dict[int, str]:
    """``{pid: command name}`` of the processes whose parent is ``pid``."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # exited meanwhile
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found[int(entry)] = name
    return found


class ChildWatch:
    """Polls ``/proc`` every few milliseconds for the names of ``pid``'s children.

    A ``readlink`` child lives a few milliseconds; the default manager starts two a batch,
    so over several batches a poll this fast sees them."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.names: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.names.update(_children_of(self.pid).values())
            time.sleep(0.002)

    def __enter__(self) -> ChildWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    with local_session("flowctl-test-checkpoint-logs") as session:
        yield session


def _run_batches(spark: Any, checkpoint: Path) -> list[int]:
    """Run a rate-source query on ``checkpoint`` until :data:`BATCHES` batches ran;
    the ids of the batches it ran."""
    seen: list[int] = []
    query = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 50)
        .load()
        .writeStream.option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="100 milliseconds")
        .foreachBatch(lambda _batch, batch_id: seen.append(batch_id))
        .start()
    )
    try:
        deadline = time.monotonic() + 120
        while len(seen) < BATCHES and query.isActive and time.monotonic() < deadline:
            query.awaitTermination(0.2)
    finally:
        query.stop()
    return seen


def _jvm_pid() -> int:
    """The local session's JVM: the ``java`` child of this process that pyspark started
    (its arguments end in ``pyspark-shell``; a job another test submitted has a script)."""
    javas = [
        pid
        for pid, name in _children_of(os.getpid()).items()
        if name == "java" and b"pyspark-shell" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]
    assert len(javas) == 1, f"expected one pyspark-shell JVM child of the test process: {javas}"
    return javas[0]


def test_checkpoint_logs_are_renamed_without_a_readlink_child(spark: Any, tmp_path: Path) -> None:
    assert spark.conf.get(CHECKPOINT_FILE_MANAGER_KEY) == CHECKPOINT_FILE_MANAGER
    checkpoint = tmp_path / "checkpoint"

    with ChildWatch(_jvm_pid()) as watch:
        first = _run_batches(spark, checkpoint)
        second = _run_batches(spark, checkpoint)

    assert len(first) >= BATCHES and len(second) >= BATCHES
    # The second run starts where the first one's logs end: the logs were written and read.
    # (A batch cut by the stop runs again under its own id.)
    assert second[0] in (first[-1], first[-1] + 1), (first, second)
    logged = {int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()}
    assert set(first[:-1]) <= logged
    assert "readlink" not in watch.names, sorted(watch.names)
