"""Replacement events: the record of every blue-green topology replacement (SPEC E).

The replace operator writes one event per replacement: which topology was
replaced by which, the parallelism change and the decision that asked for it,
the time of each step (new topology started / ready, old source deactivated,
old topology drained, finished), the pause users saw and the duplicates the
hand-over produced, and the outcome. The metrics page and the experiments
read them back; the paper's claim ("no pause") is checked against
``pause_ms`` here, not against a log line.

An event may be written once at the end (:meth:`ReplacementLog.record_replacement`
with a final outcome) or opened with outcome ``running`` and completed step by
step with :meth:`ReplacementLog.update_replacement`, so a replacement that dies
half-way still leaves a trace of how far it got.

Bad values raise ``ValueError`` naming the field and the value before anything
is written.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import sqlalchemy as sa

from flowctl.adapters import schema, schema_setup
from flowctl.adapters.checks import check_int, check_text, check_time
from flowctl.adapters.db import engine_for, in_transaction, inserted_id
from flowctl.adapters.schema import REPLACEMENT_OUTCOMES

#: Outcomes that end an event; an event in one of them can no longer be changed.
FINAL_OUTCOMES = frozenset({"ok", "rolled_back", "failed"})
#: The steps of a replacement in the order they happen (each time optional).
STEP_TIMES = ("started_at", "ready_at", "deactivated_at", "drained_at", "finished_at")
_UPDATABLE = (
    "new_topology_id",
    "ready_at",
    "deactivated_at",
    "drained_at",
    "finished_at",
    "pause_ms",
    "duplicates",
    "outcome",
    "error",
)


class UnknownReplacement(LookupError):
    """No replacement event with that id exists."""


class _HasToDict(Protocol):
    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class ReplacementEvent:
    """One blue-green replacement of a pipeline's topology."""

    id: int
    pipeline: str
    old_topology_id: str
    new_topology_id: str | None
    old_parallelism: int
    new_parallelism: int
    reason: str
    decision: dict[str, Any] | None  # decoded decision_json (``Decision.to_dict()``)
    started_at: dt.datetime
    ready_at: dt.datetime | None
    deactivated_at: dt.datetime | None
    drained_at: dt.datetime | None
    finished_at: dt.datetime | None
    pause_ms: float | None
    duplicates: int | None
    outcome: str
    error: str | None

    @property
    def duration_s(self) -> float | None:
        """Seconds from start to finish, None while unfinished."""
        if self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()

    def to_dict(self) -> dict[str, Any]:
        """JSON types only (times as ISO 8601 strings in UTC)."""
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            out[name] = value.isoformat() if isinstance(value, dt.datetime) else value
        out["duration_s"] = self.duration_s
        return out


