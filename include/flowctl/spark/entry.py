"""Entry point of the stream jobs (``spark_jobs/<pipeline>_stream.py``).

Chooses the job class the pipeline's ``[flow] mode`` asks for: the flow-controlled
:class:`~flowctl.spark.flow.job.FlowStreamJob` or the plain
:class:`~flowctl.spark.job.StreamJob`. It lives apart from both so that neither job
module imports the other's subclass (no import loop).
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Sequence
from types import FrameType

from flowctl.config import Settings
from flowctl.spark.job import (
    JobArgs,
    StreamJob,
    build_session,
    configure_logging,
    parse_args,
)
from flowctl.spark.startup import SessionStarter
from flowctl.spark.topology_job import TopologyJob

log = logging.getLogger("flowctl.job")


def make_job(args: JobArgs, settings: Settings) -> TopologyJob:
    """The job class the pipeline's ``[flow] mode`` asks for (ValueError when unusable)."""
    from flowctl.pipelines.config import load_pipeline_config

    config = load_pipeline_config(args.pipeline_config)
    if config.flow.mode == "flow":
        from flowctl.spark.flow.job import FlowStreamJob

        return FlowStreamJob(args, settings)
    if config.definition != "flowctl.pipelines.wordcount":
        raise ValueError(
            f"{config.source}: flow.mode='plain' runs the word count only, not "
            f"definition={config.definition!r}; use flow.mode='flow'"
        )
    if args.standby:
        raise ValueError("--standby needs flow.mode='flow' (a plain job cannot hold admission)")
    return StreamJob(args, settings)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``spark_jobs/<pipeline>_stream.py``: returns the exit code.

    A driver that ends before its job runs says why in one ERROR line, the last of its
    log, and exits non-zero: a bad config (2), a SIGTERM before the job could take it
    (143), any other error (1, with its traceback). Spark's INFO lines never end it.
    """
    args = parse_args(argv)
    configure_logging()
    name = args.topology_id or args.pipeline_config
    signal.signal(signal.SIGTERM, _terminated_before_start(name))
    # The SparkSession is built behind the job's imports, config and registration.
    session = SessionStarter(f"flowctl-{name}", build_session)
    try:
        job = make_job(args, Settings.from_env())
    except ValueError as exc:
        log.error("topology %s cannot start: %s", name, exc)
        session.discard()
        return 2
    except Exception as exc:
        log.error("topology %s cannot start: %s: %s", name, type(exc).__name__, exc, exc_info=True)
        session.discard()
        return 1
    signal.signal(signal.SIGTERM, job.request_stop)
    return job.run(session)


def _terminated_before_start(name: str) -> Callable[[int, FrameType | None], None]:
    """A SIGTERM handler for the time before the job exists: say so, exit 143."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        log.error("topology %s: SIGTERM before the job started: exiting (143)", name)
        raise SystemExit(128 + signum)

    return handler
