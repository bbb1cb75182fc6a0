"""Stop the live topologies through the control plane before their processes go.

A topology stopped by its ``stop`` signal flushes its MRWQ, records STOPPED and its Airflow
task ends; one whose processes are terminated instead (a Celery worker's warm shutdown
waits for its long-running task) costs the stop timeout and leaves the run to be closed.
``flowctl demo down`` and ``flowctl cluster down`` call this first, and
:func:`end_detached_drivers` once Airflow is down: a stream task's driver runs detached
from Airflow (so that it outlives a dead worker), so stopping Airflow's process tree
does not end it.
"""

from __future__ import annotations

import signal
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
        for topology_id in list(running):
            state = plane.get_topology(topology_id).state
            if state in TERMINAL_STATES:  # each one confirmed, in the state it ended in
                running.remove(topology_id)
                say(f"topology {topology_id} {state}")
    for topology_id in running:
        say(f"topology {topology_id} did not stop within {timeout:.0f} s")


def end_detached_drivers(settings: Settings, say: Say, grace_s: float = 15.0) -> None:
    """End the detached stream drivers of ``settings.home`` still running on this host
    (a topology that did not stop in time, or whose control plane was unreachable):
    SIGTERM to each driver's process group, SIGKILL to what is left after ``grace_s``."""
    from flowctl.adapters.detached_driver import leftover_drivers

    left = leftover_drivers(settings.home)
    for driver in left:
        say(f"ending detached driver {driver.directory.name} (keeper pid {driver.keeper_pid})")
        driver.kill(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = [d for d in left if d.keeper_alive()]
    for driver in left:
        say(f"detached driver {driver.directory.name} ignored SIGTERM: killed")
        driver.kill(signal.SIGKILL)
