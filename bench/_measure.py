"""Measurements taken from outside a running job: durable records, progress, latency, a drain.

Every figure comes from what the job made durable (the pipeline's committed offsets in
the database), read the same way for the candidate and the baseline.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench._common import (
    Job,
    Platform,
    old_tree_config,
    pipeline_config,
    save_log,
    settings_of,
    stop,
    submit,
    submit_from_tree,
    unique_name,
)


def committed_total(plat: Platform, pipeline: str, topic: str) -> int:
    """Records durable in the database: the sum of the pipeline's committed offsets."""
    try:
        return sum(plat.plane.committed_offsets(pipeline, topic).values())
    except Exception:  # schema not there yet, or SQLite busy for a moment
        return -1


@dataclasses.dataclass
class Progress:
    """``(monotonic time, durable records)`` samples of a run."""

    samples: list[tuple[float, int]]

    def throughput_after_first_batch(self, total: int) -> tuple[float | None, dict[str, Any]]:
        """Records/s from the first durable progress (the first batch) to the last record."""
        nonzero = [(t, n) for t, n in self.samples if n > 0]
        done = [(t, n) for t, n in self.samples if n >= total]
        if not nonzero or not done:
            return None, {"complete": bool(done)}
        t0, n0 = nonzero[0]
        t1, _ = done[0]
        if t1 <= t0:
            return None, {"complete": True, "first_batch_records": n0}
        return (total - n0) / (t1 - t0), {
            "complete": True,
            "first_batch_records": n0,
            "measured_records": total - n0,
            "measured_s": round(t1 - t0, 3),
        }


def watch_progress(
    plat: Platform,
    job: Job,
    pipeline: str,
    topic: str,
    total: int,
    *,
    timeout_s: float,
    interval_s: float = 0.2,
    on_first_batch: Callable[[Job], None] | None = None,
) -> Progress:
    """Sample the durable record count until ``total`` is reached, the job dies or time is up."""
    samples: list[tuple[float, int]] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        n = committed_total(plat, pipeline, topic)
        samples.append((time.monotonic(), n))
        if on_first_batch is not None and n > 0:
            threading.Thread(target=on_first_batch, args=(job,), daemon=True).start()
            on_first_batch = None
        if n >= total or not job.alive():
            break
        time.sleep(interval_s)
    return Progress(samples)


