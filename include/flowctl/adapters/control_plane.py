"""The control plane: topology registry, control signals, durable offsets, metrics windows.

The one place where the Spark driver, Airflow operators/sensors and the CLI
meet: a topology registers and heartbeats here, Airflow sends it signals here
(``stop``, ``drain``, ``deactivate``) and reads its metrics windows here.
Every call is one short transaction, retried on transient database errors.
Bad values raise ``ValueError`` naming the field and the value before anything
is written.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import sqlalchemy as sa

from flowctl.adapters import schema, schema_setup
from flowctl.adapters.checks import check_int, check_text
from flowctl.adapters.db import engine_for, in_transaction
from flowctl.adapters.metrics_windows import MetricsWindow, MetricsWindowRows
from flowctl.adapters.schema import SIGNAL_KINDS, TOPOLOGY_STATES, utcnow
from flowctl.core.window_figures import WindowFigures, lane_list

__all__ = ["ControlPlane", "MetricsWindow", "WindowFigures", "lane_list"]

T = TypeVar("T")

#: States a topology never leaves.
TERMINAL_STATES = frozenset({"STOPPED", "FAILED"})
#: An ACTIVE topology whose heartbeat is older than this is taken for dead (its driver was
#: killed without recording FAILED): a restart may register. Drivers beat every second.
LIVE_HEARTBEAT_S = 5.0


class UnknownTopology(LookupError):
    """No topology with that id is registered."""


class AdmissionConflict(RuntimeError):
    """A second topology that would admit while the pipeline's ACTIVE one is alive."""


@dataclass(frozen=True)
class Topology:
    """One registered topology (a streaming job generation)."""

    topology_id: str
    pipeline: str
    colour: str
    generation: int
    parallelism: int
    state: str
    heartbeat_at: dt.datetime | None
    spark_app_id: str | None
    airflow_run_id: str | None
    created_at: dt.datetime
    updated_at: dt.datetime


@dataclass(frozen=True)
class Signal:
    """A control signal sent to a topology; ``handled_at`` is None while pending."""

    id: int
    topology_id: str
    kind: str
    created_at: dt.datetime
    handled_at: dt.datetime | None


def _check_state(state: str) -> str:
    if state not in TOPOLOGY_STATES:
        raise ValueError(f"state={state!r} is not one of {', '.join(TOPOLOGY_STATES)}")
    return state


def _check_kind(kind: str) -> str:
    if kind not in SIGNAL_KINDS:
        raise ValueError(f"kind={kind!r} is not one of {', '.join(SIGNAL_KINDS)}")
    return kind


def _beating(heartbeat_at: dt.datetime | None, now: dt.datetime) -> bool:
    """Whether a driver that last beat at ``heartbeat_at`` counts as alive at ``now``."""
    return heartbeat_at is not None and (now - heartbeat_at).total_seconds() < LIVE_HEARTBEAT_S


def _admission_conflict(conn: sa.Connection, pipeline: str, topology_id: str) -> str | None:
    """Why ``topology_id`` may not register now (a live ACTIVE twin), or None."""
    t, r = schema.topologies, schema.replacement_events
    now = utcnow()
    live = [
        (row.topology_id, (now - row.heartbeat_at).total_seconds())
        for row in conn.execute(
            sa.select(t.c.topology_id, t.c.heartbeat_at).where(
                t.c.pipeline == pipeline, t.c.state == "ACTIVE"
            )
        )
        if _beating(row.heartbeat_at, now)
    ]
    if not live:
        return None
    green = conn.execute(
        sa.select(r.c.id).where(
            r.c.pipeline == pipeline,
            r.c.outcome == "running",
            r.c.new_topology_id == topology_id,
        )
    ).first()
    if green is not None:
        return None
    active, age = live[0]
    return (
        f"topology_id={topology_id!r} refused: pipeline {pipeline!r} already has the ACTIVE "
        f"topology {active!r} (heartbeat {age:.1f} s ago), and two topologies of one "
        f"pipeline must not admit at once; only the green of a running replacement may "
        f"register now (change the parallelism with rescale_{pipeline}, or stop {active!r} "
        f"first)"
    )


