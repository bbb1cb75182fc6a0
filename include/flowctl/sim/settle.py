"""When has a lane's window settled? A precise, measurable definition.

Additive increase / decrease never stops moving a window: at its operating
point it oscillates around the value where rt meets the threshold, and
service-time noise adds an occasional extra step. So "settled" means "inside
the steady band for good":

* the series is the window at the end of each of the lane's rounds (a round
  = a full window of acks, :class:`flowctl.core.window.AdaptiveWindow`),
  counted only while the source had tuples waiting (so the drain at the end
  of a run, when windows no longer limit anything, does not count);
* the steady band is the range between the 5th and the 95th nearest-rank
  percentiles of the last half of the series, widened by ``slack`` windows
  (default 1: one AIMD step) on each side;
* the lane has settled at round ``r`` (1-based) if every window from round
  ``r`` to the end lies in the steady band.

The settle round is None when a lane has fewer than ``min_rounds`` rounds (not
enough evidence) or its last round is outside the band. The band itself is
reported beside it, so a wide oscillation cannot pass for a settled window.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def steady_band(windows: Sequence[int], *, slack: int = 1) -> tuple[int, int]:
    """(low, high) of the steady band of a per-round window series."""
    if not windows:
        raise ValueError("steady_band: windows must not be empty")
    if slack < 0:
        raise ValueError(f"steady_band: slack must be >= 0, got {slack!r}")
    tail = sorted(windows[len(windows) // 2 :])

    def rank(q: float) -> int:
        return tail[max(1, math.ceil(q * len(tail))) - 1]

    return rank(0.05) - slack, rank(0.95) + slack


def settle_round(windows: Sequence[int], *, slack: int = 1, min_rounds: int = 6) -> int | None:
    """First round (1-based) from which every window stays in the steady band;
    None with too few rounds or when the last round is outside it."""
    if len(windows) < min_rounds:
        return None
    low, high = steady_band(windows, slack=slack)
    settled: int | None = None
    for i in range(len(windows) - 1, -1, -1):
        if not low <= windows[i] <= high:
            break
        settled = i
    return None if settled is None else settled + 1
