"""What a long run's processes, database and directories hold, read from outside them.

- :func:`rss_by_role`: resident memory of a job's process tree (by ``/proc``), summed per
  role (the driver's JVM, its Python, the planner, the Python workers) and of named
  service processes (Tansu, memcached);
- :func:`tree_bytes`: a directory's size (the Spark checkpoint);
- :func:`sqlite_bytes`: a SQLite database's size with its journal files;
- :func:`table_rows`: rows per table of the control schema (and of one pipeline);
- :class:`RowsSampler`: one pipeline's ``applied_ranges`` rows, counted often at random
  times;
- :func:`applied_anatomy`: what one pipeline's ``applied_ranges`` rows are, per partition
  (outcomes, one-record rows, and how many a merge would leave).
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from flowctl.adapters import schema
from flowctl.core.applied_rules import coalesce_runs, replaced_by


def _children() -> dict[int, list[int]]:
    """``{ppid: [pid, ...]}`` of every process now."""
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            out.setdefault(ppid, []).append(int(entry))
    return out


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    children = _children()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def rss_kb(pid: int) -> int:
    """The process's resident set (VmRSS, KiB); 0 once it is gone."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def role(pid: int) -> str | None:
    """What a process of a stream job's tree is, by its command line; None for the
    launcher shell (``spark-submit``'s bash) and processes that hold nothing."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    text = b" ".join(argv).decode(errors="replace")
    exe = Path(argv[0].decode(errors="replace")).name if argv and argv[0] else ""
    if exe.startswith("java"):
        return "driver_jvm"
    if "python_streaming_source_runner" in text:
        return "planner"
    if "pyspark.daemon" in text or "pyspark.worker" in text or "pyspark/daemon" in text:
        return "python_workers"
    if exe.startswith("python") and "_stream.py" in text:
        return "driver_python"
    if exe.startswith("python"):
        return "python_other"
    return None


def rss_by_role(job_pid: int | None, services: Mapping[str, int]) -> dict[str, int]:
    """RSS in MiB per role of the job's tree (summed) and of each service's process."""
    kb: dict[str, int] = {}
    if job_pid is not None:
        for pid in descendants(job_pid):
            name = role(pid)
            if name is not None:
                kb[name] = kb.get(name, 0) + rss_kb(pid)
    for name, pid in services.items():
        kb[name] = rss_kb(pid)
    return {name: round(v / 1024, 1) for name, v in sorted(kb.items())}


def tree_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (0 if it does not exist)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += (Path(root) / f).stat().st_size
    return total


def sqlite_bytes(path: Path) -> int:
    """The database file with its WAL and shared-memory files."""
    total = 0
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(OSError):
            total += Path(f"{path}{suffix}").stat().st_size
    return total


def table_rows(engine: sa.Engine, pipeline: str) -> dict[str, int]:
    """Rows per table of the control schema, and ``<table>[pipeline]`` for the tables keyed
    by pipeline (what the measured pipeline holds, history of others left out)."""
    out: dict[str, int] = {}
    inspector = sa.inspect(engine)
    present = set(inspector.get_table_names())
    with engine.connect() as conn:
        for table in schema.metadata.sorted_tables:
            if table.name not in present:
                continue
            out[table.name] = int(
                conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()
            )
            if "pipeline" in table.c:
                mine = (
                    sa.select(sa.func.count())
                    .select_from(table)
                    .where(table.c.pipeline == pipeline)
                )
                out[f"{table.name}[pipeline]"] = int(conn.execute(mine).scalar_one())
    return out


def applied_anatomy(conn: sa.Connection, pipeline: str) -> dict[str, dict[str, Any]]:
    """Per partition of ``pipeline``: its ``applied_ranges`` rows, its durable checkpoint,
    the rows by outcome, the one-record ``applied`` rows, and ``residue``: the rows a merge
    of everything below the checkpoint would leave (:func:`coalesce_runs`).

    A table whose residue stays at a few rows per partition only waits for its merges; a
    residue that grows is rows no merge takes, and the outcomes and sizes say which.
    """
    a, o = schema.applied_ranges, schema.offsets
    checkpoints = {
        (str(t), int(p)): int(n)
        for t, p, n in conn.execute(
            sa.select(o.c.topic, o.c.partition, o.c.next_offset).where(o.c.pipeline == pipeline)
        )
    }
    rows: dict[tuple[str, int], list[tuple[int, int, str]]] = {}
    for t, p, start, end, outcome in conn.execute(
        sa.select(a.c.topic, a.c.partition, a.c.start, a.c.end, a.c.outcome).where(
            a.c.pipeline == pipeline
        )
    ):
        rows.setdefault((str(t), int(p)), []).append((int(start), int(end), str(outcome)))
    out: dict[str, dict[str, Any]] = {}
    for (topic, partition), mine in sorted(rows.items()):
        checkpoint = checkpoints.get((topic, partition), 0)
        merged_away = 0
        for lo, hi in coalesce_runs(mine, checkpoint):
            inside = sum(1 for row in mine if replaced_by(row, (lo, hi)))
            merged_away += inside - 1
        outcomes: dict[str, int] = {}
        for _, _, w in mine:
            outcomes[w] = outcomes.get(w, 0) + 1
        out[f"{topic}:{partition}"] = {
            "rows": len(mine),
            "checkpoint": checkpoint,
            "residue": len(mine) - merged_away,
            "outcomes": outcomes,
            "one_record_applied": sum(1 for s, e, w in mine if w == "applied" and e - s == 1),
            "above_checkpoint": sum(1 for _, e, _ in mine if e > checkpoint),
        }
    return out


class RowsSampler:
    """Counts one pipeline's ``applied_ranges`` rows every 1-3 s (uniformly random), in a
    thread: all of them, per partition, and those ending above their partition's durable
    checkpoint.

    The table is a sawtooth: each partition's merge (every ``[flow] coalesce_every_s``,
    10 s) takes its rows down, flushes build them up again. Samples on a fixed period that
    is a multiple of the merge's (the soak's 30 s) all fall at one phase of it, a phase
    that drifts over an hour: their count measures the phase, not the table. Random
    intervals see every phase alike, so a mean over minutes is the table's time-averaged
    size. The rows above the checkpoint cannot merge yet (tuples applied ahead of an
    earlier one still in flight); the rest can, so the two counts tell a table that holds
    more work in flight from one whose merges leave rows behind.
    """

    #: Seconds between two :func:`applied_anatomy` readings (each reads every row of the
    #: pipeline: a few thousand at most once merged, so once a minute costs nothing).
    ANATOMY_EVERY_S = 60.0

    def __init__(self, engine: sa.Engine, pipeline: str, t0: float, seed: int = 0) -> None:
        a, o = schema.applied_ranges, schema.offsets
        self._pipeline = pipeline
        mine = a.c.pipeline == pipeline
        self._all = sa.select(a.c.partition, sa.func.count()).where(mine).group_by(a.c.partition)
        self._above = (
            sa.select(sa.func.count())
            .select_from(
                a.join(
                    o,
                    sa.and_(
                        o.c.pipeline == a.c.pipeline,
                        o.c.topic == a.c.topic,
                        o.c.partition == a.c.partition,
                    ),
                )
            )
            .where(mine, a.c.end > o.c.next_offset)
        )
        self._engine = engine
        self._t0 = t0
        self._random = random.Random(seed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rows-sampler", daemon=True)
        #: ``[seconds since t0, rows, rows above the checkpoint, {partition: rows}]`` in
        #: time order (per partition: each has its own merge timer, so the total mixes
        #: sawtooths of different phases; one partition's shows its own floor).
        self.samples: list[list[Any]] = []
        #: ``[seconds since t0, applied_anatomy(...)]`` about once a minute.
        self.anatomy: list[list[Any]] = []
        #: Counts that failed (the database busy past its timeout): skipped, not guessed.
        self.errors = 0

    def start(self) -> RowsSampler:
        self._thread.start()
        return self

    def stop(self) -> list[list[Any]]:
        self._stop.set()
        self._thread.join()
        return self.samples

    def _loop(self) -> None:
        next_anatomy = time.time()
        while not self._stop.wait(self._random.uniform(1.0, 3.0)):
            try:
                with self._engine.begin() as conn:  # one snapshot for both counts
                    per = {str(p): int(n) for p, n in conn.execute(self._all)}
                    above = int(conn.execute(self._above).scalar_one())
                    if time.time() >= next_anatomy:
                        next_anatomy = time.time() + self.ANATOMY_EVERY_S
                        anatomy = applied_anatomy(conn, self._pipeline)
                        self.anatomy.append([round(time.time() - self._t0, 2), anatomy])
            except sa.exc.SQLAlchemyError:
                self.errors += 1
                continue
            self.samples.append([round(time.time() - self._t0, 2), sum(per.values()), above, per])
