"""A tuple's ``process`` under a deadline, in the worker's helper thread.

A timed-out call cannot be killed: its thread is abandoned (it ends on its own) and the
next tuple gets a fresh thread, so one stuck tuple never blocks the lane.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TypeVar

from flowctl.adapters.process_cache import cached, forget

#: The worker's helper thread that runs ``process`` (:mod:`flowctl.adapters.process_cache`).
_POOL = "flowctl._process_pool"

_In = TypeVar("_In")
_Out = TypeVar("_Out")

_current_lane: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "flowctl_lane", default=None
)


class TupleTimeout(TimeoutError):
    """A tuple's ``process`` exceeded its deadline."""


def current_lane() -> int | None:
    """The lane whose tuple is being processed (inside ``process``), else ``None``.

    For diagnostics and for test definitions that make one lane slow on purpose.
    """
    return _current_lane.get()


def _new_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="flowctl-process")


def run_with_deadline(fn: Callable[[_In], _Out], records: _In, timeout_s: float, lane: int) -> _Out:
    """``fn(records)`` in the worker's helper thread (with :func:`current_lane` set to
    ``lane``), raising :class:`TupleTimeout` after ``timeout_s``."""
    pool = cached(_POOL, "pool", _new_pool)
    token = _current_lane.set(lane)
    try:
        ctx = contextvars.copy_context()
    finally:
        _current_lane.reset(token)
    future = pool.submit(ctx.run, fn, records)
    try:
        return future.result(timeout=timeout_s)
    except FutureTimeout:
        pool.shutdown(wait=False, cancel_futures=True)
        forget(_POOL, "pool")
        raise TupleTimeout(f"process exceeded its deadline of {timeout_s:g} s") from None
