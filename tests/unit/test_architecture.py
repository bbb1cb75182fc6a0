"""The rooms of docs/architecture.md import only what the table there allows, in no loop.

Every import counts, also one inside a function: a deferred import is still a
dependency, and so is a module loaded by name (``importlib.import_module``): in a
module that loads by name, every string naming a first-party module counts as an
import of it. Parsed with ``ast``, nothing is imported.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOP = "top"  # the top-level modules of flowctl: the command line and its settings
#: room -> the first-party rooms it may import (docs/architecture.md).
ALLOWED: dict[str, frozenset[str]] = {
    "core": frozenset(),
    "adapters": frozenset({"core"}),
    "pipelines": frozenset({"core", "adapters", TOP}),
    "spark": frozenset({"core", "adapters", "pipelines", TOP}),
    "services": frozenset({"core", "adapters", TOP}),
    "sim": frozenset({"core"}),
    "plugins": frozenset({"core", "adapters", "pipelines", TOP}),
    TOP: frozenset({"core", "adapters", "pipelines", "services", TOP}),
    "dags": frozenset({"plugins"}),
    "spark_jobs": frozenset({"spark"}),
}
ROOMS = ("core", "adapters", "pipelines", "spark", "services", "sim")
#: Rooms that may import only these top-level modules (docs/architecture.md): the
#: services sit below the command line, whose groups import them.
TOP_MODULES: dict[str, frozenset[str]] = {
    "services": frozenset({"flowctl.config", "flowctl.cli_settings"}),
}
BENCH = "bench"  # benchmarks and what only they and the tests use: never the product's
#: Inside plugins: a package may not import the packages listed for it (a trigger runs in
#: the triggerer and a sensor pokes: neither may depend on an operator).
PLUGIN_FORBIDDEN: dict[str, frozenset[str]] = {
    "hooks": frozenset({"operators", "sensors", "triggers"}),
    "triggers": frozenset({"operators", "sensors"}),
    "sensors": frozenset({"operators"}),
}
#: Calls that load a module by its name.
LOADERS = frozenset({"import_module", "__import__"})


def _modules() -> Iterator[tuple[str, Path]]:
    """``(dotted name, path)`` of every module of include/, plugins/, dags/, spark_jobs/."""
    for base, package in (
        (ROOT / "include" / "flowctl", "flowctl"),
        (ROOT / "plugins" / "flowctl_airflow", "flowctl_airflow"),
    ):
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join([package, *parts]), path
    for folder in ("dags", "spark_jobs"):
        for path in sorted((ROOT / folder).glob("*.py")):
            yield f"{folder}.{path.stem}", path


MODULES = dict(_modules())


def room_of(module: str) -> str | None:
    """The room of a first-party dotted name, ``None`` for a third-party one."""
    parts = module.split(".")
    if parts[0] == BENCH:
        return BENCH
    if parts[0] == "flowctl_airflow":
        return "plugins"
    if parts[0] in ("dags", "spark_jobs"):
        return parts[0]
    if parts[0] != "flowctl":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in ROOMS else TOP


def _loads_by_name(tree: ast.AST) -> bool:
    """Whether the module calls ``import_module`` or ``__import__``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in LOADERS:
                return True
    return False


def _named_modules(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Strings that name a first-party module (``"flowctl.x.y"``), with their line."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if room_of(text) is not None and "." in text and text.replace(".", "").isidentifier():
                yield node.lineno, text


def _imports(module: str, path: Path) -> Iterator[tuple[int, str]]:
    """Every first-party name the module imports, absolute, with its line; in a module that
    loads modules by name, every string naming a first-party module too."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(), filename=str(path))
    if _loads_by_name(tree):
        yield from _named_modules(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            yield node.lineno, base
            for alias in node.names:  # ``from pkg import module``
                yield node.lineno, f"{base}.{alias.name}"


def _resolve(name: str) -> str | None:
    """The project module a dotted name lives in (the longest known prefix)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _edges() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, path in MODULES.items():
        for _, name in _imports(module, path):
            target = _resolve(name)
            # A module importing its own package's __init__ is not an edge of a loop.
            if target and target != module and not module.startswith(target + "."):
                graph[module].add(target)
    return graph


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_imports_only_the_rooms_its_room_may(module: str) -> None:
    room = room_of(module)
    assert room is not None
    bad = []
    for line, name in _imports(module, MODULES[module]):
        target = room_of(name)
        if target is not None and target != room and target not in ALLOWED[room]:
            bad.append(f"line {line}: {name} (room {target})")
        elif target == TOP and room in TOP_MODULES and _resolve(name) not in TOP_MODULES[room]:
            bad.append(f"line {line}: {name} (only {sorted(TOP_MODULES[room])} of the top)")
    assert not bad, f"{module} (room {room}) imports what docs/architecture.md forbids: {bad}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if room_of(m) == "plugins"))
def test_plugin_packages_import_no_package_above_them(module: str) -> None:
    package = module.split(".")[1] if module.count(".") > 1 else ""
    forbidden = PLUGIN_FORBIDDEN.get(package, frozenset())
    bad = [
        f"line {line}: {name}"
        for line, name in _imports(module, MODULES[module])
        if name.startswith("flowctl_airflow.") and name.split(".")[1] in forbidden
    ]
    assert not bad, f"{module} imports a plugin package above its own: {bad}"


def test_a_module_loaded_by_name_is_an_import(tmp_path: Path) -> None:
    path = tmp_path / "loader.py"
    path.write_text(
        "import importlib\n"
        'GROUPS = ("flowctl.spark.job", "not.ours", "flowctl uses spark")\n'
        "def load(name):\n"
        "    return importlib.import_module(name)\n"
    )
    names = [name for _, name in _imports("flowctl.loader", path)]
    assert "flowctl.spark.job" in names
    assert "flowctl uses spark" not in names and "not.ours" not in names
    assert room_of("bench.lib.submit") == BENCH


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_loop() -> None:
    assert _cycles(_edges()) == []


def test_the_loop_check_finds_a_loop() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
