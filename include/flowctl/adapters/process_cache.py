"""Per-process caches that survive between the tasks a Spark Python worker runs.

A Python worker runs many tasks, and module globals do not survive between them, but
``sys.modules`` does: each cache is a dict on a module object registered there under the
cache's name. The lanes keep their Kafka consumers (connecting costs more than reading a
small lane), pipeline configs, memcached clients and deadline thread this way, and the
planner process its planners.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def entries(name: str) -> dict[str, Any]:
    """The cache ``name``: a dict kept for the life of this process."""
    cache = sys.modules.get(name)
    if cache is None:
        cache = types.ModuleType(
            name, "A per-process cache of flowctl (flowctl.adapters.process_cache)."
        )
        sys.modules[name] = cache
    found: dict[str, Any] = vars(cache).setdefault("entries", {})
    return found


def cached(name: str, key: str, build: Callable[[], T]) -> T:
    """The object under ``key`` in the cache ``name``, built by ``build`` if absent."""
    found = entries(name)
    value: T | None = found.get(key)
    if value is None:
        value = build()
        found[key] = value
    return value


def forget(name: str, key: str) -> Any | None:
    """Remove and return the object under ``key`` in the cache ``name`` (if any)."""
    return entries(name).pop(key, None)
