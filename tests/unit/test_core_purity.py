"""The core is pure: every module of flowctl.core imports only the standard library.

And the layers above it leave I/O to the adapters: no module of
flowctl.pipelines or flowctl.services imports a database, cache, Kafka or
Spark client (one adapter per real thing wraps each of those), and no module of
flowctl.spark writes SQL (it imports no ``sqlalchemy``).

Parsed with ``ast`` (no import side effects), so a forbidden import fails the
test even inside a function body or an ``if TYPE_CHECKING`` block.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

FLOWCTL = Path(__file__).resolve().parents[2] / "include" / "flowctl"
CORE = FLOWCTL / "core"
#: Packages whose modules call the adapters for I/O instead of importing its clients.
ADAPTER_USERS = (FLOWCTL / "pipelines", FLOWCTL / "services")
#: The clients only flowctl.adapters (and flowctl.spark, for pyspark) may import.
IO_CLIENTS = frozenset({"sqlalchemy", "pymemcache", "kafka", "pyspark", "psycopg2"})
ALLOWED_FIRST_PARTY = "flowctl.core"
_DYNAMIC = {"import_module", "__import__"}


def _core_modules() -> list[Path]:
    return sorted(p for p in CORE.rglob("*.py"))


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import: stays inside flowctl.core
                continue
            found.append((node.lineno, node.module or ""))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name | ast.Attribute)
            and getattr(node.func, "id", getattr(node.func, "attr", ""))
            in {"import_module", "__import__"}
        ):
            found.append((node.lineno, "<dynamic import>"))
    return found


def _is_allowed(module: str) -> bool:
    if module == ALLOWED_FIRST_PARTY or module.startswith(ALLOWED_FIRST_PARTY + "."):
        return True
    top = module.split(".")[0]
    return top in sys.stdlib_module_names and top not in {"socket", "subprocess", "sqlite3"}


def test_core_has_modules() -> None:
    assert _core_modules(), f"no modules found under {CORE}"


@pytest.mark.parametrize("path", _core_modules(), ids=lambda p: p.relative_to(CORE).as_posix())
def test_core_module_imports_only_stdlib(path: Path) -> None:
    bad = [f"line {line}: {mod}" for line, mod in _imported_modules(path) if not _is_allowed(mod)]
    assert not bad, f"{path.name} imports outside the standard library: {bad}"


def test_the_check_catches_a_forbidden_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import os\n\ndef f():\n    import pyspark\n    from kafka import KafkaConsumer\n"
    )
    names = [m for _, m in _imported_modules(sample) if not _is_allowed(m)]
    assert names == ["pyspark", "kafka"]


def _adapter_user_modules() -> list[Path]:
    return sorted(p for package in ADAPTER_USERS for p in package.rglob("*.py"))


def _io_client_imports(path: Path) -> list[str]:
    return [
        f"line {line}: {mod}"
        for line, mod in _imported_modules(path)
        if mod.split(".")[0] in IO_CLIENTS
    ]


def test_pipelines_and_services_have_modules() -> None:
    for package in ADAPTER_USERS:
        assert list(package.glob("*.py")), f"no modules found under {package}"


@pytest.mark.parametrize(
    "path", _adapter_user_modules(), ids=lambda p: p.relative_to(FLOWCTL).as_posix()
)
def test_pipelines_and_services_leave_io_clients_to_the_adapters(path: Path) -> None:
    bad = _io_client_imports(path)
    assert not bad, (
        f"{path.relative_to(FLOWCTL)} imports an I/O client (move that code into an adapter "
        f"of flowctl.adapters and call it): {bad}"
    )


SPARK = FLOWCTL / "spark"


def _spark_modules() -> list[Path]:
    return sorted(SPARK.rglob("*.py"))


def test_spark_has_modules() -> None:
    assert (SPARK / "flow" / "planner.py") in _spark_modules()


@pytest.mark.parametrize("path", _spark_modules(), ids=lambda p: p.relative_to(FLOWCTL).as_posix())
def test_spark_leaves_the_database_to_the_adapters(path: Path) -> None:
    bad = [
        f"line {line}: {mod}"
        for line, mod in _imported_modules(path)
        if mod == "sqlalchemy" or mod.startswith("sqlalchemy.")
    ]
    assert not bad, (
        f"{path.relative_to(FLOWCTL)} imports SQLAlchemy (SQL belongs in an adapter of "
        f"flowctl.adapters): {bad}"
    )


@pytest.mark.parametrize(
    "path",
    sorted((FLOWCTL / "adapters").rglob("*.py")),
    ids=lambda p: p.relative_to(FLOWCTL).as_posix(),
)
def test_adapters_import_no_pipeline_code(path: Path) -> None:
    """Adapters run what a pipeline hands them (``apply`` as a callable, a tokeniser):
    an adapter importing a pipeline would make an import loop with it."""
    bad = [
        f"line {line}: {mod}"
        for line, mod in _imported_modules(path)
        if mod == "flowctl.pipelines" or mod.startswith("flowctl.pipelines.")
    ]
    assert not bad, f"{path.relative_to(FLOWCTL)} imports pipeline code: {bad}"


def test_the_layer_check_catches_nested_client_imports(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from typing import TYPE_CHECKING\n"
        "from flowctl.adapters import kafka_log\n"
        "if TYPE_CHECKING:\n"
        "    import sqlalchemy as sa\n"
        "class C:\n"
        "    def f(self):\n"
        "        from kafka.errors import KafkaError\n"
        "        import pymemcache.client.base, psycopg2\n"
        "        from pyspark.sql import SparkSession\n"
    )
    assert _io_client_imports(sample) == [
        "line 4: sqlalchemy",
        "line 7: kafka.errors",
        "line 8: pymemcache.client.base",
        "line 8: psycopg2",
        "line 9: pyspark.sql",
    ]