class ControlPlane(MetricsWindowRows):
    """The control database at ``url`` (SQLite or PostgreSQL SQLAlchemy URL, or an engine)."""

    def __init__(self, url: str | sa.Engine) -> None:
        self.engine = engine_for(url)

    def _tx(self, what: str, work: Callable[[sa.Connection], T]) -> T:
        return in_transaction(self.engine, work, what=what)

    # -- schema -----------------------------------------------------------------------------

    def ensure_schema(self) -> None:
        """Create missing tables; refuse a database with another schema version."""
        in_transaction(
            self.engine,
            lambda _conn: None,
            what="connecting to the control database",
        )
        schema_setup.ensure_schema(self.engine)

    # -- topologies -------------------------------------------------------------------------

    def register_topology(
        self,
        topology_id: str,
        pipeline: str,
        colour: str,
        parallelism: int,
        *,
        generation: int | None = None,
        airflow_run_id: str | None = None,
        wait_s: float = LIVE_HEARTBEAT_S + 1.0,
        warm_standby: bool = False,
    ) -> Topology:
        """Register a new topology in state STARTING and return it.

        ``generation`` defaults to one more than the pipeline's highest so far.
        Registering an existing id again is an error (ids name one run).

        At most one topology of a pipeline admits: while the pipeline has a live ACTIVE
        topology, only the green of its running replacement (the event's
        ``new_topology_id``, started standby) may register; anything else raises
        :class:`AdmissionConflict`. An ACTIVE one whose heartbeat stopped
        :data:`LIVE_HEARTBEAT_S` ago is dead (a killed driver): registration waits up to
        ``wait_s`` for that to show, so a restart after a crash goes through.

        A ``warm_standby`` (started ``--standby`` ahead of any replacement, admitting
        nothing until the next replacement of the pipeline takes it and sends
        ``activate``) registers beside a live ACTIVE topology.
        """
        check_text("topology_id", topology_id)
        check_text("pipeline", pipeline)
        check_text("colour", colour)
        check_int("parallelism", parallelism, 1)
        if generation is not None:
            check_int("generation", generation, 0)
        t = schema.topologies
        deadline = time.monotonic() + wait_s

        def work(conn: sa.Connection) -> None:
            if conn.execute(
                sa.select(t.c.topology_id).where(t.c.topology_id == topology_id)
            ).first():
                raise ValueError(f"topology_id={topology_id!r} is already registered")
            conflict = None if warm_standby else _admission_conflict(conn, pipeline, topology_id)
            if conflict:
                raise AdmissionConflict(conflict)
            gen = generation
            if gen is None:
                top = conn.execute(
                    sa.select(sa.func.max(t.c.generation)).where(t.c.pipeline == pipeline)
                ).scalar()
                gen = 1 if top is None else top + 1
            now = utcnow()
            conn.execute(
                t.insert().values(
                    topology_id=topology_id,
                    pipeline=pipeline,
                    colour=colour,
                    generation=gen,
                    parallelism=parallelism,
                    state="STARTING",
                    heartbeat_at=now,
                    airflow_run_id=airflow_run_id,
                    created_at=now,
                    updated_at=now,
                )
            )

        while True:
            try:
                self._tx(f"registering topology {topology_id!r}", work)
                return self.get_topology(topology_id)
            except AdmissionConflict:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.5)

    def set_state(self, topology_id: str, state: str) -> Topology:
        """Move a topology to ``state``; STOPPED and FAILED are final (re-setting is a no-op)."""
        _check_state(state)
        t = schema.topologies

        def work(conn: sa.Connection) -> None:
            current = conn.execute(
                sa.select(t.c.state).where(t.c.topology_id == topology_id)
            ).scalar()
            if current is None:
                raise UnknownTopology(f"topology_id={topology_id!r} is not registered")
            if current == state:
                return
            if current in TERMINAL_STATES:
                raise ValueError(
                    f"topology {topology_id!r} is {current}; state={state!r} is not allowed "
                    f"after a final state"
                )
            conn.execute(
                t.update()
                .where(t.c.topology_id == topology_id)
                .values(state=state, updated_at=utcnow())
            )

        self._tx(f"setting {topology_id!r} to {state}", work)
        return self.get_topology(topology_id)

    def set_spark_app_id(self, topology_id: str, spark_app_id: str) -> None:
        """Record the Spark application id of the topology's driver (for the UI and logs)."""
        check_text("spark_app_id", spark_app_id)
        self._update(topology_id, spark_app_id=spark_app_id, updated_at=utcnow())

    def set_parallelism(self, topology_id: str, parallelism: int) -> None:
        """Give a standby topology its lanes before ``activate`` (a warm standby started
        ahead of a replacement takes the replacement's parallelism; the job reads it at
        activation)."""
        check_int("parallelism", parallelism, 1)
        self._update(topology_id, parallelism=parallelism, updated_at=utcnow())

    def heartbeat(self, topology_id: str) -> None:
        """Record that the topology's driver is alive now."""
        self._update(topology_id, heartbeat_at=utcnow())

    def _update(self, topology_id: str, **values: Any) -> None:
        t = schema.topologies

        def work(conn: sa.Connection) -> None:
            result = conn.execute(t.update().where(t.c.topology_id == topology_id).values(**values))
            if result.rowcount == 0:
                raise UnknownTopology(f"topology_id={topology_id!r} is not registered")

        self._tx(f"updating topology {topology_id!r}", work)

    def get_topology(self, topology_id: str) -> Topology:
        """The topology ``topology_id``; :class:`UnknownTopology` if it is not registered."""
        t = schema.topologies
        row = self._tx(
            f"reading topology {topology_id!r}",
            lambda conn: conn.execute(sa.select(t).where(t.c.topology_id == topology_id)).first(),
        )
        if row is None:
            raise UnknownTopology(f"topology_id={topology_id!r} is not registered")
        return Topology(**row._mapping)

    def topologies(self, pipeline: str, *, states: Iterable[str] | None = None) -> list[Topology]:
        """The pipeline's topologies (optionally only those in ``states``), oldest first."""
        t = schema.topologies
        query = sa.select(t).where(t.c.pipeline == pipeline)
        if states is not None:
            wanted = [_check_state(s) for s in states]
            query = query.where(t.c.state.in_(wanted))
        query = query.order_by(t.c.generation, t.c.created_at)
        rows = self._tx(
            f"listing topologies of {pipeline!r}", lambda conn: conn.execute(query).all()
        )
        return [Topology(**row._mapping) for row in rows]

    def admission_conflict(self, pipeline: str, topology_id: str) -> str | None:
        """Why ``topology_id`` could not register now (see :meth:`register_topology`),
        or None: asked before a job is started, so a refusal costs no Spark start-up."""
        return self._tx(
            f"checking admission of {topology_id!r}",
            lambda conn: _admission_conflict(conn, pipeline, topology_id),
        )

    def live_topologies(self) -> list[Topology]:
        """Every pipeline's topologies that are not in a terminal state and whose driver
        beat within :data:`LIVE_HEARTBEAT_S` (a killed driver's row stays behind), oldest
        first."""
        t = schema.topologies
        query = sa.select(t).where(t.c.state.not_in(TERMINAL_STATES)).order_by(t.c.created_at)
        rows = self._tx("listing live topologies", lambda conn: conn.execute(query).all())
        now = utcnow()
        return [Topology(**row._mapping) for row in rows if _beating(row.heartbeat_at, now)]

    # -- control signals --------------------------------------------------------------------

    def send_signal(self, topology_id: str, kind: str) -> int:
        """Queue signal ``kind`` for the topology and return its id."""
        _check_kind(kind)
        t, s = schema.topologies, schema.control_signals

        def work(conn: sa.Connection) -> int:
            if not conn.execute(
                sa.select(t.c.topology_id).where(t.c.topology_id == topology_id)
            ).first():
                raise UnknownTopology(f"topology_id={topology_id!r} is not registered")
            result = conn.execute(
                s.insert().values(topology_id=topology_id, kind=kind, created_at=utcnow())
            )
            return int(result.inserted_primary_key[0])

        return self._tx(f"sending {kind} to {topology_id!r}", work)

    def pending_signals(self, topology_id: str) -> list[Signal]:
        """Signals not yet handled, oldest first."""
        s = schema.control_signals
        query = (
            sa.select(s)
            .where(s.c.topology_id == topology_id, s.c.handled_at.is_(None))
            .order_by(s.c.id)
        )
        rows = self._tx(
            f"reading signals of {topology_id!r}", lambda conn: conn.execute(query).all()
        )
        return [Signal(**row._mapping) for row in rows]

    def signals(self, topology_id: str) -> list[Signal]:
        """Every signal of the topology, handled or not, oldest first."""
        s = schema.control_signals
        query = sa.select(s).where(s.c.topology_id == topology_id).order_by(s.c.id)
        rows = self._tx(
            f"reading signals of {topology_id!r}", lambda conn: conn.execute(query).all()
        )
        return [Signal(**row._mapping) for row in rows]

    def mark_signal_handled(self, signal_id: int) -> None:
        """Mark a signal handled (idempotent: the first handling time is kept)."""
        s = schema.control_signals

        def work(conn: sa.Connection) -> None:
            exists = conn.execute(sa.select(s.c.id).where(s.c.id == signal_id)).first()
            if exists is None:
                raise ValueError(f"signal_id={signal_id!r} does not exist")
            conn.execute(
                s.update()
                .where(s.c.id == signal_id, s.c.handled_at.is_(None))
                .values(handled_at=utcnow())
            )

        self._tx(f"marking signal {signal_id} handled", work)

    # -- durable offsets --------------------------------------------------------------------

    def committed_offsets(self, pipeline: str, topic: str) -> dict[int, int]:
        """``{partition: next offset to process}``: where a restart of the pipeline resumes.

        Advanced only by the results sink, in the transaction that stores the
        results; partitions never processed are absent.
        """
        o = schema.offsets
        query = sa.select(o.c.partition, o.c.next_offset).where(
            o.c.pipeline == pipeline, o.c.topic == topic
        )
        rows = self._tx(
            f"reading offsets of {pipeline}/{topic}", lambda conn: conn.execute(query).all()
        )
        return {int(p): int(n) for p, n in sorted(rows)}
