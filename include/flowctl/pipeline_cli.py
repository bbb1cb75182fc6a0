"""``flowctl pipeline new|check``: start a pipeline of one's own, and check it before any DAG
parses it.

- ``flowctl pipeline new NAME`` writes a commented config, a definition module and its
  test (:mod:`flowctl.pipelines.scaffold` says where, and why there);
- ``flowctl pipeline check NAME`` loads the config, imports the definition and runs it
  over sample records against its ``[sink]`` (:mod:`flowctl.pipelines.check`); no Spark,
  Airflow, Kafka or database is needed. A failure is one line naming the file, the field
  and the value (exit code 1).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from flowctl.config import PROJECT_ROOT


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pipeline = subparsers.add_parser("pipeline", help="create and check pipeline definitions")
    actions = pipeline.add_subparsers(dest="pipeline_command", required=True, metavar="ACTION")
    new = actions.add_parser(
        "new",
        help="write a new pipeline's config, definition and test",
        description=_new.__doc__,
    )
    new.add_argument("name", help="pipeline name: lower-case letters, digits, '_'")
    new.add_argument(
        "--root",
        type=Path,
        default=PROJECT_ROOT,
        help="project root the definition and test go under (default: this checkout)",
    )
    new.add_argument(
        "--config-dir",
        type=Path,
        help="where the config goes (default: $FLOWCTL_PIPELINES_DIR, else include/pipelines)",
    )
    new.set_defaults(func=_new)
    check = actions.add_parser(
        "check", help="validate a pipeline's config and definition", description=_check.__doc__
    )
    check.add_argument("name", help="pipeline name, or the path of its config file")
    check.set_defaults(func=_check)


def _new(args: argparse.Namespace) -> int:
    """Write NAME.toml (config), flowctl/pipelines/NAME.py (definition) and its test. The
    pipeline counts JSON events per key; edit its parse() and [sink] from there."""
    from flowctl.pipelines.scaffold import new_pipeline

    files = new_pipeline(args.name, root=args.root.resolve(), config_dir=args.config_dir)
    print(f"config:     {files.config}")
    print(f"definition: {files.definition}")
    print(f"test:       {files.test}")
    print(
        f"next: edit them, then `.venv/bin/flowctl pipeline check {args.name}` and "
        f"`.venv/bin/pytest {files.test}`; Airflow shows ingest_{args.name}, stream_{args.name}, "
        f"autoscale_{args.name}, rescale_{args.name} and reconcile_{args.name} at its "
        "next DAG parse"
    )
    return 0


def _check(args: argparse.Namespace) -> int:
    """Validate the config (every section, [sink] included) and the definition, running it
    over sample records against its sink; no Spark, Airflow, Kafka or database needed."""
    from flowctl.pipelines.check import check_pipeline

    for line in check_pipeline(args.name):
        print(f"ok: {line}")
    return 0
