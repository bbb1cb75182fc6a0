"""Where a running job's machine time goes: its processes by role, CPU shares, py-spy stacks."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench._common import Job
from bench.lib.submit import VENV_BIN
from flowctl.services.process import process_tree


def job_python_processes(job: Job) -> dict[str, int]:
    """``{"driver": pid, "daemon": pid, "planner": pid}`` among the job's descendants (when
    found): the driver's Python, the lanes' worker daemon and the source runner (the
    planner), which Spark starts as a daemon of its own module, so it must not be taken
    for the lanes' daemon."""
    found: dict[str, int] = {}
    for pid in reversed(process_tree(job.process.pid)):
        with contextlib.suppress(OSError):
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            is_script = "spark_jobs/" in cmd or "bench/jobs/" in cmd  # stream or baseline job
            if is_script and "python" in cmd and "java" not in cmd.split()[0]:
                found.setdefault("driver", pid)
            elif "streaming_source_runner" in cmd:
                found.setdefault("planner", pid)
            elif "pyspark.daemon" in cmd:
                found.setdefault("daemon", pid)
    return found


#: Roles of the machine's processes for :func:`cpu_shares`, by a piece of their command
#: line, first match wins: the job's parts, the services it uses, the profiler.
CPU_ROLES: tuple[tuple[str, str], ...] = (
    ("pyspark.daemon", "lanes (Spark Python workers)"),
    ("streaming_source_runner", "planner (source runner)"),
    ("SparkSubmit", "driver (JVM)"),  # before the script's path, which its command line holds
    ("spark_jobs/", "driver (Python)"),
    ("bench/jobs/", "driver (Python)"),  # the baseline job
    ("kafka.Kafka", "broker (Apache Kafka)"),
    ("tansu", "broker (Tansu)"),
    ("memcached", "memcached"),
    ("py-spy", "profiler"),
)


def _cpu_ticks(
    roles: tuple[tuple[str, str], ...] = CPU_ROLES,
) -> dict[int, tuple[str, int]]:
    """``{pid: (role, utime + stime ticks)}`` of every process now."""
    out: dict[int, tuple[str, int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            # a process without a command line is the kernel's (kworker, kswapd, khugepaged):
            # work the others cause (writeback, reclaim), told apart from user processes
            other = "other" if cmd else "other (kernel threads)"
            role = next((r for key, r in roles if key in cmd), other)
            out[int(entry.name)] = (role, int(fields[11]) + int(fields[12]))
    return out


class CpuPhases:
    """CPU shares by role between named moments of a run (:func:`cpu_shares` over phases
    of unknown length): :meth:`mark` at each moment, :meth:`shares` afterwards."""

    def __init__(self, roles: tuple[tuple[str, str], ...] = CPU_ROLES) -> None:
        self.roles = roles
        self.marks: list[tuple[str, float, dict[int, tuple[str, int]]]] = []

    def mark(self, name: str) -> None:
        self.marks.append((name, time.monotonic(), _cpu_ticks(self.roles)))

    def spans(self) -> list[tuple[str, str, dict[str, Any]]]:
        """``[(from, to, {"seconds", "busy", "shares": {role: share of all cores}})]``
        between consecutive marks."""
        hz, cores = os.sysconf("SC_CLK_TCK"), os.cpu_count() or 1
        out: list[tuple[str, str, dict[str, Any]]] = []
        for (a, t_a, before), (b, t_b, after) in zip(self.marks, self.marks[1:], strict=False):
            used: Counter[str] = Counter()
            for pid, (role, ticks) in after.items():
                used[role] += ticks - before.get(pid, (role, 0))[1]
            capacity = max(t_b - t_a, 1e-9) * cores
            figures = {
                "seconds": round(t_b - t_a, 1),
                "busy": round(sum(used.values()) / hz / capacity, 3),
                "shares": {r: round(n / hz / capacity, 3) for r, n in used.most_common(8)},
            }
            out.append((a, b, figures))
        return out

    def shares(self) -> dict[str, dict[str, Any]]:
        """``{"<from> -> <to>": {"seconds", "busy", "shares": {role: share of all cores}}}``."""
        return {f"{a} -> {b}": figures for a, b, figures in self.spans()}

    def cpu_seconds(self, role: str, phase: str) -> float:
        """CPU seconds ``role`` used over every span that starts at a mark named ``phase``,
        unrounded (:meth:`spans` rounds a span's seconds to 0.1 s, too coarse for spans of
        a few milliseconds summed over many)."""
        ticks = 0
        for (a, _, before), (_, _, after) in zip(self.marks, self.marks[1:], strict=False):
            if a != phase:
                continue
            for pid, (r, n) in after.items():
                if r == role:
                    ticks += n - before.get(pid, (r, 0))[1]
        return ticks / os.sysconf("SC_CLK_TCK")


def cpu_shares(seconds: float) -> dict[str, Any]:
    """Where the machine's CPU went over the next ``seconds``, by role (:data:`CPU_ROLES`).

    Every process's user + system time is read from ``/proc`` before and after (a
    process that ends in between is not counted); shares are of all cores' time, so they
    say how much of the machine each part of the job takes.
    """
    hz = os.sysconf("SC_CLK_TCK")
    before, t0 = _cpu_ticks(), time.monotonic()
    time.sleep(seconds)
    after, elapsed = _cpu_ticks(), time.monotonic() - t0
    used: Counter[str] = Counter()
    for pid, (role, ticks) in after.items():
        used[role] += ticks - before.get(pid, (role, 0))[1]
    capacity = elapsed * (os.cpu_count() or 1)
    shares = {role: round(ticks / hz / capacity, 3) for role, ticks in used.most_common()}
    return {"seconds": round(elapsed, 1), "cores": os.cpu_count(), "shares": shares,
            "busy": round(sum(used.values()) / hz / capacity, 3)}  # fmt: skip


def py_spy(job: Job, seconds: float, out_dir: Path, name: str) -> dict[str, Any]:
    """Sample the job's driver and Spark Python workers with py-spy for ``seconds``.

    Returns, per process kind, the number of samples and the top leaf frames (where
    the time is spent) and top frames by inclusive share; raw stacks stay in
    ``out_dir``.
    """
    pids = job_python_processes(job)
    procs = {}
    for kind, pid in pids.items():
        raw = out_dir / f"{name}-{kind}.txt"
        cmd = [str(VENV_BIN / "py-spy"), "record", "--pid", str(pid), "--duration"]
        cmd += [str(int(seconds)), "--format", "raw", "--output", str(raw), "--nonblocking"]
        if kind != "driver":  # a daemon forks its workers
            cmd.append("--subprocesses")
        procs[kind] = (
            subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT),
            raw,
        )
    summary: dict[str, Any] = {}
    for kind, (proc, raw) in procs.items():
        proc.wait(timeout=seconds + 60)
        summary[kind] = {"pid": pids[kind], **summarize_stacks(raw)}
    return summary


#: Where a sample's time goes, by the frames of its stack: the first category (in this
#: order) one of whose pieces appears in any frame of the stack. The order puts the
#: specific before the general: JSON inside an MRWQ write counts as JSON, kafka-python's
#: record parsing inside the lane's fetch as unpacking, and the lane's and Spark's own
#: frames (ancestors of nearly every stack) take only what nothing else claims.
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("JSON encoding/decoding", ("json/",)),
    ("memcached (MRWQ, feedback, channels)", ("memcached_store.py", "pymemcache/")),
    ("SQL (SQLAlchemy, sqlite3)", ("sqlalchemy/", "sqlite3/")),
    ("Kafka record unpacking (kafka-python)", ("kafka/record/", "_unpack_records")),
    ("Kafka fetch (kafka-python client, protocol)", ("kafka/",)),
    # the lanes' librdkafka reader: its consume() (fetching and parsing in C) and the
    # Records it builds, both on the lines of its read_range
    ("Kafka read (librdkafka reader: consume, Records)", ("kafka_read_rdkafka.py",)),
    ("word counting", ("wordcount.py",)),
    ("MRWQ fold of results", ("sink_rules.py",)),
    ("threads waiting (pools, selectors)", ("threading.py", "concurrent/futures", "selectors.py")),
    ("flowctl's own (lane, planner, driver bookkeeping)", ("flowctl/",)),
    ("Spark's Python worker (rows, Arrow, protocol)", ("pyspark/",)),
)


