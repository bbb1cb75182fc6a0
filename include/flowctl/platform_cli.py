"""``flowctl airflow|ingest|stream|demo``: the platform's commands beyond the services.

- ``flowctl airflow up|down|status|env``: ``airflow standalone`` on the
  project-local home; ``env`` prints ``export`` lines so the plain ``airflow``
  CLI talks to the same instance (``eval "$(flowctl airflow env)"``).
- ``flowctl ingest``: load demo text or a file into ``<pipeline>.eden``.
- ``flowctl stream list|status|stop|counts``: the topologies, their health, their
  results.
- ``flowctl demo up|down``: everything at once (the README's run command).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from flowctl.cli_settings import add_settings_arguments, settings_from_args
from flowctl.config import Settings
from flowctl.core.validation import (
    COMPRESSION_CODECS,
    InvalidValue,
    argparse_type,
    compression,
    integer_from_text,
    number_from_text,
)
from flowctl.services.base import ServiceError, ServiceStatus

if TYPE_CHECKING:
    from flowctl.adapters.control_plane import ControlPlane

#: An argparse type: an integer >= 1 (``'0' must be >= 1``).
_positive = argparse_type(lambda field, text: integer_from_text(field, text, lo=1))


def _count(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``minimum``, checked before anything starts."""
    as_integer = argparse_type(integer_from_text)

    def parse(text: str) -> int:
        value = as_integer(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} must be >= {minimum}")
        return value

    return parse


def _seconds(text: str) -> float:
    """An argparse type: a finite number of seconds >= 0."""
    try:
        return number_from_text("seconds", text, lo=0)
    except InvalidValue as exc:
        unreadable = exc.why == "is not a number"
        why = "is not a number of seconds" if unreadable else "must be >= 0 and finite"
        raise argparse.ArgumentTypeError(f"{text!r} {why}") from None


def _pipeline(text: str) -> str:
    """An argparse type: a pipeline's name (its config in ``include/pipelines``, or in
    ``$FLOWCTL_PIPELINES_DIR``) or a config file's path; an unknown one is refused with
    the known ones listed (exit 2), before anything reads the database."""
    from flowctl.pipelines.config import known_pipelines, resolve_path

    try:
        found = resolve_path(text).is_file()
    except (ValueError, RuntimeError):  # a NUL byte, "~nosuchuser/...": no such file
        found = False
    if not found:
        known = ", ".join(known_pipelines()) or "none"
        raise argparse.ArgumentTypeError(
            f"unknown pipeline {text!r}: known pipelines: {known} "
            "(a config in include/pipelines or $FLOWCTL_PIPELINES_DIR, or a config file's path)"
        )
    return text


def _pipeline_name(given: str) -> str:
    """The pipeline's name (the topologies' key) of ``--pipeline``: a config's path names
    the pipeline its file declares."""
    from flowctl.pipelines.config import load_pipeline_config

    return load_pipeline_config(given).name


#: ``--pipeline``'s help.
PIPELINE_HELP = "the pipeline: a config's name in include/pipelines, or its path (wordcount)"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the platform's commands, one group each, in the order ``flowctl --help`` lists them."""
    _register_airflow(subparsers)
    _register_ingest(subparsers)
    _register_stream(subparsers)
    _register_demo(subparsers)
    _register_class_archive(subparsers)


