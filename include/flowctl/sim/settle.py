"""When has a lane's window settled? A precise, measurable definition.

Additive increase / decrease never stops moving a window: at its operating
point it oscillates by one around the value where rt meets the threshold. So
"settled" means "inside a band around the operating point for good":

* the series is the window at the end of each of the lane's rounds (a round
  = a full window of acks, :class:`flowctl.core.window.AdaptiveWindow`),
  counted only while the lane could have taken more (the source had tuples
  waiting), so the drain at the end of a run does not count;
* the operating point ``m`` is the centre of the last half of the series (the
  midpoint of its 5th and 95th percentiles);
* the lane has settled at round ``r`` (1-based) if every window from round
  ``r`` on lies in ``[m - band, m + band]`` (``band = 1`` by default: the AIMD
  oscillation itself).

The settle round is None when a lane has fewer than ``min_rounds`` rounds (not
enough evidence either way) or is outside the band at its last round (it did
not settle within the run).
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def operating_point(windows: Sequence[int]) -> float:
    """Centre of the last half of the per-round windows: the midpoint of its 5th
    and 95th nearest-rank percentiles (the middle of the oscillation, not the
    most frequent value, which sits at one edge of a sawtooth)."""
    if not windows:
        raise ValueError("operating_point: windows must not be empty")
    tail = sorted(windows[len(windows) // 2 :])

    def rank(q: float) -> int:
        return tail[max(1, math.ceil(q * len(tail))) - 1]

    return (rank(0.05) + rank(0.95)) / 2


def settle_round(windows: Sequence[int], *, band: int = 1, min_rounds: int = 6) -> int | None:
    """First round (1-based) from which every window stays within ``band`` of the
    operating point; None with too few rounds or when it never settles."""
    if band < 0:
        raise ValueError(f"settle_round: band must be >= 0, got {band!r}")
    if len(windows) < min_rounds:
        return None
    m = operating_point(windows)
    settled: int | None = None
    for i in range(len(windows) - 1, -1, -1):
        if abs(windows[i] - m) > band:
            break
        settled = i
    return None if settled is None else settled + 1