def _check_pause(value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise ValueError(f"pause_ms={value!r} must be a finite number >= 0")
    return float(value)


def _check_outcome(value: object) -> str:
    if value not in REPLACEMENT_OUTCOMES:
        raise ValueError(f"outcome={value!r} is not one of {', '.join(REPLACEMENT_OUTCOMES)}")
    return str(value)


def _decision_json(decision: Mapping[str, Any] | _HasToDict | None) -> str | None:
    """``Decision`` objects and plain mappings are stored as sorted JSON."""
    if decision is None:
        return None
    data = decision.to_dict() if hasattr(decision, "to_dict") else decision
    if not isinstance(data, Mapping):
        raise ValueError(
            f"decision={decision!r} must be a mapping or have to_dict() (a scaling Decision)"
        )
    try:
        return json.dumps(dict(data), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"decision={decision!r} is not JSON-serialisable: {exc}") from None


def _check_consistent(values: Mapping[str, Any]) -> None:
    """Steps in order, an error exactly when the outcome is a failure."""
    previous: tuple[str, dt.datetime] | None = None
    for name in STEP_TIMES:
        value = values.get(name)
        if value is None:
            continue
        if previous is not None and value < previous[1]:
            raise ValueError(
                f"{name}={value.isoformat()} is before {previous[0]}={previous[1].isoformat()}"
            )
        previous = (name, value)
    outcome, error = values["outcome"], values.get("error")
    if outcome in ("rolled_back", "failed") and not (isinstance(error, str) and error.strip()):
        raise ValueError(f"outcome={outcome!r} needs an error message, got error={error!r}")
    if outcome in ("ok", "running") and error is not None:
        raise ValueError(f"outcome={outcome!r} cannot carry error={error!r}")
    if outcome in FINAL_OUTCOMES and values.get("finished_at") is None:
        raise ValueError(f"outcome={outcome!r} is final and needs finished_at, got None")


def _event(row: sa.Row[Any]) -> ReplacementEvent:
    data = dict(row._mapping)
    raw = data.pop("decision_json")
    data["decision"] = None if raw is None else json.loads(raw)
    return ReplacementEvent(**data)


class ReplacementLog:
    """Replacement events in the control database at ``url`` (SQLite/PostgreSQL URL or engine)."""

    def __init__(self, url: str | sa.Engine) -> None:
        self.engine = engine_for(url)

    def ensure_schema(self) -> None:
        """Create missing tables; refuse a database with another schema version."""
        schema_setup.ensure_schema(self.engine)

    def record_replacement(
        self,
        pipeline: str,
        old_topology_id: str,
        new_topology_id: str | None,
        old_parallelism: int,
        new_parallelism: int,
        reason: str,
        *,
        started_at: dt.datetime,
        outcome: str,
        decision: Mapping[str, Any] | _HasToDict | None = None,
        ready_at: dt.datetime | None = None,
        deactivated_at: dt.datetime | None = None,
        drained_at: dt.datetime | None = None,
        finished_at: dt.datetime | None = None,
        pause_ms: float | None = None,
        duplicates: int | None = None,
        error: str | None = None,
    ) -> int:
        """Store one replacement event and return its id.

        ``outcome`` is ``running`` (complete it later with :meth:`update_replacement`)
        or final: ``ok``, ``rolled_back`` or ``failed``; a final outcome needs
        ``finished_at``, a failure needs ``error``. ``decision`` is the scaling
        :class:`~flowctl.core.scaling.Decision` (or its ``to_dict()``) behind it.
        """
        values: dict[str, Any] = {
            "pipeline": check_text("pipeline", pipeline),
            "old_topology_id": check_text("old_topology_id", old_topology_id),
            "new_topology_id": None
            if new_topology_id is None
            else check_text("new_topology_id", new_topology_id),
            "old_parallelism": check_int("old_parallelism", old_parallelism, 1),
            "new_parallelism": check_int("new_parallelism", new_parallelism, 1),
            "reason": check_text("reason", reason),
            "decision_json": _decision_json(decision),
            "outcome": _check_outcome(outcome),
            "pause_ms": None if pause_ms is None else _check_pause(pause_ms),
            "duplicates": None if duplicates is None else check_int("duplicates", duplicates, 0),
            "error": error,
        }
        times = {
            "started_at": started_at,
            "ready_at": ready_at,
            "deactivated_at": deactivated_at,
            "drained_at": drained_at,
            "finished_at": finished_at,
        }
        for name, value in times.items():
            if value is not None or name == "started_at":
                check_time(name, value)
        values.update(times)
        if error is not None:
            check_text("error", error)
        _check_consistent(values)
        r = schema.replacement_events

        def work(conn: sa.Connection) -> int:
            return inserted_id(conn.execute(r.insert().values(**values)), "recording a replacement")

        return in_transaction(
            self.engine, work, what=f"recording a replacement of {old_topology_id!r}"
        )

    def update_replacement(self, event_id: int, **changes: Any) -> ReplacementEvent:
        """Complete a ``running`` event: set step times, figures, outcome, error.

        Only ``new_topology_id``, ``ready_at``, ``deactivated_at``, ``drained_at``,
        ``finished_at``, ``pause_ms``, ``duplicates``, ``outcome`` and ``error`` can
        change; an event with a final outcome is never changed again (it is history).
        """
        check_int("event_id", event_id, 1)
        unknown = sorted(set(changes) - set(_UPDATABLE))
        if unknown:
            raise ValueError(
                f"update_replacement: field(s) {unknown} cannot be changed "
                f"(allowed: {', '.join(_UPDATABLE)})"
            )
        for name in ("ready_at", "deactivated_at", "drained_at", "finished_at"):
            if changes.get(name) is not None:
                check_time(name, changes[name])
        if "outcome" in changes:
            _check_outcome(changes["outcome"])
        if changes.get("pause_ms") is not None:
            changes["pause_ms"] = _check_pause(changes["pause_ms"])
        if changes.get("duplicates") is not None:
            check_int("duplicates", changes["duplicates"], 0)
        if changes.get("new_topology_id") is not None:
            check_text("new_topology_id", changes["new_topology_id"])
        if changes.get("error") is not None:
            check_text("error", changes["error"])
        r = schema.replacement_events

        def work(conn: sa.Connection) -> None:
            row = conn.execute(sa.select(r).where(r.c.id == event_id).with_for_update()).first()
            if row is None:
                raise UnknownReplacement(f"event_id={event_id!r} does not exist")
            current = dict(row._mapping)
            if current["outcome"] in FINAL_OUTCOMES:
                raise ValueError(
                    f"replacement event {event_id} is already {current['outcome']!r}; "
                    f"a finished replacement is not changed"
                )
            _check_consistent({**current, **changes})
            conn.execute(r.update().where(r.c.id == event_id).values(**changes))

        in_transaction(self.engine, work, what=f"updating replacement event {event_id}")
        return self.get_replacement(event_id)

    def get_replacement(self, event_id: int) -> ReplacementEvent:
        """The event ``event_id``; :class:`UnknownReplacement` if there is none."""
        r = schema.replacement_events
        row = in_transaction(
            self.engine,
            lambda conn: conn.execute(sa.select(r).where(r.c.id == event_id)).first(),
            what=f"reading replacement event {event_id}",
        )
        if row is None:
            raise UnknownReplacement(f"event_id={event_id!r} does not exist")
        return _event(row)

    def replacements(
        self,
        pipeline: str,
        *,
        since: dt.datetime | None = None,
        limit: int | None = None,
    ) -> list[ReplacementEvent]:
        """The pipeline's replacements in start order; ``limit`` keeps the most recent ones."""
        check_text("pipeline", pipeline)
        r = schema.replacement_events
        query = sa.select(r).where(r.c.pipeline == pipeline)
        if since is not None:
            query = query.where(r.c.started_at >= check_time("since", since))
        query = query.order_by(r.c.started_at.desc(), r.c.id.desc())
        if limit is not None:
            query = query.limit(check_int("limit", limit, 1))
        rows = in_transaction(
            self.engine,
            lambda conn: conn.execute(query).all(),
            what=f"listing replacements of {pipeline!r}",
        )
        return [_event(row) for row in reversed(rows)]
