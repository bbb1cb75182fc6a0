"""What the control plane and the driver's process say about one topology, as one status.

The stream task asks this when its retry decides between reattaching and submitting
again, and every second while it follows a topology; the rule itself is the pure
:func:`flowctl.core.driver_status.driver_status`.
"""

from __future__ import annotations

import logging

from flowctl.adapters.control_plane import LIVE_HEARTBEAT_S, ControlPlane, UnknownTopology
from flowctl.adapters.detached_driver import ELSEWHERE, EXITED, DetachedDriver
from flowctl.adapters.schema import utcnow
from flowctl.core.driver_status import DriverEvidence, driver_status

log = logging.getLogger(__name__)


def evidence(
    plane: ControlPlane, topology_id: str, driver: DetachedDriver | None
) -> DriverEvidence:
    """The topology's row and its driver's process now. A control plane that cannot be
    read counts as "not registered": the process decides where it can be seen."""
    process = driver.process_state() if driver is not None else ELSEWHERE
    exit_code = driver.exit_code() if driver is not None and process == EXITED else None
    try:
        topo = plane.get_topology(topology_id)
    except UnknownTopology:
        return DriverEvidence(None, None, process, exit_code)
    except Exception as exc:  # the database may be away for a while: the driver goes on
        log.warning("topology %s: control plane unreadable: %s", topology_id, exc)
        return DriverEvidence(None, None, process, exit_code)
    age = None
    if topo.heartbeat_at is not None:
        age = (utcnow() - topo.heartbeat_at).total_seconds()
    return DriverEvidence(topo.state, age, process, exit_code)


def topology_status(plane: ControlPlane, topology_id: str, driver: DetachedDriver | None) -> str:
    """:func:`~flowctl.core.driver_status.driver_status` of the topology now."""
    return driver_status(evidence(plane, topology_id, driver), LIVE_HEARTBEAT_S)
