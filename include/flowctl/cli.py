"""The ``flowctl`` command: one argparse program, command groups in their own modules.

Each module of :data:`COMMAND_MODULES` exposes ``register(subparsers)``, which
adds its parser and sets ``func`` (``func(args) -> int``). Settings come from
``FLOWCTL_*`` variables (:meth:`Settings.from_env`), overridden by the flags of
:func:`flowctl.cli_settings.add_settings_arguments`.

Exit codes: 0 ok; 1 an expected failure, reported as one line on stderr
without a traceback; 2 bad command-line arguments (argparse's own).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from types import ModuleType

from flowctl import pipeline_cli, platform_cli
from flowctl.cli_settings import add_settings_arguments, settings_from_args
from flowctl.config import ConfigError
from flowctl.pipelines.config import PipelineConfigError
from flowctl.services import cli as services_cli
from flowctl.services import cluster_cli
from flowctl.services.base import ServiceError

__all__ = ["COMMAND_MODULES", "build_parser", "main", "settings_from_args"]

#: The command groups, in the order ``flowctl --help`` lists them. Imported, not loaded by
#: name: each imports :mod:`flowctl.cli_settings`, never this module, so no loop.
COMMAND_MODULES: tuple[ModuleType, ...] = (services_cli, cluster_cli, platform_cli, pipeline_cli)

EXPECTED_ERRORS: tuple[type[Exception], ...] = (ServiceError, ConfigError, PipelineConfigError)
"""Failures shown as one line; anything else is a bug and keeps its traceback."""


def build_parser() -> argparse.ArgumentParser:
    """The full parser, with every command group of :data:`COMMAND_MODULES`."""
    parser = argparse.ArgumentParser(
        prog="flowctl", description="Run and operate the flowctl stream platform."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log every step")
    add_settings_arguments(parser)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(subparsers)
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
