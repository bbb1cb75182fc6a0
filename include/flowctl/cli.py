"""The ``flowctl`` command: one argparse program, command groups in their own modules.

Each module named in :data:`COMMAND_MODULES` exposes ``register(subparsers)``,
which adds its parser and sets ``func`` (``func(args) -> int``). Settings come
from ``FLOWCTL_*`` variables (:meth:`Settings.from_env`), overridden by the
flags of :func:`add_settings_arguments`.

Exit codes: 0 ok; 1 an expected failure, reported as one line on stderr
without a traceback; 2 bad command-line arguments (argparse's own).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from flowctl.config import ConfigError, Settings
from flowctl.pipelines.config import PipelineConfigError
from flowctl.services.base import ServiceError

COMMAND_MODULES: tuple[str, ...] = (
    "flowctl.services.cli",
    "flowctl.services.cluster_cli",
    "flowctl.platform_cli",
    "flowctl.pipeline_cli",
)

EXPECTED_ERRORS: tuple[type[Exception], ...] = (ServiceError, ConfigError, PipelineConfigError)
"""Failures shown as one line; anything else is a bug and keeps its traceback."""

# flag -> Settings field it overrides
_SETTINGS_FLAGS = {
    "home": "home",
    "kafka_port": "kafka_port",
    "memcached_port": "memcached_port",
    "database_url": "database_url",
    "tansu_storage": "tansu_storage",
}


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is out of range [1, 65535]")
    return value


def add_settings_arguments(parser: argparse.ArgumentParser, nested: bool = False) -> None:
    """Add the flags that override settings.

    ``nested=True`` is for sub-command parsers: their defaults are suppressed
    so that ``flowctl --home X services up`` is not reset by the sub-parser.
    """
    default = argparse.SUPPRESS if nested else None
    group = parser.add_argument_group("settings (override FLOWCTL_* variables)")
    group.add_argument("--home", type=Path, default=default, help="state dir (FLOWCTL_HOME)")
    group.add_argument(
        "--kafka-port", type=_port, default=default, help="Tansu port (FLOWCTL_KAFKA_PORT)"
    )
    group.add_argument(
        "--memcached-port",
        type=_port,
        default=default,
        help="memcached port (FLOWCTL_MEMCACHED_PORT)",
    )
    group.add_argument(
        "--database-url",
        default=default,
        help="SQLAlchemy URL (FLOWCTL_DATABASE_URL; default a SQLite file in the home)",
    )
    group.add_argument(
        "--tansu-storage",
        choices=("memory", "s3"),
        default=default,
        help="Tansu storage engine (FLOWCTL_TANSU_STORAGE)",
    )


def named_settings(args: argparse.Namespace) -> set[str]:
    """The Settings fields this command line gives explicitly (by a flag)."""
    return {f for flag, f in _SETTINGS_FLAGS.items() if getattr(args, flag, None) is not None}


def settings_from_args(args: argparse.Namespace) -> Settings:
    """``Settings.from_env()`` with the command-line flags applied on top."""
    settings = Settings.from_env()
    overrides = {
        field: getattr(args, flag)
        for flag, field in _SETTINGS_FLAGS.items()
        if getattr(args, flag, None) is not None
    }
    if "home" in overrides:
        overrides["home"] = Path(overrides["home"]).expanduser().resolve()
    return dataclasses.replace(settings, **overrides)


def build_parser() -> argparse.ArgumentParser:
    """The full parser, with every command group of :data:`COMMAND_MODULES`."""
    parser = argparse.ArgumentParser(
        prog="flowctl", description="Run and operate the flowctl stream platform."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log every step")
    add_settings_arguments(parser)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def _configure_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("kafka").setLevel(logging.ERROR)  # health checks would flood the log


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    _configure_logging(args.verbose)
    try:
        return int(args.func(args) or 0)
    except EXPECTED_ERRORS as exc:
        # One line, even when a value in the message holds a line break.
        message = str(exc).replace("\r", "\\r").replace("\n", "\\n")
        print(f"flowctl: error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("flowctl: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
