"""The failure-window policy the sensor and trigger tests decide with (not a test module)."""

from __future__ import annotations

from flowctl.core.scaling_policy import WindowPolicy

#: The paper's rule over A = 4 windows, C = 1, a 60 s cooldown, 1..16 lanes.
PAPER = WindowPolicy(
    policy="paper",
    history_windows=4,
    threshold_c=1.0,
    cooldown_s=60.0,
    min_parallelism=1,
    max_parallelism=16,
)
