"""The adapters' retry defaults over the core's Hadoop-style backoff (SPEC G).

Every adapter retries transient I/O errors (a broker or database briefly away)
the same way: ``min(base * 2**n, cap) * uniform(0.5, 1.5)`` between attempts,
a bounded number of attempts, then :class:`RetriesExhausted` naming what was
being done, so a dead service never turns into a silent hang.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from flowctl.core.backoff import HadoopBackoff, RetryError, retry

T = TypeVar("T")

log = logging.getLogger(__name__)

#: What the adapters raise when a retried operation keeps failing (``__cause__`` = last error).
RetriesExhausted = RetryError


def retry_call(
    fn: Callable[[], T],
    *,
    what: str,
    retry_on: tuple[type[BaseException], ...],
    attempts: int = 6,
    base_s: float = 0.05,
    cap_s: float = 4.0,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call ``fn``; retry ``retry_on`` errors with backoff, at most ``attempts`` calls in all.

    Other exceptions propagate at once: retrying a programming error only hides it.
    """
    if isinstance(attempts, bool) or not isinstance(attempts, int) or not 1 <= attempts <= 63:
        raise ValueError(f"attempts={attempts!r} must be an integer in [1, 63]")
    policy = HadoopBackoff(base_s, attempts - 1, cap_s=cap_s)
    return retry(
        fn, policy, sleep=sleep, retry_on=retry_on, describe=what, max_attempts=attempts, logger=log
    )
