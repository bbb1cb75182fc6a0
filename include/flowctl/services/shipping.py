"""Ship flowctl to Spark executors: a zip of the package, named by ``spark.submit.pyFiles``.

On a cluster the executors run in the workers' JVMs, in the workers' work
dirs, with none of the driver's checkout or PYTHONPATH. Spark's own mechanism
for Python code is ``--py-files`` / ``spark.submit.pyFiles``: each application
fetches the listed zips from the driver into its executors' work dirs and puts
them first on the Python workers' ``sys.path``. flowctl is pure Python (its
dependencies are in the executors' interpreter, as pyspark is), so a zip of the
package is all an executor needs: it holds the pipeline definitions too
(``flowctl.pipelines``). A packed venv (``spark.archives``) would also carry the
interpreter and every dependency, some hundred MB per application start, for
nothing the workers lack.

:func:`write_spark_defaults` names the zip in ``<conf dir>/spark-defaults.conf``;
a driver started with ``SPARK_CONF_DIR`` pointing there (the Airflow components
of ``flowctl cluster``, the compose images) ships it with every application:
the stream operator and the local launcher of the tests and benchmarks
(``bench/lib/submit.py``) need no flag of their own.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

from flowctl.config import PROJECT_ROOT
from flowctl.core.slot_plan import DEFAULT_PLAN

PACKAGE_DIR = PROJECT_ROOT / "include" / "flowctl"
ZIP_NAME = "flowctl.zip"


def build_zip(dest_dir: Path) -> Path:
    """``dest_dir/flowctl.zip``: every ``.py`` and ``.toml`` of the flowctl package.

    Written to a temporary name and renamed, so a driver starting meanwhile never
    ships half a zip. Rebuilt on every call: it takes a fraction of a second and
    always matches the checkout.
    """
    dest_dir.mkdir(parents=True, exist_ok=True)
    target = dest_dir / ZIP_NAME
    partial = dest_dir / f".{ZIP_NAME}.partial"
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(PACKAGE_DIR.rglob("*")):
            if path.suffix in (".py", ".toml") and "__pycache__" not in path.parts:
                archive.write(path, Path("flowctl") / path.relative_to(PACKAGE_DIR))
    partial.replace(target)
    return target


def spark_defaults(
    py_files: Path, *, executor_memory: str, cores_max: int, python: str = sys.executable
) -> dict[str, str]:
    """The properties every driver of the cluster starts with."""
    return {
        "spark.submit.pyFiles": str(py_files),
        # The executors' Python: an interpreter with flowctl's dependencies (not flowctl).
        "spark.pyspark.python": python,
        # Single-core executors, ``cores_max`` of them: a stream's share of the slot plan
        # (flowctl.core.slot_plan), one per worker; a batch job asks for fewer itself.
        "spark.executor.cores": "1",
        "spark.cores.max": str(cores_max),
        "spark.executor.memory": executor_memory,
    }


def write_spark_defaults(conf_dir: Path, properties: dict[str, str]) -> Path:
    """``conf_dir/spark-defaults.conf`` with ``properties``, one ``key value`` a line."""
    conf_dir.mkdir(parents=True, exist_ok=True)
    path = conf_dir / "spark-defaults.conf"
    lines = ["# Written by `flowctl cluster up`; rewritten on every up."]
    lines += [f"{key} {value}" for key, value in sorted(properties.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    """``python -m flowctl.services.shipping``: how docker-compose's airflow-init ships the
    code, the same zip and properties as ``flowctl cluster up``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m flowctl.services.shipping")
    parser.add_argument("conf_dir", type=Path, help="SPARK_CONF_DIR of the drivers")
    parser.add_argument("dist_dir", type=Path, help="where flowctl.zip is written")
    parser.add_argument("--executor-memory", default="512m")
    parser.add_argument(
        "--cores-max",
        type=int,
        default=DEFAULT_PLAN.stream_cores,
        help="cores of an application that asks for no other number (a stream's share)",
    )
    parser.add_argument("--python", default=sys.executable, help="the executors' Python")
    args = parser.parse_args(argv)
    zip_path = build_zip(args.dist_dir)
    properties = spark_defaults(
        zip_path,
        executor_memory=args.executor_memory,
        cores_max=args.cores_max,
        python=args.python,
    )
    conf = write_spark_defaults(args.conf_dir, properties)
    print(f"shipped {zip_path}; {conf}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
