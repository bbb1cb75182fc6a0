"""``flowctl cluster up|down|status``: docker-compose.yaml's layout as local processes."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flowctl.services.cluster_layout import ClusterLayout


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``cluster`` and its sub-commands to the ``flowctl`` parser."""
    parser = subparsers.add_parser(
        "cluster",
        help="run the distributed deployment (Spark standalone, split Airflow) as processes",
        description=(
            "Start, stop and inspect the process cluster: Tansu on its memory engine "
            "(not durable; FLOWCTL_CLUSTER_TANSU_STORAGE=s3: on S3, a local moto server "
            "unless AWS_ENDPOINT names a real S3), memcached, "
            "PostgreSQL databases, Redis, a Spark master + 2 workers, and Airflow's "
            "api-server, scheduler, dag-processor, triggerer and 2 Celery workers."
        ),
    )
    actions = parser.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    for name, func, text in (
        ("up", _up, "start the cluster (no-op for what already runs)"),
        ("down", _down, "stop every process of the cluster (the databases stay unless --purge)"),
        ("status", _status, "show each process's state"),
    ):
        sub = actions.add_parser(name, help=text, description=text)
        sub.add_argument("--home", help="state dir (FLOWCTL_HOME)")
        sub.add_argument("--json", action="store_true", help="machine-readable output")
        if name == "down":
            sub.add_argument(
                "--purge",
                action="store_true",
                help="also drop the cluster's databases and delete its state dir "
                "(logs, work dirs, Airflow home); without it both stay for the next up",
            )
        if name == "status":
            sub.add_argument(
                "--check", action="store_true", help="exit 1 unless every process is up"
            )
        sub.set_defaults(func=func)


def _layout(args: argparse.Namespace) -> ClusterLayout:
    from flowctl.config import Settings
    from flowctl.services.cluster import layout_for

    home = Settings.from_env({"FLOWCTL_HOME": args.home} if args.home else None).home
    return layout_for(home)


def _up(args: argparse.Namespace) -> int:
    from flowctl.services import cluster

    for message in cluster.up(_layout(args)):
        print(message)
    return 0


def _down(args: argparse.Namespace) -> int:
    from flowctl.services import cluster

    for message in cluster.down(_layout(args), purge=args.purge):
        print(message)
    return 0


def _status(args: argparse.Namespace) -> int:
    from flowctl.services import cluster
    from flowctl.services.cli import format_table

    layout = _layout(args)
    rows = cluster.status(layout)
    if args.json:
        print(json.dumps([r.to_dict() for r in rows], indent=2))
    else:
        print(format_table(rows))
        print(cluster.log_durability(layout))
    return 1 if args.check and not all(r.ok for r in rows) else 0
