"""The ``handovers`` table: where an overlapped handover's parties meet durably.

The replace operator :meth:`~HandoverLog.open` s a row before it deactivates blue; blue's
job finds it (:meth:`~HandoverLog.for_blue`) and writes its frontier once
(:meth:`~HandoverLog.publish`); green's job reads it (:meth:`~HandoverLog.for_green`)
and stamps its progress (:meth:`~HandoverLog.stamp`). A job that finds no row hands over
sequentially, as before: the operator alone chooses the protocol.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from flowctl.adapters import schema
from flowctl.adapters.db import engine_for, inserted_id
from flowctl.core.handover import Frontier

#: The columns :meth:`HandoverLog.stamp` may set.
STAMPS = ("green_admitting_at", "blue_gone_at", "note")


@dataclass(frozen=True)
class Handover:
    """One row of ``handovers``; ``frontier`` is ``None`` until blue published it."""

    id: int
    pipeline: str
    event_id: int | None
    blue: str
    green: str
    created_at: dt.datetime
    frontier: Frontier | None
    frontier_at: dt.datetime | None
    green_admitting_at: dt.datetime | None
    blue_gone_at: dt.datetime | None
    note: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON types (for the replacement's log and the metrics page)."""

        def at(moment: dt.datetime | None) -> str | None:
            return None if moment is None else moment.isoformat()

        return {
            "id": self.id,
            "blue": self.blue,
            "green": self.green,
            "frontier": None if self.frontier is None else self.frontier.to_dict()["eden"],
            "frontier_at": at(self.frontier_at),
            "green_admitting_at": at(self.green_admitting_at),
            "blue_gone_at": at(self.blue_gone_at),
            "note": self.note,
        }


def _row(row: Any) -> Handover:
    m = row._mapping
    raw = m["frontier_json"]
    return Handover(
        id=int(m["id"]),
        pipeline=m["pipeline"],
        event_id=m["event_id"],
        blue=m["blue_topology_id"],
        green=m["green_topology_id"],
        created_at=m["created_at"],
        frontier=None if raw is None else Frontier.from_dict(json.loads(raw)),
        frontier_at=m["frontier_at"],
        green_admitting_at=m["green_admitting_at"],
        blue_gone_at=m["blue_gone_at"],
        note=m["note"],
    )


class HandoverLog:
    """Rows of ``handovers`` in one database (URL or engine)."""

    def __init__(self, url: str | sa.Engine) -> None:
        self.engine = engine_for(url)

    def open(self, pipeline: str, event_id: int | None, blue: str, green: str) -> int:
        """A new handover of ``blue`` to ``green``; returns its id."""
        h = schema.handovers
        with self.engine.begin() as conn:
            result = conn.execute(
                h.insert().values(
                    pipeline=pipeline,
                    event_id=event_id,
                    blue_topology_id=blue,
                    green_topology_id=green,
                    created_at=schema.utcnow(),
                )
            )
            return inserted_id(result, "recording a handover")

    def _latest(self, column: sa.Column[Any], topology_id: str) -> Handover | None:
        h = schema.handovers
        query = sa.select(h).where(column == topology_id).order_by(h.c.id.desc()).limit(1)
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else _row(row)

    def for_blue(self, blue: str) -> Handover | None:
        """The latest handover of ``blue``, if any."""
        return self._latest(schema.handovers.c.blue_topology_id, blue)

    def for_green(self, green: str) -> Handover | None:
        """The latest handover to ``green``, if any."""
        return self._latest(schema.handovers.c.green_topology_id, green)

    def for_events(self, event_ids: Iterable[int]) -> dict[int, Handover]:
        """Replacement event id -> its (latest) handover, for the events that had one."""
        ids = sorted(set(event_ids))
        if not ids:
            return {}
        h = schema.handovers
        query = sa.select(h).where(h.c.event_id.in_(ids)).order_by(h.c.id)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return {row.event_id: _row(row) for row in rows}  # the later row wins

    def get(self, handover_id: int) -> Handover:
        h = schema.handovers
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(h).where(h.c.id == handover_id)).first()
        if row is None:
            raise KeyError(f"handover id={handover_id!r} does not exist")
        return _row(row)

    def publish(self, handover_id: int, frontier: Frontier) -> bool:
        """Store blue's frontier, once: a second one (a restarted planner's, cut from the
        database, lower) is refused, since green may already admit from the first."""
        h = schema.handovers
        with self.engine.begin() as conn:
            done = conn.execute(
                h.update()
                .where(h.c.id == handover_id, h.c.frontier_json.is_(None))
                .values(
                    frontier_json=json.dumps(frontier.to_dict(), separators=(",", ":")),
                    frontier_at=schema.utcnow(),
                )
            )
        return done.rowcount == 1

    def stamp(self, handover_id: int, **changes: Any) -> None:
        """Set ``green_admitting_at``, ``blue_gone_at`` (``True``: now) or ``note``."""
        unknown = set(changes) - set(STAMPS)
        if unknown:
            raise ValueError(f"handovers: cannot set {sorted(unknown)}; settable: {STAMPS}")
        values = {k: schema.utcnow() if v is True else v for k, v in changes.items()}
        h = schema.handovers
        with self.engine.begin() as conn:
            conn.execute(h.update().where(h.c.id == handover_id).values(**values))
