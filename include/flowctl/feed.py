"""A gentle feed of demo text that runs with the platform, so the UI shows live data.

``flowctl demo up`` starts it (``--idle-feed-rate`` lines/s, 0 turns it off) as a
detached process with a PID file in ``<home>/run``; ``flowctl demo down`` stops
it first, before the topologies. Run by hand:
``python -m flowctl.feed --pipeline wordcount --rate 50``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from flowctl.config import Settings
from flowctl.services.process import PidRecord, is_alive, log_dir, run_dir, stop_pid, wait_exec

NAME = "feed"
DEMO_SEED = 7


def pid_file(settings: Settings) -> Path:
    return run_dir(settings) / f"{NAME}.pid"


def feed(settings: Settings, pipeline: str, rate: int, stop: threading.Event) -> None:
    """Produce ``rate`` lines of the demo's Zipf text into the pipeline's topic each second."""
    from flowctl.adapters import kafka_log
    from flowctl.pipelines.config import load_pipeline_config
    from flowctl.textgen import zipf_lines

    config = load_pipeline_config(pipeline)
    topic = config.eden_topic
    seed = int(time.time())
    while not stop.is_set():
        started = time.monotonic()
        lines = zipf_lines(rate, seed=seed, vocab_seed=DEMO_SEED)
        kafka_log.produce(settings.kafka_bootstrap, topic, lines, compression=config.compression)
        seed += 1
        stop.wait(max(0.0, 1.0 - (time.monotonic() - started)))


def running(settings: Settings) -> PidRecord | None:
    """The live feed's record; a stale PID file is removed."""
    try:
        record = PidRecord.load(pid_file(settings).read_text())
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if is_alive(record.pid, record.argv):
        return record
    pid_file(settings).unlink(missing_ok=True)
    return None


def start(settings: Settings, pipeline: str, rate: int) -> str:
    """Start the feed in the background (idempotent); a sentence saying what happened."""
    record = running(settings)
    if record is not None:
        return f"{NAME} already running (pid {record.pid}, {record.address})"
    argv = (sys.executable, "-m", "flowctl.feed", "--pipeline", pipeline, "--rate", str(rate))
    log_path = log_dir(settings) / f"{NAME}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    pid_file(settings).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **settings.to_env()},
            close_fds=True,
        )
    wait_exec(proc.pid)
    address = f"{rate} lines/s into {pipeline}"
    pid_file(settings).write_text(PidRecord(proc.pid, argv, address).dump())
    return f"{NAME} started (pid {proc.pid}): {address}; log {log_path}"


def stop(settings: Settings) -> str:
    record = running(settings)
    if record is None:
        return f"{NAME} not running"
    stop_pid(record.pid, record.argv, timeout=10.0)
    pid_file(settings).unlink(missing_ok=True)
    return f"{NAME} stopped (was pid {record.pid})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flowctl.feed", description=__doc__)
    parser.add_argument("--pipeline", default="wordcount")
    parser.add_argument("--rate", type=int, default=50, help="lines per second (50)")
    args = parser.parse_args(argv)
    if args.rate < 1:
        parser.error(f"--rate={args.rate} must be >= 1")
    stop_event = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop_event.set())
    settings = Settings.from_env()
    while not stop_event.is_set():
        try:
            feed(settings, args.pipeline, args.rate, stop_event)
        except Exception as exc:  # broker restarting: say so, try again shortly
            print(f"feed: {type(exc).__name__}: {exc}; retrying in 5 s", flush=True)
            stop_event.wait(5.0)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
