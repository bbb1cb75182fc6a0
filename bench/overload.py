"""Sustained overload: latency curves of the flow-controlled job vs the baseline.

Issue 4's third target: both jobs run the word count with every record's counting
slowed on purpose (``FLOWCTL_BENCH_LANE_DELAY``, the same sleep in both jobs), so a
job with ``--lanes`` lanes takes about ``lanes * 1000 / ms`` records/s; the producer
sends ``--overload`` times that for ``--seconds`` (2 minutes by default). Each
record is timed three times, from outside the jobs and by the same code for both:

- *sent*: the producer's send time;
- *admitted*: when a micro-batch that reads it was planned (the modification time of
  the batch's file in Spark's offset log under the job's checkpoint: the baseline's
  end offsets, the flow job's plan of tuples; Eden offsets only);
- *durable*: when its offset is committed in the database (polled every 50 ms).

Two latencies follow. *send -> durable* must grow for any job under sustained
overload: the backlog waits in Kafka, at the rate the input exceeds the capacity.
*admitted -> durable* (in-system latency) is what flow control bounds: the windows
admit what the lanes finish within ``latency_target_s``, while the baseline admits a
fixed ``max_records_per_batch`` whatever the lanes' speed. Each curve is reported per
``--window`` seconds of durable time (p50, p99, records).

    flock /tmp/flowctl-heavy.lock .venv/bin/python -m bench.overload \
        [--seconds 120] [--lanes 2] [--ms 0.5] [--overload 2]

Writes bench/results/overload.json and overload.png; exits 1 if the target is missed:
the flow job's in-system p99 stays bounded (the last minute's worst window at most
1.5x the first minute's worst) and below the baseline's.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench._common import (
    Platform,
    pipeline_config,
    platform_up,
    save_log,
    settings_of,
    stop,
    submit,
    unique_name,
)
from bench._experiment import (
    BENCH,
    RESULTS,
    BadArgument,
    experiment_parser,
    percentile,
    pyplot,
    ratio,
    run_experiment,
    save_figure,
    write_result,
)
from bench._measure import OffsetLatency, committed_total
from bench.latency import WARMUP, timestamped_lines
from flowctl.adapters import kafka_log
from flowctl.config import PROJECT_ROOT

TARGET_GROWTH = 1.5


class AdmissionWatch:
    """When each Eden offset was first admitted, read from the job's Spark offset log.

    Spark writes ``<checkpoint>/offsets/<batch id>`` when it plans a batch, before the
    batch runs. Its third line is the source's offset JSON: ``{"offsets": {p: end}}``
    for the plain source, ``{"plan": [[lane, topic, partition, start, end, ...]]}``
    for the flow source. Both admit each Eden partition in offset order, so a
    watermark per partition says which offsets a batch admitted first.
    """

    def __init__(self, offsets_dir: Path, topic: str, poll_s: float = 0.05) -> None:
        self.dir = offsets_dir
        self.topic = topic
        self.poll_s = poll_s
        self.admitted: dict[tuple[int, int], float] = {}
        self._mark: dict[int, int] = {}
        self._seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> AdmissionWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _ends(self, source: dict[str, Any]) -> dict[int, int]:
        if "offsets" in source:
            return {int(p): int(n) for p, n in source["offsets"].items()}
        ends: dict[int, int] = {}
        for row in source.get("plan", []):
            _lane, topic, partition, _start, end = row[:5]
            if topic == self.topic:
                ends[int(partition)] = max(ends.get(int(partition), 0), int(end))
        return ends

    def scan(self) -> None:
        if not self.dir.is_dir():
            return
        batches = [f for f in self.dir.iterdir() if f.name.isdigit()]
        for f in sorted(batches, key=lambda f: int(f.name)):
            if f.name in self._seen:
                continue
            try:
                lines = f.read_text().splitlines()
                stamp = f.stat().st_mtime
                source = json.loads(lines[2])
            except (OSError, IndexError, ValueError):
                continue  # being written: next scan
            self._seen.add(f.name)
            for p, end in self._ends(source).items():
                for off in range(self._mark.get(p, 0), end):
                    self.admitted[(p, off)] = stamp
                self._mark[p] = max(self._mark.get(p, 0), end)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.scan()
            time.sleep(self.poll_s)


def curves(
    sent: dict[tuple[int, int], float],
    admitted: dict[tuple[int, int], float],
    durable: dict[tuple[int, int], float],
    started: float,
    window_s: float,
) -> list[dict[str, Any]]:
    """Per window of durable time: records, send->durable and admitted->durable p50/p99."""
    buckets: dict[int, list[tuple[float, float | None]]] = {}
    for key, done in durable.items():
        if key not in sent:
            continue  # warm-up records
        total = done - sent[key]
        inside = done - admitted[key] if key in admitted else None
        buckets.setdefault(int((done - started) // window_s), []).append((total, inside))
    rows = []
    for k, values in sorted(buckets.items()):
        totals = [t for t, _ in values]
        insides = [i for _, i in values if i is not None]
        rows.append(
            {
                "end_s": round((k + 1) * window_s, 1),
                "records": len(values),
                "send_p50_ms": round(percentile(totals, 50) * 1000, 1),
                "send_p99_ms": round(percentile(totals, 99) * 1000, 1),
                "inside_p50_ms": None if not insides else round(percentile(insides, 50) * 1000, 1),
                "inside_p99_ms": None if not insides else round(percentile(insides, 99) * 1000, 1),
            }
        )
    return rows


def measure(plat: Platform, work: Path, lanes: int, *, baseline: bool, args: Any) -> dict:
    """One job on its own pipeline: warm up, overload for ``args.seconds``, stop."""
    name = unique_name("ovl")
    config = pipeline_config(work, name)
    topic = f"{name}.eden"
    kafka_log.ensure_topics(plat.bootstrap, {topic: 4})
    kafka_log.produce(plat.bootstrap, topic, timestamped_lines(WARMUP, args.seed + 1000))
    env = {
        "FLOWCTL_BENCH_LANE_DELAY": f"{args.ms},0,1",
        "PYTHONPATH": f"{BENCH / 'inject'}:{PROJECT_ROOT}",
    }
    topology = f"{name}-1"
    job = submit(plat, config, topology, lanes, baseline=baseline, env=env)
    meter = OffsetLatency(plat, name, topic)
    watch = AdmissionWatch(plat.settings.home / "checkpoints" / topology / "offsets", topic)
    rate = args.overload * lanes * 1000.0 / args.ms
    total = int(rate * args.seconds)
    try:
        deadline = time.monotonic() + 240
        while committed_total(plat, name, topic) < WARMUP:
            if not job.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"warm-up not durable; log:\n{job.log_tail()}")
            time.sleep(0.2)
        lines = timestamped_lines(total, args.seed)
        with watch:
            producer = threading.Thread(target=meter.produce_steady, args=(lines, rate))
            started = time.time()
            producer.start()
            meter.poll_until(None, args.seconds, job)
            producer.join(timeout=120)
            watch.scan()
    finally:
        code = stop(plat, job)
        save_log(job, f"overload-{'baseline' if baseline else 'flow'}")
    produced_s = max(meter.sent.values()) - started if meter.sent else None
    rows = curves(meter.sent, watch.admitted, meter.durable, started, args.window)
    durable = sum(1 for k in meter.durable if k in meter.sent)
    return {
        "pipeline": name,
        "rate": round(rate),
        "produced": len(meter.sent),
        "produce_seconds": None if produced_s is None else round(produced_s, 1),
        "durable": durable,
        "durable_per_s": round(durable / args.seconds, 1),
        "windows": rows,
        "exit_code": code,
        "settings": settings_of(config),
    }


def worst(rows: list[dict[str, Any]], field: str, lo: float, hi: float) -> float | None:
    values = [r[field] for r in rows if lo < r["end_s"] <= hi and r[field] is not None]
    return max(values) if values else None


def plot(path: Path, runs: dict[str, dict[str, Any]], title: str) -> None:
    plt = pyplot()

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for label, run in runs.items():
        rows = run["windows"]
        xs = [r["end_s"] for r in rows]
        ax1.plot(xs, [r["send_p99_ms"] / 1000 for r in rows], "o-", label=f"{label} p99")
        ax2.plot(
            xs,
            [None if r["inside_p99_ms"] is None else r["inside_p99_ms"] / 1000 for r in rows],
            "o-",
            label=f"{label} p99",
        )
    ax1.set_title("send -> durable (backlog waits in Kafka)")
    ax2.set_title("admitted -> durable (in the job)")
    for ax in (ax1, ax2):
        ax.set_xlabel("s since the overload started (durable time)")
        ax.set_ylabel("latency s")
        ax.legend()
    fig.suptitle(title)
    save_figure(fig, path)


def _parser() -> argparse.ArgumentParser:
    p = experiment_parser(__doc__, seed=5)
    p.add_argument("--seconds", type=float, default=120.0, help="seconds of overload per job")
    p.add_argument("--lanes", type=int, default=2)
    p.add_argument("--ms", type=float, default=0.5, help="sleep per record counted, ms")
    p.add_argument("--overload", type=float, default=2.0, help="input rate / nominal capacity")
    p.add_argument("--window", type=float, default=10.0, help="seconds per curve point")
    return p


def _run(args: argparse.Namespace) -> int:
    for field in ("seconds", "ms", "overload", "window"):
        if getattr(args, field) <= 0:
            raise BadArgument(f"--{field}={getattr(args, field)!r} must be > 0")
    if args.lanes < 1:
        raise BadArgument(f"--lanes={args.lanes!r} must be >= 1")

    runs: dict[str, dict[str, Any]] = {}
    with platform_up() as plat, tempfile.TemporaryDirectory() as tmp:
        for kind in ("baseline", "flow"):
            run = measure(plat, Path(tmp), args.lanes, baseline=kind == "baseline", args=args)
            runs[kind] = run
            last = run["windows"][-1] if run["windows"] else {}
            print(
                f"{kind}: {run['durable']}/{run['produced']} durable at {run['rate']}/s in, "
                f"last window send p99 {last.get('send_p99_ms')} ms, in-system p99 "
                f"{last.get('inside_p99_ms')} ms",
                flush=True,
            )

    half = args.seconds / 2
    flow, base = runs["flow"], runs["baseline"]
    first = worst(flow["windows"], "inside_p99_ms", args.window, half)
    second = worst(flow["windows"], "inside_p99_ms", half, args.seconds)
    base_second = worst(base["windows"], "inside_p99_ms", half, args.seconds)
    growth = ratio(second, first)
    in_ratio = ratio(second, base_second)
    summary = {
        "metric": "in-system latency p99 (admitted -> durable), worst window of the last half",
        "unit": "ms",
        "candidate": "flow-controlled topology (shipped settings)",
        "baseline": "plain Structured Streaming, fixed batch budget, direct writes",
        "candidate_value": second,
        "baseline_value": base_second,
        "ratio": in_ratio,
        "flow_growth_second_half_vs_first": growth,
        "send_p99_last_window_ms": {
            k: (r["windows"][-1]["send_p99_ms"] if r["windows"] else None) for k, r in runs.items()
        },
        "durable_per_s": {k: r["durable_per_s"] for k, r in runs.items()},
        "target": (
            f"flow in-system p99 bounded (last half's worst <= {TARGET_GROWTH}x the first "
            "half's, first window excluded) and below the baseline's"
        ),
        "meets_target": bool(
            growth is not None and growth <= TARGET_GROWTH and in_ratio is not None and in_ratio < 1
        ),
        "params": vars(args),
        "runs": runs,
    }
    write_result("overload", summary)
    plot(
        RESULTS / "overload.png",
        runs,
        f"{args.overload:g}x overload for {args.seconds:.0f} s, {args.lanes} lanes, "
        f"{args.ms:g} ms per record",
    )
    print(f"in-system p99 flow {second} ms vs baseline {base_second} ms; flow growth {growth}")
    return 0 if summary["meets_target"] else 1


def main(argv: list[str] | None = None) -> int:
    return run_experiment(_parser(), _run, argv)


if __name__ == "__main__":
    sys.exit(main())
