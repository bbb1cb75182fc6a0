"""Round-trip-time estimator per lane (SPEC A; seed 000_7245d8bf028e7bc3).

The seed classifies every ack as NORMAL or SLOW by comparing its round-trip
time ``rt`` with a threshold. A fixed threshold does not fit lanes of different
speeds, so by default the threshold follows each lane, in the spirit of
RFC 6298 (TCP's retransmission timer):

    first sample:  srtt = rt,  rttvar = rt / 2
    later samples: rttvar = (1 - beta) * rttvar + beta * |srtt - rt|
                   srtt   = (1 - alpha) * srtt + alpha * rt
    threshold      = max(min_threshold, srtt + k * rttvar)

with alpha = 1/8, beta = 1/4, k = 4. The floor ``min_threshold`` keeps very
fast lanes (rt of a few milliseconds, tiny deviation) from calling ordinary
scheduling noise SLOW. A configured ``fixed_threshold`` replaces the estimate
(an explicit latency target: each lane's window then settles near
``fixed_threshold * lane rate``, Little's law).

Callers classify an ack with :meth:`RttEstimator.is_slow` *before* feeding the
sample with :meth:`RttEstimator.observe`, so a sample is judged against the
history, not against itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class RttSnapshot:
    """Immutable, picklable state of an :class:`RttEstimator` (config included)."""

    alpha: float
    beta: float
    k: float
    min_threshold: float
    fixed_threshold: float | None
    initial_threshold: float
    srtt: float | None
    rttvar: float | None
    samples: int


def _check_fraction(name: str, value: float) -> float:
    if not isinstance(value, int | float) or not 0.0 < value <= 1.0:
        raise ValueError(f"RttEstimator: {name} must be in (0, 1], got {value!r}")
    return float(value)


def _check_non_negative(name: str, value: float) -> float:
    if not isinstance(value, int | float) or math.isnan(value) or value < 0:
        raise ValueError(f"RttEstimator: {name} must be a number >= 0, got {value!r}")
    return float(value)


class RttEstimator:
    """EWMA of rt plus ``k`` times its mean deviation, or a fixed threshold.

    Before the first sample the threshold is ``initial_threshold`` (infinite by
    default: a lane with no history cannot be judged slow, and the seed starts
    every lane NORMAL because a fresh lane is idle).
    """

    def __init__(
        self,
        *,
        alpha: float = 0.125,
        beta: float = 0.25,
        k: float = 4.0,
        min_threshold: float = 0.0,
        fixed_threshold: float | None = None,
        initial_threshold: float = math.inf,
    ) -> None:
        self._alpha = _check_fraction("alpha", alpha)
        self._beta = _check_fraction("beta", beta)
        self._k = _check_non_negative("k", k)
        self._min_threshold = _check_non_negative("min_threshold", min_threshold)
        if fixed_threshold is not None and (
            not isinstance(fixed_threshold, int | float) or not fixed_threshold > 0
        ):
            raise ValueError(
                f"RttEstimator: fixed_threshold must be a number > 0 or None, "
                f"got {fixed_threshold!r}"
            )
        self._fixed = None if fixed_threshold is None else float(fixed_threshold)
        if not isinstance(initial_threshold, int | float) or not initial_threshold > 0:
            raise ValueError(
                f"RttEstimator: initial_threshold must be > 0, got {initial_threshold!r}"
            )
        self._initial = float(initial_threshold)
        self._srtt: float | None = None
        self._rttvar: float | None = None
        self._samples = 0

    @property
    def srtt(self) -> float | None:
        """Smoothed rt, or None before the first sample."""
        return self._srtt

    @property
    def rttvar(self) -> float | None:
        """Smoothed mean deviation of rt, or None before the first sample."""
        return self._rttvar

    @property
    def samples(self) -> int:
        """Number of rt samples observed."""
        return self._samples

    def threshold(self) -> float:
        """The rt above which an ack is SLOW."""
        if self._fixed is not None:
            return self._fixed
        if self._srtt is None or self._rttvar is None:
            return max(self._min_threshold, self._initial)
        return max(self._min_threshold, self._srtt + self._k * self._rttvar)

    def is_slow(self, rt: float) -> bool:
        """True when ``rt`` is over the current threshold (strictly)."""
        return _check_rt(rt) > self.threshold()

    def observe(self, rt: float) -> None:
        """Feed one rt sample (seconds, >= 0) into the estimate."""
        rt = _check_rt(rt)
        if self._srtt is None or self._rttvar is None:
            self._srtt = rt
            self._rttvar = rt / 2.0
        else:
            self._rttvar = (1.0 - self._beta) * self._rttvar + self._beta * abs(self._srtt - rt)
            self._srtt = (1.0 - self._alpha) * self._srtt + self._alpha * rt
        self._samples += 1

    def snapshot(self) -> RttSnapshot:
        """An immutable copy of the configuration and the estimate."""
        return RttSnapshot(
            alpha=self._alpha,
            beta=self._beta,
            k=self._k,
            min_threshold=self._min_threshold,
            fixed_threshold=self._fixed,
            initial_threshold=self._initial,
            srtt=self._srtt,
            rttvar=self._rttvar,
            samples=self._samples,
        )

    @classmethod
    def from_snapshot(cls, snap: RttSnapshot) -> RttEstimator:
        """Rebuild an estimator, history included, from :meth:`snapshot`."""
        est = cls(
            alpha=snap.alpha,
            beta=snap.beta,
            k=snap.k,
            min_threshold=snap.min_threshold,
            fixed_threshold=snap.fixed_threshold,
            initial_threshold=snap.initial_threshold,
        )
        if (snap.srtt is None) != (snap.rttvar is None):
            raise ValueError(
                f"RttSnapshot: srtt and rttvar must both be set or both None, "
                f"got srtt={snap.srtt!r} rttvar={snap.rttvar!r}"
            )
        est._srtt = snap.srtt
        est._rttvar = snap.rttvar
        est._samples = snap.samples
        return est


def _check_rt(rt: float) -> float:
    if not isinstance(rt, int | float) or math.isnan(rt) or rt < 0:
        raise ValueError(f"RttEstimator: rt must be a number >= 0 seconds, got {rt!r}")
    return float(rt)
