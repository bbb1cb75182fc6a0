"""Exponential backoff policies and a retry helper (SPEC G, seed 003).

Three policies from the seed, each a pure function of the attempt number plus an
injectable ``random.Random``:

- :class:`TruncatedBinaryBackoff`: CSMA/CD. After collision ``c`` wait ``k`` slots,
  ``k`` uniform in ``[0, 2**min(c, 10) - 1]``; give up after 16 collisions.
- :class:`FlumeBackoff`: Flume's SpoolDirectorySource. 250 ms, doubled per failure up
  to ``maxBackoff`` (4000 ms); a success starts again from the beginning.
- :class:`HadoopBackoff`: Hadoop's ``ExponentialBackoffRetry``:
  ``min(base * 2**n, cap) * uniform(0.5, 1.5)`` before retry ``n``; ``0 <= maxRetries < 63``.

A policy is an iterable of delays in seconds (a fresh iterator is a reset, which is
Flume's "reset on success"); a finite iterable means "give up". :func:`retry` runs an
operation under a policy with an injected ``sleep`` so the core never blocks by itself
and tests never sleep. Every retry in the platform (Kafka produce, memcached, database
flush, control signals, replays) goes through these policies.
"""

from __future__ import annotations

import logging
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

__all__ = [
    "BackoffPolicy",
    "FlumeBackoff",
    "HadoopBackoff",
    "RetryError",
    "TruncatedBinaryBackoff",
    "retry",
]

T = TypeVar("T")

_log = logging.getLogger(__name__)


def _check_positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{name} must be a number > 0, got {value!r}")
    return float(value)


def _check_attempt(attempt: int) -> None:
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        raise ValueError(f"attempt must be an int >= 1, got {attempt!r}")


class BackoffPolicy(ABC):
    """A retry schedule: the delay before retry number ``attempt`` (1-based).

    ``delay(attempt)`` returns seconds, or ``None`` once the policy gives up. Iterating a
    policy yields ``delay(1), delay(2), ...`` until ``None``: each ``iter()`` starts over,
    which is how a caller "resets on success". Callers that keep an attempt count in
    durable state (the replay envelope) call :meth:`delay` directly.
    """

    @abstractmethod
    def delay(self, attempt: int) -> float | None:
        """Seconds to wait before retry ``attempt`` (>= 1), or ``None`` to give up."""

    def __iter__(self) -> Iterator[float]:
        attempt = 1
        while (wait := self.delay(attempt)) is not None:
            yield wait
            attempt += 1


class TruncatedBinaryBackoff(BackoffPolicy):
    """CSMA/CD truncated binary exponential backoff.

    After collision ``c`` the sender waits ``k * slot_s`` with ``k`` uniform in
    ``[0, 2**min(c, truncate_at) - 1]``; after ``max_collisions`` (16 on Ethernet) it
    reports failure. The random spread is the point: two senders that collided pick
    different slots with rising probability. With ``jitter=False`` ``k`` is the top of
    the range, the worst case, so tests get exact values.
    """

    def __init__(
        self,
        slot_s: float,
        *,
        truncate_at: int = 10,
        max_collisions: int = 16,
        jitter: bool = True,
        rng: random.Random | None = None,
    ) -> None:
        self.slot_s = _check_positive("slot_s", slot_s)
        if isinstance(truncate_at, bool) or not isinstance(truncate_at, int) or truncate_at < 1:
            raise ValueError(f"truncate_at must be an int >= 1, got {truncate_at!r}")
        if (
            isinstance(max_collisions, bool)
            or not isinstance(max_collisions, int)
            or max_collisions < 1
        ):
            raise ValueError(f"max_collisions must be an int >= 1, got {max_collisions!r}")
        self.truncate_at = truncate_at
        self.max_collisions = max_collisions
        self.jitter = jitter
        self._rng = rng if rng is not None else random.Random()

    def delay(self, attempt: int) -> float | None:
        _check_attempt(attempt)
        if attempt > self.max_collisions:
            return None
        top = (1 << min(attempt, self.truncate_at)) - 1
        slots = self._rng.randint(0, top) if self.jitter else top
        return slots * self.slot_s


