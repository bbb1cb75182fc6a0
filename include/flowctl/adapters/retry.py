"""Bounded retries with Hadoop-style exponential backoff for the adapters' I/O.

``delay = min(base * 2**attempt, cap) * uniform(0.5, 1.5)`` (SPEC G). The
adapters retry only errors that are worth retrying (a broker or database that
is briefly away) and give up after ``attempts`` tries with an error that says
what was being done, so a dead service never turns into a silent hang.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

log = logging.getLogger(__name__)


class RetriesExhausted(RuntimeError):
    """An operation failed on every attempt; ``__cause__`` is the last error."""


def backoff_delay(attempt: int, *, base_s: float, cap_s: float, rng: random.Random) -> float:
    """Seconds to wait before retry number ``attempt`` (0-based), jittered by +-50%."""
    if not 0 <= attempt < 63:
        raise ValueError(f"attempt={attempt!r} must be in [0, 63)")
    return min(base_s * (2**attempt), cap_s) * rng.uniform(0.5, 1.5)


def retry_call(
    fn: Callable[[], T],
    *,
    what: str,
    retry_on: tuple[type[BaseException], ...],
    attempts: int = 6,
    base_s: float = 0.1,
    cap_s: float = 4.0,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
) -> T:
    """Call ``fn`` until it succeeds, retrying ``retry_on`` errors at most ``attempts`` times.

    ``what`` names the operation in logs and in the final :class:`RetriesExhausted`.
    Other exceptions propagate at once: retrying a programming error only hides it.
    """
    if attempts < 1:
        raise ValueError(f"attempts={attempts!r} must be >= 1")
    rng = rng or random.Random()
    for attempt in range(attempts):
        try:
            return fn()
        except retry_on as exc:
            if attempt == attempts - 1:
                raise RetriesExhausted(
                    f"{what} failed after {attempts} attempts: {type(exc).__name__}: {exc}"
                ) from exc
            delay = backoff_delay(attempt, base_s=base_s, cap_s=cap_s, rng=rng)
            log.warning(
                "%s failed (attempt %d/%d, retrying in %.2f s): %s",
                what,
                attempt + 1,
                attempts,
                delay,
                exc,
            )
            sleep(delay)
    raise AssertionError("unreachable")  # the loop returns or raises