def categorize(stacks: dict[str, int]) -> dict[str, float]:
    """Each category's share of the samples (:data:`CATEGORIES`, ``other`` for the rest),
    from ``{stack: samples}``."""
    counts: Counter[str] = Counter()
    for stack, n in stacks.items():
        category = next(
            (name for name, pieces in CATEGORIES if any(p in stack for p in pieces)), "other"
        )
        counts[category] += n
    total = sum(counts.values())
    return {name: round(n / total, 3) for name, n in counts.most_common()} if total else {}


def summarize_stacks(raw: Path, top: int = 12) -> dict[str, Any]:
    leaf: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    stacks: dict[str, int] = {}
    total = 0
    with contextlib.suppress(OSError):
        for line in raw.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            n = int(count)
            frames = [f for f in stack.split(";") if f]
            if not frames:
                continue
            total += n
            stacks[stack] = stacks.get(stack, 0) + n
            leaf[frames[-1]] = leaf.get(frames[-1], 0) + n
            for f in set(frames):
                inclusive[f] = inclusive.get(f, 0) + n

    def ranked(d: dict[str, int]) -> list[list[Any]]:
        rows = sorted(d.items(), key=lambda kv: -kv[1])[:top]
        return [[f, round(n / total, 3)] for f, n in rows] if total else []

    return {
        "samples": total,
        "categories": categorize(stacks),
        "top_leaf": ranked(leaf),
        "top_inclusive": ranked(inclusive),
    }


#: The job's line of Spark's micro-batch phases (flowctl.spark.job.StreamJob._log_batch_phases).
PHASES = re.compile(r"Spark micro-batches up to batch (\d+), ms p50/p99: (.*)$", re.MULTILINE)


def batch_phases(log: Path) -> str | None:
    """The last "Spark micro-batches" line of a run's log (batches up to the stop): where
    each batch's time goes in Spark (walCommit, latestOffset, addBatch, commitOffsets...)."""
    try:
        found = PHASES.findall(log.read_text(errors="replace"))
    except OSError:
        return None
    return f"up to batch {found[-1][0]}: {found[-1][1]}" if found else None