class OffsetLatency:
    """End-to-end latency per record: producer send time -> its offset durable in the DB.

    A steady producer thread sends ``rate`` records/s and keeps each record's send time
    by ``(partition, offset)``; a poller reads the committed offsets every ``poll_s``
    and stamps every record below a newly committed offset with the poll's time. Both
    jobs are measured by the same code, so the poll resolution (``poll_s``) is the same
    error on both sides.
    """

    def __init__(self, plat: Platform, pipeline: str, topic: str, poll_s: float = 0.05) -> None:
        self.plat = plat
        self.pipeline = pipeline
        self.topic = topic
        self.poll_s = poll_s
        self.sent: dict[tuple[int, int], float] = {}
        self.latencies: list[tuple[float, float]] = []  # (durable at, latency s)
        self.durable: dict[tuple[int, int], float] = {}  # (partition, offset) -> durable at
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._committed: dict[int, int] = {}

    def produce_steady(self, values: Sequence[bytes], rate: float, stamp: bool = True) -> int:
        """Send ``values`` at ``rate`` records/s (in 20 ms slices); returns records acknowledged.

        With ``stamp`` each line starts with its send time (digits are not words).
        """
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.plat.bootstrap, acks=1, linger_ms=2)
        futures = []
        start = time.time()
        for i, value in enumerate(values):
            due = start + i / rate
            delay = due - time.time()
            if delay > 0.02:
                time.sleep(delay)
            sent_at = time.time()
            if stamp:
                value = f"{sent_at:.3f} ".encode() + value
            fut = producer.send(self.topic, value)
            futures.append((fut, sent_at))
            if i % 200 == 0:
                self._collect(futures)
                futures = []
        producer.flush()
        self._collect(futures)
        producer.close()
        return len(self.sent)

    def _collect(self, futures: list[tuple[Any, float]]) -> None:
        for fut, sent_at in futures:
            md = fut.get(timeout=30)
            key = (md.partition, md.offset)
            with self._lock:
                self.sent[key] = sent_at
                # Acks are collected every 200 sends: a record may be durable before its
                # offset is known here; it is counted now, once, at its durable time.
                durable_at = self.durable.get(key)
                if durable_at is not None:
                    self.latencies.append((durable_at, durable_at - sent_at))

    def poll_until(self, total: int | None, timeout_s: float, job: Job) -> None:
        """Poll until ``total`` sent records are durable (``None``: until the timeout), the
        timeout passes or the job exits. ``durable`` keeps every offset's durable time."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and job.alive():
            try:
                committed = self.plat.plane.committed_offsets(self.pipeline, self.topic)
            except Exception:
                committed = {}
            now = time.time()
            with self._lock:
                for p, n in committed.items():
                    before = self._committed.get(p, 0)
                    for off in range(before, n):
                        self.durable[(p, off)] = now
                        sent_at = self.sent.get((p, off))
                        if sent_at is not None:
                            self.latencies.append((now, now - sent_at))
                    if n > before:
                        self._committed[p] = n
                if total is not None and len(self.latencies) >= total:
                    return
            time.sleep(self.poll_s)


def drain_run(
    plat: Platform,
    work: Path,
    topic: str,
    total: int,
    lanes: int,
    *,
    label: str,
    baseline: bool,
    partitions: int = 4,
    batch: int | None = None,
    stream: Mapping[str, object] | None = None,
    flow: Mapping[str, object] | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 240.0,
    on_first_batch: Callable[[Job], None] | None = None,
    master: str = "local[2]",
    rate_source: bool = False,
    tree: Path | None = None,
) -> tuple[float | None, dict[str, Any]]:
    """One job reads all of ``topic`` under a pipeline of its own; records/s after batch 1.

    ``rate_source``: the baseline reads Spark's rate source instead (``--source rate``)
    and its first ``total`` records are timed, by their offsets under ``<topic>.rate``.
    ``tree``: the flow job of another project tree (:func:`export_tree`), with that
    tree's shipped word-count config and package (``stream``, ``flow`` and ``batch`` do
    not apply: its settings are the ones it shipped with), on a database of its own (the
    same broker and memcached).
    """
    from bench.lib.rate_lines import rate_topic

    name = unique_name(label)
    settings = dict(stream or {})
    if batch is not None:
        settings["max_records_per_batch"] = batch
    if tree is not None:
        # its own database: an old tree refuses one of this tree's schema version
        plat = dataclasses.replace(plat, work_dir=work / f"{name}-db")
        plat.work_dir.mkdir()
        config = old_tree_config(tree, work, name, topic)
        job = submit_from_tree(plat, tree, config, f"{name}-1", lanes, env=env, master=master)
    else:
        config = pipeline_config(work, name, partitions=partitions, stream=settings, flow=flow)
        text = config.read_text().replace(f'eden = "{name}.eden"', f'eden = "{topic}"')
        config.write_text(text)
        extra = ["--source", "rate"] if rate_source else []
        job = submit(
            plat, config, f"{name}-1", lanes, baseline=baseline, extra=extra, env=env, master=master
        )
    measured = rate_topic(topic) if rate_source else topic
    try:
        progress = watch_progress(
            plat, job, name, measured, total, timeout_s=timeout_s, on_first_batch=on_first_batch
        )
    finally:
        code = stop(plat, job)
        save_log(job, label)
    rate, info = progress.throughput_after_first_batch(total)
    info["exit_code"] = code
    info["pipeline"] = name
    info["settings"] = settings_of(config)
    t0 = progress.samples[0][0] if progress.samples else 0.0
    info["series"] = [(round(t - t0, 2), n) for t, n in progress.samples]
    info["series_t0"] = t0  # time.monotonic() of the series' 0 (for events timed by a caller)
    return (None if rate is None else round(rate)), info
