"""Whether a stream task's topology still runs: the rule its retry reattaches by.

A stream task's driver runs detached from the task (``adapters/detached_driver.py``), so
a task whose runner or worker died may leave its topology running. The retry asks
:func:`driver_status` what became of it, from two sources:

- the control plane: the topology's state and the age of its heartbeat (the driver
  beats every second; a final state is written by the job itself);
- the driver's process, when it runs on the retry's host: alive, exited (with its exit
  code), gone without an exit code (SIGKILLed with its keeper), or on another host.

The answer is one word: a state of a running topology, or ``SUBMITTED`` (its process
runs, it has not registered yet) means *reattach*; ``STOPPED`` means it ended cleanly
(stopped by a signal: ``flowctl stream stop``, a replacement) and the task succeeds;
``FAILED`` and ``LOST`` (its driver died without recording a final state) mean *submit
again* from the durable checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "RUNNING_STATES",
    "DriverEvidence",
    "driver_status",
    "is_running",
]

#: The control plane's states of a topology whose driver has not ended.
RUNNING_STATES = frozenset({"STARTING", "READY", "ACTIVE", "DRAINING", "DRAINED"})
#: Its process runs here and it has not registered yet.
SUBMITTED = "SUBMITTED"
#: Its driver died without recording a final state.
LOST = "LOST"


@dataclass(frozen=True)
class DriverEvidence:
    """What is known of one topology's driver at one moment.

    :param state: the topology's state in the control plane; None if not registered.
    :param heartbeat_age_s: seconds since its last heartbeat; None if not registered.
    :param process: ``alive``, ``exited``, ``gone`` or ``elsewhere`` (the values of
        ``adapters.detached_driver``), ``elsewhere`` also when nothing local is known.
    :param exit_code: the driver's exit code once ``exited``.
    """

    state: str | None
    heartbeat_age_s: float | None
    process: str
    exit_code: int | None = None


def _beating(evidence: DriverEvidence, live_heartbeat_s: float) -> bool:
    age = evidence.heartbeat_age_s
    return age is not None and age < live_heartbeat_s


def driver_status(evidence: DriverEvidence, live_heartbeat_s: float) -> str:
    """The topology's status for a retry (module docstring); ``live_heartbeat_s`` is the
    heartbeat age up to which a driver counts as alive (the control plane's)."""
    if evidence.process not in ("alive", "exited", "gone", "elsewhere"):
        raise ValueError(
            f"process={evidence.process!r} is not one of alive, exited, gone, elsewhere"
        )
    state = evidence.state
    if state in ("STOPPED", "FAILED"):
        return state
    if evidence.process == "alive":
        return state if state is not None else SUBMITTED
    if evidence.process == "exited":
        # A job that stops cleanly records STOPPED before it returns 0; anything else
        # ended without its final state (a crash before or after registering).
        return "FAILED" if evidence.exit_code not in (None, 0) or state is None else LOST
    # gone (SIGKILLed with its keeper) or another host: only a live heartbeat says it runs
    if state is not None and _beating(evidence, live_heartbeat_s):
        return state
    return LOST


def is_running(status: str) -> bool:
    """Whether a retry reattaches to a topology of this status."""
    return status == SUBMITTED or status in RUNNING_STATES
