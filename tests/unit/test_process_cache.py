"""The per-process caches the lanes and the planner keep between a Spark worker's tasks."""

from __future__ import annotations

import importlib
import sys

from flowctl.adapters import process_cache
from flowctl.adapters.process_cache import cached, entries, forget


def test_an_entry_is_built_once_and_survives_a_reimport_of_the_module() -> None:
    name = "flowctl._test_cache_survives"
    built: list[str] = []

    def build() -> object:
        built.append("x")
        return object()

    first = cached(name, "k", build)
    importlib.reload(process_cache)  # what a Spark worker's next task does to module globals
    assert process_cache.cached(name, "k", build) is first
    assert built == ["x"]
    del sys.modules[name]


def test_forget_removes_and_returns_the_entry_and_the_next_lookup_builds_anew() -> None:
    name = "flowctl._test_cache_forget"
    first = cached(name, "k", object)
    assert forget(name, "k") is first
    assert forget(name, "k") is None
    assert forget("flowctl._test_cache_never_made", "k") is None
    assert cached(name, "k", object) is not first
    assert set(entries(name)) == {"k"}
    del sys.modules[name]
    del sys.modules["flowctl._test_cache_never_made"]
