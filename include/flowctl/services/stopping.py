"""Stop the live topologies through the control plane before their processes go.

A topology stopped by its ``stop`` signal flushes its MRWQ, records STOPPED and its Airflow
task ends; one whose processes are terminated instead (a Celery worker's warm shutdown
waits for its long-running task) costs the stop timeout and leaves the run to be closed.
``flowctl demo down`` and ``flowctl cluster down`` call this first.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from flowctl.config import Settings

Say = Callable[[str], None]


def stop_topologies(settings: Settings, say: Say, timeout: float = 90.0) -> None:
    """Send ``stop`` to every live topology (any pipeline) and wait until they end."""
    from flowctl.adapters.control_plane import TERMINAL_STATES, ControlPlane

    try:
        plane = ControlPlane(settings.resolved_database_url)
        plane.ensure_schema()
        live = plane.live_topologies()
    except Exception as exc:
        say(f"control plane unreachable ({exc}); skipping clean topology stop")
        return
    running = []
    for topo in live:
        plane.send_signal(topo.topology_id, "stop")
        running.append(topo.topology_id)
        say(f"sent stop to topology {topo.topology_id}")
    deadline = time.monotonic() + timeout
    while running and time.monotonic() < deadline:
        time.sleep(1.0)
        running = [t for t in running if plane.get_topology(t).state not in TERMINAL_STATES]
    for topology_id in running:
        say(f"topology {topology_id} did not stop within {timeout:.0f} s")
