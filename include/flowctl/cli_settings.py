"""The settings flags every ``flowctl`` command group shares, and the settings they give.

Apart from :mod:`flowctl.cli` so that the command groups (``services``, ``cluster``,
the platform and pipeline commands) can import them while :mod:`flowctl.cli` imports
the groups: one direction, no loop.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from flowctl.config import Settings

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
        "--kafka-port",
        type=_port,
        default=default,
        help="the embedded broker's port (FLOWCTL_KAFKA_PORT)",
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
        help="Tansu's storage engine, with FLOWCTL_BROKER=tansu (FLOWCTL_TANSU_STORAGE)",
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