def _register_class_archive(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    text = (
        "build the Spark driver's class-data sharing archive (scripts/bootstrap does; about "
        "30-40 s): every topology's driver JVM then starts seconds sooner"
    )
    archive = subparsers.add_parser("class-archive", help=text, description=text)
    archive.add_argument("--rebuild", action="store_true", help="build it again if it exists")
    archive.add_argument(
        "--announce", metavar="TEXT", help="print TEXT to stderr first when it must be built"
    )
    archive.set_defaults(func=_class_archive)


def _class_archive(args: argparse.Namespace) -> int:
    from flowctl.adapters import class_archive

    path = class_archive.archive_path()
    if args.announce and (args.rebuild or path is None or not path.is_file()):
        print(args.announce, file=sys.stderr, flush=True)
    try:
        path = class_archive.build(rebuild=args.rebuild)
    except class_archive.ClassArchiveError as exc:
        print(f"class archive: {exc}", file=sys.stderr, flush=True)
        return 1
    _say(f"class archive: {path} ({path.stat().st_size / 1e6:.0f} MB)")
    return 0


def _register_airflow(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    airflow = subparsers.add_parser("airflow", help="the embedded Airflow (standalone)")
    actions = airflow.add_subparsers(dest="airflow_command", required=True, metavar="ACTION")
    for name, func, text in (
        ("up", _airflow_up, "migrate the metadata DB, add connections, start standalone"),
        ("down", _airflow_down, "stop standalone and all its children"),
        ("status", _airflow_status, "show whether Airflow is up, its address and login"),
        ("env", _airflow_env, "print export lines for the airflow CLI"),
    ):
        sub = actions.add_parser(name, help=text, description=text)
        add_settings_arguments(sub, nested=True)
        sub.set_defaults(func=func)


def _register_ingest(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ingest = subparsers.add_parser(
        "ingest", help="load text into a pipeline's Eden topic", description=_ingest.__doc__
    )
    ingest.add_argument("--pipeline", type=_pipeline, default="wordcount", help=PIPELINE_HELP)
    source = ingest.add_mutually_exclusive_group()
    source.add_argument("--lines", type=int, default=100_000, help="synthetic lines (100000)")
    source.add_argument(
        "--file",
        help="load this file instead of synthetic text: one record per line, the bytes as "
        "they are (undecodable lines reach the pipeline, and its dead-letter topic, unchanged)",
    )
    ingest.add_argument(
        "--skip-empty",
        action="store_true",
        help="with --file: leave out empty lines (by default each is a record)",
    )
    ingest.add_argument("--seed", type=int, default=7, help="seed of the synthetic text (7)")
    ingest.add_argument(
        "--compression",
        type=argparse_type(compression),
        default=None,
        help=f"codec of the record batches, one of {', '.join(COMPRESSION_CODECS)} "
        "(default: the pipeline's topics.compression)",
    )
    add_settings_arguments(ingest, nested=True)
    ingest.set_defaults(func=_ingest)


def _register_stream(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    stream = subparsers.add_parser("stream", help="inspect and stop topologies")
    actions = stream.add_subparsers(dest="stream_command", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="topologies of a pipeline and their states")
    listing.add_argument("--pipeline", type=_pipeline, default="wordcount", help=PIPELINE_HELP)
    listing.set_defaults(func=_stream_list)
    status = actions.add_parser(
        "status",
        help="live topologies with their health (exit 3 when one is STALLED, HALTED or STALE)",
        description="Each live topology's state and its health at its last metrics window: "
        "HEALTHY, RECOVERING, STALLED or HALTED, and why, and the rebuilds after lost "
        "MRWQ items; STALE when that window ended more than two windows ago (the health "
        "now is unknown). Exits 3 when a live topology is STALLED, HALTED or STALE.",
    )
    status.add_argument("--pipeline", type=_pipeline, default="wordcount", help=PIPELINE_HELP)
    status.set_defaults(func=_stream_status)
    stop = actions.add_parser("stop", help="send a stop signal to a topology")
    stop.add_argument("topology_id", nargs="?", help="topology to stop")
    stop.add_argument(
        "--pipeline", type=_pipeline, help="stop every running topology of this pipeline"
    )
    stop.set_defaults(func=_stream_stop)
    counts = actions.add_parser("counts", help="what a pipeline has stored (word counts, ...)")
    counts.add_argument("--pipeline", type=_pipeline, default="wordcount", help=PIPELINE_HELP)
    counts.add_argument(
        "--top",
        type=_positive,
        default=10,
        help="show the N results with the largest values (10), e.g. the most frequent words",
    )
    counts.set_defaults(func=_stream_counts)
    for sub in (listing, status, stop, counts):
        add_settings_arguments(sub, nested=True)


def _register_demo(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = subparsers.add_parser("demo", help="the whole platform at once")
    actions = demo.add_subparsers(dest="demo_command", required=True, metavar="ACTION")
    up = actions.add_parser("up", help="services + Airflow + demo data + the stream")
    up.add_argument("--pipeline", type=_pipeline, default="wordcount", help=PIPELINE_HELP)
    up.add_argument("--lines", type=_count(1), default=200_000, help="demo lines to load (200000)")
    up.add_argument(
        "--watch-seconds",
        type=_seconds,
        default=60.0,
        help="print live counts this long, from the first count (60)",
    )
    up.add_argument(
        "--feed-rate",
        type=_count(0),
        default=2_000,
        help="lines/s fed while watching (2000; 0: off)",
    )
    up.add_argument(
        "--idle-feed-rate",
        type=_count(0),
        default=50,
        help="lines/s fed after that, until `demo down`, so the UI shows live data (50; 0: off)",
    )
    up.set_defaults(func=_demo_up)
    down = actions.add_parser("down", help="stop topologies, Airflow and the services")
    down.set_defaults(func=_demo_down)
    for sub in (up, down):
        add_settings_arguments(sub, nested=True)


def _settings(args: argparse.Namespace) -> Settings:
    return settings_from_args(args)


def _target_settings(args: argparse.Namespace) -> Settings:
    """Settings of the deployment that is up (the process cluster if its files say so, else
    the embedded platform; flags and ``FLOWCTL_*`` variables win). The cluster is named in
    one line on stderr (stdout stays the command's answer); the embedded platform, the
    default, is not, so that an error stays one line."""
    from flowctl.cli_settings import named_settings
    from flowctl.services.deployment import choose, explicit_fields

    deployment = choose(_settings(args), explicit_fields(named_settings(args)))
    if deployment.name != "embedded":
        print(deployment.describe(), file=sys.stderr, flush=True)
    return deployment.settings


def _say(message: str) -> None:
    print(message, flush=True)


def _airflow_up(args: argparse.Namespace) -> int:
    from flowctl.services.airflow import AirflowService

    settings = _settings(args)
    _say(AirflowService().up(settings))
    _say(_format_status(AirflowService().status(settings)))
    return 0


def _airflow_down(args: argparse.Namespace) -> int:
    from flowctl.services.airflow import AirflowService

    _say(AirflowService().down(_settings(args)))
    return 0


def _format_status(status: ServiceStatus) -> str:
    return f"airflow: {status.state} {status.address} pid={status.pid or '-'} {status.detail}"


def _airflow_status(args: argparse.Namespace) -> int:
    from flowctl.services.airflow import AirflowService

    status = AirflowService().status(_settings(args))
    _say(_format_status(status))
    return 0 if status.ok else 1


def _airflow_env(args: argparse.Namespace) -> int:
    from flowctl.services.airflow import airflow_env

    for key, value in sorted(airflow_env(_settings(args)).items()):
        print(f"export {key}={shlex.quote(value)}")
    return 0


def _ingest(args: argparse.Namespace) -> int:
    """Load seeded synthetic input (--lines, --seed; the pipeline's own generator) or a file."""
    from flowctl.ingest import IngestRequest, ingest

    try:
        request = IngestRequest.parse(
            pipeline=args.pipeline,
            source="file" if args.file else "synthetic",
            lines=args.lines,
            seed=args.seed,
            path=args.file,
            skip_empty=args.skip_empty,
            compression=args.compression,
        )
    except ValueError as exc:
        raise ServiceError(str(exc)) from None
    settings = _target_settings(args)  # named once the request is known to be good
    total = request.lines if request.source == "synthetic" else None

    def progress(n: int) -> None:
        suffix = f"/{total:,d} ({100 * n / total:.0f}%)" if total else ""
        print(f"\rproduced {n:,d}{suffix}", end="", file=sys.stderr, flush=True)

    result = ingest(request, settings.kafka_bootstrap, on_progress=progress)
    print(file=sys.stderr)
    _say(
        f"ingested {result.records:,d} records into {result.topic} in {result.seconds:.1f} s "
        f"({result.records_per_s:,.0f} records/s)"
    )
    return 0


def _plane(args: argparse.Namespace) -> ControlPlane:
    from flowctl.adapters.control_plane import ControlPlane

    plane = ControlPlane(_target_settings(args).resolved_database_url)
    plane.ensure_schema()
    return plane


def _stream_list(args: argparse.Namespace) -> int:
    from flowctl.core.clock import utc_text

    pipeline = _pipeline_name(args.pipeline)
    rows = _plane(args).topologies(pipeline)
    if not rows:
        _say(f"no topologies for pipeline {pipeline!r}")
    for topo in rows:
        beat = "never" if topo.heartbeat_at is None else utc_text(topo.heartbeat_at)
        _say(
            f"{topo.topology_id}  {topo.state:<9} colour={topo.colour} "
            f"parallelism={topo.parallelism} heartbeat={beat}"
        )
    return 0


#: ``flowctl stream status``'s exit code when a live topology is STALLED or HALTED, or its
#: health is stale (its newest window is older than two windows: nothing says it is well).
NOT_HEALTHY_EXIT = 3


def _stream_status(args: argparse.Namespace) -> int:
    """Live topologies, their health and its cause: the last metrics window's, marked
    stale when that window is older than two windows (:func:`~flowctl.core.health.stale_for`)."""
    import time

    from flowctl.adapters.control_plane import TERMINAL_STATES
    from flowctl.core.clock import utc_text
    from flowctl.core.health import ALERT_STATES, stale_for
    from flowctl.pipelines.config import load_pipeline_config

    config = load_pipeline_config(args.pipeline)
    window_s = config.flow.metrics_window_s
    plane = _plane(args)
    live = [t for t in plane.topologies(config.name) if t.state not in TERMINAL_STATES]
    if not live:
        _say(f"no live topologies for pipeline {config.name!r}")
    unhealthy = 0
    for topo in live:
        last = plane.metrics_windows(topo.topology_id, limit=1)
        rebuilds = ""
        if not last:
            health = "health unknown (no metrics window yet)"
        else:
            w = last[0]
            start, end = w.window_start.timestamp(), w.window_end.timestamp()
            stale = stale_for(start, end, window_s, now=time.time())
            unhealthy += w.health in ALERT_STATES or stale is not None
            cause = f": {w.health_cause}" if w.health_cause else ""
            rebuilds = f" rebuilds={w.rebuilds}" if w.rebuilds else ""
            health = f"{w.health} at {utc_text(w.window_end)}{cause}"
            if stale is not None:
                health = (
                    f"STALE: no metrics window for {stale:.0f} s (windows of {window_s:g} s), "
                    f"health now unknown; the last said {health}"
                )
        _say(
            f"{topo.topology_id}  {topo.state:<9} parallelism={topo.parallelism}{rebuilds}  "
            f"{health}"
        )
    return NOT_HEALTHY_EXIT if unhealthy else 0


def _stream_stop(args: argparse.Namespace) -> int:
    from flowctl.adapters.control_plane import TERMINAL_STATES

    plane = _plane(args)
    if bool(args.topology_id) == bool(args.pipeline):
        raise ServiceError("give either a topology id or --pipeline NAME")
    if args.topology_id:
        targets = [args.topology_id]
    else:
        pipeline = _pipeline_name(args.pipeline)
        targets = [
            t.topology_id for t in plane.topologies(pipeline) if t.state not in TERMINAL_STATES
        ]
    for topology_id in targets:
        plane.send_signal(topology_id, "stop")
        _say(f"sent stop to {topology_id}")
    if not targets:
        _say("nothing to stop")
    return 0


def _stream_counts(args: argparse.Namespace) -> int:
    """What the pipeline stored, as a table of results: one row per result key (the
    ``--top`` largest values first when every value is a number), or per figure of a
    definition's own summary (log ETL's rows per status class)."""
    from flowctl.adapters.db import engine_for
    from flowctl.pipelines.config import load_pipeline_config
    from flowctl.pipelines.sinks import result_store

    config = load_pipeline_config(args.pipeline)
    engine = engine_for(_target_settings(args).resolved_database_url)
    with engine.connect() as conn:
        stored = dict(result_store(config).stored(conn, config.name))
    spec = config.sink
    key = "/".join(spec.key) if spec is not None else "result"
    value = "/".join(spec.values) if spec is not None and spec.values else "value"
    if stored and all(isinstance(v, int) and not isinstance(v, bool) for v in stored.values()):
        where = f" in {spec.table}" if spec is not None else ""
        _say(
            f"{len(stored):,d} results ({key}) stored{where}, {value} summing to "
            f"{sum(stored.values()):,d}; the {min(args.top, len(stored))} largest:"
        )
        rows = sorted(stored.items(), key=lambda kv: (-kv[1], kv[0]))[: args.top]
    else:
        _say(f"{config.name}'s stored results, as its reconcile compares them:")
        rows, key, value = sorted(_flat(stored).items()), "figure", "value"
    width = max([len(key), *(len(k) for k, _ in rows)])
    _say(f"  {key:<{width}}  {value}")
    for k, v in rows:
        _say(
            f"  {k:<{width}}  {f'{v:,d}' if isinstance(v, int) and not isinstance(v, bool) else v}"
        )
    if not stored:
        _say("  (nothing stored yet)")
    return 0


def _flat(tree: object, prefix: str = "") -> dict[str, object]:
    """A nested summary as ``{"a/b": value}`` rows (a table, not JSON)."""
    if not isinstance(tree, dict):
        return {prefix or "value": tree}
    rows: dict[str, object] = {}
    for k, v in tree.items():
        rows.update(_flat(v, f"{prefix}/{k}" if prefix else str(k)))
    return rows


def _demo_up(args: argparse.Namespace) -> int:
    from flowctl import demo

    demo.up(
        _settings(args),
        pipeline=args.pipeline,
        lines=args.lines,
        watch_seconds=args.watch_seconds,
        feed_rate=args.feed_rate,
        idle_feed_rate=args.idle_feed_rate,
        say=_say,
    )
    return 0


def _demo_down(args: argparse.Namespace) -> int:
    from flowctl import demo

    demo.down(_settings(args), say=_say)
    return 0
