"""``flowctl services up|down|status``: the embedded services from the command line."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from flowctl.cli_settings import add_settings_arguments, settings_from_args
from flowctl.services import manager
from flowctl.services.base import ServiceStatus
from flowctl.services.kafka import durability

COLUMNS = ("service", "state", "pid", "address", "detail")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``services`` and its sub-commands to the ``flowctl`` parser."""
    parser = subparsers.add_parser(
        "services",
        help="start, stop and inspect the broker, memcached and the database",
        description="Start, stop and inspect the embedded services (db, memcached, and the "
        "broker: kafka, or tansu with FLOWCTL_BROKER=tansu).",
    )
    commands = parser.add_subparsers(dest="services_command", required=True, metavar="ACTION")
    for name, func, text in (
        ("up", _up, "start the services (no-op for those already up)"),
        ("down", _down, "stop the services we started (no-op for those already down)"),
        ("status", _status, "show each service's state"),
    ):
        sub = commands.add_parser(name, help=text, description=text)
        sub.add_argument(
            "--only",
            action="append",
            choices=manager.NAMES,
            help="act on this service only (repeatable)",
        )
        sub.add_argument("--json", action="store_true", help="machine-readable output")
        if name == "down":
            sub.add_argument(
                "--purge",
                action="store_true",
                help="then delete the embedded broker's log (every topic and record)",
            )
        if name == "status":
            sub.add_argument(
                "--check", action="store_true", help="exit 1 unless every service is up"
            )
        add_settings_arguments(sub, nested=True)
        sub.set_defaults(func=func)


def format_table(rows: Sequence[ServiceStatus]) -> str:
    """A plain aligned table, one service per line."""
    cells = [COLUMNS] + [
        (r.name, r.state, str(r.pid) if r.pid else "-", r.address, r.detail) for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS) - 1)]
    lines = []
    for row in cells:
        head = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
        lines.append(f"{head}  {row[-1]}".rstrip())
    return "\n".join(lines)


def _emit(args: argparse.Namespace, messages: list[str], rows: list[ServiceStatus]) -> None:
    if args.json:
        payload = {"messages": messages, "services": [r.to_dict() for r in rows]}
        print(json.dumps(payload, indent=2))
        return
    for message in messages:
        print(message)


def _up(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    messages = manager.up(settings, only=args.only)
    _emit(args, messages, manager.status(settings, only=args.only) if args.json else [])
    return 0


def _down(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    messages = manager.down(settings, only=args.only, purge=args.purge)
    _emit(args, messages, manager.status(settings, only=args.only) if args.json else [])
    return 0


def _status(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    rows = manager.status(settings, only=args.only)
    if args.json:
        _emit(args, [], rows)
    else:
        print(format_table(rows))
        print(durability(settings))
    return 1 if args.check and not all(r.ok for r in rows) else 0