class FlumeBackoff(BackoffPolicy):
    """Flume 1.7 SpoolDirectorySource backoff: start, double, cap; never truncated.

    Delays are ``initial_s, 2*initial_s, ...`` capped at ``max_s`` (Flume: 250 ms and
    ``maxBackoff`` = 4000 ms). Flume retries forever; ``max_attempts`` bounds it for
    callers that must give up (every wait in the platform has a timeout). No jitter:
    Flume has none and a single source does not collide with itself.
    """

    def __init__(
        self, initial_s: float = 0.25, max_s: float = 4.0, *, max_attempts: int | None = None
    ) -> None:
        self.initial_s = _check_positive("initial_s", initial_s)
        self.max_s = _check_positive("max_s", max_s)
        if self.initial_s > self.max_s:
            raise ValueError(f"initial_s={initial_s!r} must be <= max_s={max_s!r}")
        if max_attempts is not None and (
            isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 0
        ):
            raise ValueError(f"max_attempts must be None or an int >= 0, got {max_attempts!r}")
        self.max_attempts = max_attempts

    def delay(self, attempt: int) -> float | None:
        _check_attempt(attempt)
        if self.max_attempts is not None and attempt > self.max_attempts:
            return None
        # Doubling stops mattering once past the cap; bounding the exponent avoids huge ints.
        doublings = min(attempt - 1, 64)
        return min(self.initial_s * (1 << doublings), self.max_s)


class HadoopBackoff(BackoffPolicy):
    """Hadoop ``RetryPolicies.exponentialBackoffRetry``.

    Hadoop sleeps ``calculateExponentialTime(sleepTime, retries + 1)`` where ``retries``
    counts earlier retries, so retry ``n`` (1-based) waits
    ``min(base_s * 2**n, cap_s) * uniform(0.5, 1.5)``. ``max_retries`` must satisfy
    ``0 <= max_retries < 63`` exactly as in Hadoop (there the shift would overflow a
    long). ``jitter=False`` uses the factor 1.0 for exact test values.
    """

    def __init__(
        self,
        base_s: float,
        max_retries: int,
        *,
        cap_s: float | None = None,
        jitter: bool = True,
        rng: random.Random | None = None,
    ) -> None:
        self.base_s = _check_positive("base_s", base_s)
        if isinstance(max_retries, bool) or not isinstance(max_retries, int):
            raise ValueError(f"max_retries must be an int, got {max_retries!r}")
        if max_retries < 0:
            raise ValueError(f"max_retries = {max_retries} < 0")
        if max_retries >= 63:
            raise ValueError(f"max_retries = {max_retries} >= 63")
        self.max_retries = max_retries
        self.cap_s = None if cap_s is None else _check_positive("cap_s", cap_s)
        self.jitter = jitter
        self._rng = rng if rng is not None else random.Random()

    def delay(self, attempt: int) -> float | None:
        _check_attempt(attempt)
        if attempt > self.max_retries:
            return None
        base = self.base_s * (1 << attempt)
        if self.cap_s is not None:
            base = min(base, self.cap_s)
        factor = self._rng.random() + 0.5 if self.jitter else 1.0
        return base * factor


class RetryError(RuntimeError):
    """An operation still failed when its backoff policy gave up.

    Carries the operation's description, how many attempts were made and the last
    error (also chained as ``__cause__``), so the log line says what gave up and why.
    """

    def __init__(self, operation: str, attempts: int, last_error: BaseException) -> None:
        super().__init__(
            f"{operation}: gave up after {attempts} attempt(s); "
            f"last error: {type(last_error).__name__}: {last_error}"
        )
        self.operation = operation
        self.attempts = attempts
        self.last_error = last_error


def retry(
    fn: Callable[[], T],
    policy: Iterable[float],
    *,
    sleep: Callable[[float], None],
    retry_on: type[BaseException] | tuple[type[BaseException], ...] = Exception,
    describe: str,
    max_attempts: int | None = None,
    logger: logging.Logger | None = None,
) -> T:
    """Call ``fn`` until it succeeds, waiting ``policy``'s delays between attempts.

    Only exceptions matching ``retry_on`` are retried; anything else propagates at once
    (a programming error should not be retried 16 times). When the policy runs out, or
    ``max_attempts`` calls were made, :class:`RetryError` names ``describe`` and the
    attempt count. ``sleep`` is injected: the adapters pass ``time.sleep``, tests pass a
    recorder.
    """
    if not describe:
        raise ValueError(f"describe must name the operation, got {describe!r}")
    if max_attempts is not None and (
        isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1
    ):
        raise ValueError(f"max_attempts must be None or an int >= 1, got {max_attempts!r}")
    log = logger if logger is not None else _log
    delays = iter(policy)
    attempts = 0
    while True:
        attempts += 1
        try:
            return fn()
        except retry_on as exc:
            out_of_attempts = max_attempts is not None and attempts >= max_attempts
            wait = None if out_of_attempts else next(delays, None)
            if wait is None:
                log.error("%s: giving up after %d attempt(s): %r", describe, attempts, exc)
                raise RetryError(describe, attempts, exc) from exc
            if wait < 0:
                raise ValueError(f"backoff policy produced a negative delay {wait!r}") from exc
            log.warning(
                "%s: attempt %d failed (%r); retrying in %.3f s", describe, attempts, exc, wait
            )
            sleep(wait)
