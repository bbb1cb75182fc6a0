"""The clickstream pipeline: click events -> per-minute clicks and distinct users per page.

A record's value is one click event, a JSON object::

    {"user": "u0042", "page": "/products", "ts": "2026-01-01T00:00:12.345+00:00"}

``ts`` is the event time (when the user clicked, ISO 8601 with a zone); other fields are
ignored; a tombstone (no value) or an empty value is not a click event: it goes to the DLQ
with its reason. Windows are tumbling, ``window_s`` long (60 s: per minute), aligned on the epoch,
and by *event time*: a click belongs to the window ``[start, start + window_s)`` holding
``ts``, whenever it reaches the log.

**Lateness, and why it is judged against the Kafka timestamp.** A click arrives after its
window closed when it was delayed (a phone offline, a retrying collector). Up to
``allowed_lateness_s`` after the window's end it still merges into its window; a later one
is refused as :class:`~flowctl.pipelines.base.PoisonRecord` and goes to
``clickstream.dlq`` with a reason naming its event time, its window, its arrival and the
allowed lateness. *Arrival* is the record's Kafka timestamp (:attr:`Record.timestamp_ms`,
set when the record entered the log), so the rule is::

    too late  <=>  timestamp_ms > window_end + allowed_lateness

The usual streaming rule (a watermark: the largest event time seen so far, minus the
lateness) depends on what the job has read, and so on batching, lanes, restarts and
replays: the same record could be counted in one run and refused in the next, and
reconcile, reading the log later, could not tell which. The Kafka timestamp is part of the
record, so the verdict is a function of the record alone: a tuple processed twice, a
driver killed and restarted, a record replayed through a replay topic (its envelope
carries the original timestamp: :class:`flowctl.core.replay.Envelope`) and reconcile
(:meth:`ClickstreamDefinition.reference_records`) all judge a record the same way. A
record without a timestamp (none in the log) cannot be late and is counted.

**Results.** Distinct users must merge exactly across tuples and replays, and a count of
distinct users does not add up. So a tuple's result is one row per ``(page, window_start,
user)`` with that user's clicks in the tuple, and ``include/pipelines/clickstream.toml``
declares the table ``click_window_users`` keyed by those three columns with
``merge = "sum"`` (:mod:`flowctl.core.sink_rules`): the clicks of a key add up, and the
rows of a ``(page, window_start)`` are its distinct users. Per window, in SQL::

    SELECT page, window_start, SUM(clicks) AS clicks, COUNT(*) AS users
    FROM click_window_users WHERE pipeline = 'clickstream'
    GROUP BY page, window_start ORDER BY window_start, page;

Reconcile compares the table row by row (``page/window_start/user -> clicks``), which is
additive, so the Spark tasks' partial references merge exactly.

:func:`synthetic_records` is the demo feed: seeded clicks whose Kafka timestamps simulate
their arrival, with out-of-order, late, too-late and malformed events.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import random
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flowctl.core.validation import InvalidValue, integer
from flowctl.pipelines.base import PoisonRecord, Record

NAME = "clickstream"

#: Longest text (characters) shown in a poison reason; the DLQ keeps the whole record.
SHOW_CHARS = 80
#: Longest user or page accepted: identifiers, not payloads.
MAX_FIELD_CHARS = 512

#: What an empty ``[params]`` gives (see ``include/pipelines/clickstream.toml``).
DEFAULT_WINDOW_S = 60
DEFAULT_ALLOWED_LATENESS_S = 120
PARAMS = ("window_s", "allowed_lateness_s")
#: Event times from the epoch to the end of 9998: every window of one (and its end) has a
#: date Python can write; anything outside is malformed, not an error of the lane.
MAX_EVENT_MS = 253_370_764_800_000


def _show(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return repr(text[:SHOW_CHARS] + "..." if len(text) > SHOW_CHARS else text)


def iso_ms(epoch_ms: int) -> str:
    """``1767225600000 -> "2026-01-01T00:00:00+00:00"`` (milliseconds shown when not 0).

    The form the sink's ``timestamp`` column reads back in UTC, so result rows and
    the reference name a window by the same text.
    """
    stamp = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=epoch_ms)
    return stamp.isoformat(timespec="milliseconds" if epoch_ms % 1000 else "seconds")


def _arrival(epoch_ms: int) -> str:
    """An arrival for a reason: ISO 8601 when Python can write the date, else the number."""
    return iso_ms(epoch_ms) if 0 <= epoch_ms < MAX_EVENT_MS else f"{epoch_ms} ms"


@dataclass(frozen=True)
class Click:
    """One parsed click event; ``event_ms`` is its event time in epoch milliseconds."""

    user: str
    page: str
    event_ms: int


def _text_field(event: Mapping[str, Any], name: str) -> str:
    if name not in event:
        raise PoisonRecord(f"field {name!r} is missing: {_show(json.dumps(event))}")
    value = event[name]
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_FIELD_CHARS:
        raise PoisonRecord(
            f"field {name}={_show(value)} is not a non-empty string of at most "
            f"{MAX_FIELD_CHARS} characters"
        )
    return value


def parse_click(value: bytes | str | None) -> Click:
    """One record value as a :class:`Click`; :class:`PoisonRecord` says what is wrong."""
    if value is None:
        raise PoisonRecord("no value (a tombstone), not a click event")
    try:
        text = value.decode("utf-8") if isinstance(value, bytes) else value
        event = json.loads(text)
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
        raise PoisonRecord(f"not JSON ({exc}): {_show(value)}") from None
    if not isinstance(event, dict):
        raise PoisonRecord(f"not a JSON object: {_show(text)}")
    user, page = _text_field(event, "user"), _text_field(event, "page")
    if "ts" not in event:
        raise PoisonRecord(f"field 'ts' is missing: {_show(text)}")
    ts = event["ts"]
    try:
        stamp = dt.datetime.fromisoformat(ts)
    except (TypeError, ValueError):
        raise PoisonRecord(f"field ts={_show(ts)} is not an ISO 8601 time") from None
    if stamp.tzinfo is None:
        raise PoisonRecord(f"field ts={_show(ts)} has no time zone (e.g. +00:00 or Z)")
    event_ms = round(stamp.timestamp() * 1000)
    if not 0 <= event_ms < MAX_EVENT_MS:
        raise PoisonRecord(f"field ts={_show(ts)} is outside 1970-01-01 .. 9998-12-31")
    return Click(user, page, event_ms)


@dataclass(frozen=True)
class ClickstreamDefinition:
    """``DEFINITION`` of the clickstream pipeline (see :mod:`flowctl.pipelines.base`).

    ``window_s`` and ``allowed_lateness_s`` come from the config's ``[params]``
    (:func:`configure`).
    """

    window_s: int = DEFAULT_WINDOW_S
    allowed_lateness_s: int = DEFAULT_ALLOWED_LATENESS_S
    name: str = NAME

    def window_start(self, event_ms: int) -> int:
        """The start (epoch ms) of the tumbling window holding ``event_ms``."""
        size = self.window_s * 1000
        return event_ms - event_ms % size

    def accept(self, value: bytes | str | None, arrival_ms: int | None) -> Click:
        """The click of a record value that arrived at ``arrival_ms`` (its Kafka timestamp);
        :class:`PoisonRecord` if it is malformed or too late (see the module docstring)."""
        click = parse_click(value)
        if arrival_ms is None or arrival_ms < 0:
            return click  # no arrival in the log: it cannot be judged late
        start = self.window_start(click.event_ms)
        end = start + self.window_s * 1000
        closed_ms = arrival_ms - end
        if closed_ms > self.allowed_lateness_s * 1000:
            raise PoisonRecord(
                f"too late: event time {iso_ms(click.event_ms)} is in window "
                f"[{iso_ms(start)}, {iso_ms(end)}), which closed {closed_ms / 1000:g} s "
                f"before the event arrived at {_arrival(arrival_ms)}; allowed lateness is "
                f"{self.allowed_lateness_s} s (params.allowed_lateness_s)"
            )
        return click

    def _rows(self, counts: Mapping[tuple[str, int, str], int]) -> list[dict[str, Any]]:
        """Result rows of the sink's shape, sorted by key (so equal counts give equal results)."""
        return [
            {"page": page, "window_start": iso_ms(start), "user": user, "clicks": n}
            for (page, start, user), n in sorted(counts.items())
        ]

    def process(self, records: Sequence[Record]) -> list[dict[str, Any]]:
        """One row per ``(page, window_start, user)`` of the tuple, with its clicks.

        The first malformed or too-late record raises :class:`PoisonRecord` carrying its
        offset, so the lane sends exactly that record to the DLQ and processes the rest.
        """
        counts: Counter[tuple[str, int, str]] = Counter()
        for record in records:
            try:
                click = self.accept(record.value, record.timestamp_ms)
            except PoisonRecord as exc:
                raise PoisonRecord(exc.reason, offset=record.offset) from None
            counts[(click.page, self.window_start(click.event_ms), click.user)] += 1
        return self._rows(counts)

    def combine(self, results: Sequence[Any]) -> list[dict[str, Any]]:
        """The rows of consecutive parts of a tuple, clicks of equal keys added: the rows
        :meth:`process` gives for the whole tuple."""
        counts: Counter[tuple[str, str, str]] = Counter()
        for result in results:
            if not isinstance(result, list):
                raise ValueError(f"clickstream result={result!r:.200} is not a list of rows")
            for row in result:
                counts[(row["page"], row["window_start"], row["user"])] += row["clicks"]
        return [
            {"page": page, "window_start": start, "user": user, "clicks": n}
            for (page, start, user), n in sorted(counts.items())
        ]

    def reference_records(self, records: Iterable[Record]) -> dict[str, int]:
        """``page/window_start/user -> clicks`` over the accepted records, what the sink's
        rows read as (:func:`flowctl.core.sink_rules.view`); used by reconcile."""
        counts: Counter[str] = Counter()
        for record in records:
            try:
                click = self.accept(record.value, record.timestamp_ms)
            except PoisonRecord:
                continue  # in the DLQ, nothing stored
            start = iso_ms(self.window_start(click.event_ms))
            counts[f"{click.page}/{start}/{click.user}"] += 1
        return dict(counts)

    def reference(self, values: Iterable[bytes | None]) -> dict[str, int]:
        """:meth:`reference_records` of bare values: without arrival times none is late.

        Reconcile uses :meth:`reference_records` (it has the timestamps); this is what
        the platform's protocol asks of every definition.
        """
        return self.reference_records(Record("", 0, i, None, v) for i, v in enumerate(values))


def configure(params: Mapping[str, Any]) -> ClickstreamDefinition:
    """The definition with the config's ``[params]``; errors name ``params.<key>``."""
    for key in params:
        if key not in PARAMS:
            raise InvalidValue(
                f"params.{key}", params[key], f"is not a known field (known: {list(PARAMS)})"
            )
    window_s = integer("params.window_s", params.get("window_s", DEFAULT_WINDOW_S), lo=1)
    if 86_400 % window_s:
        raise InvalidValue(
            "params.window_s", window_s, "must divide a day (86400 s), so windows align on it"
        )
    lateness = integer(
        "params.allowed_lateness_s",
        params.get("allowed_lateness_s", DEFAULT_ALLOWED_LATENESS_S),
        lo=0,
    )
    return ClickstreamDefinition(window_s=window_s, allowed_lateness_s=lateness)


DEFINITION = configure({})

# -- the demo feed ----------------------------------------------------------------------------

#: Milliseconds between two simulated arrivals (4 clicks per second).
ARRIVAL_STEP_MS = 250
PAGES = ("/", "/products", "/products/42", "/cart", "/checkout", "/search", "/blog", "/about")
USERS = 300
#: Shares of the feed: late within the allowed lateness, too late, malformed.
LATE_SHARE, TOO_LATE_SHARE, MALFORMED_SHARE = 0.08, 0.02, 0.015
_MALFORMED = (
    '{"user": "u0001", "page": "/cart", "ts": ',  # cut short
    '{"page": "/cart", "ts": "2026-01-01T00:00:00+00:00"}',  # no user
    '{"user": "u0001", "page": "/cart", "ts": "yesterday"}',
    '{"user": "u0001", "page": "/cart", "ts": "2026-01-01T00:00:00"}',  # no zone
    '["u0001", "/cart"]',
)


def synthetic_records(
    count: int, seed: int, *, start_ms: int | None = None
) -> Iterator[tuple[str, int]]:
    """Demo input for ``flowctl ingest``: ``(click JSON, Kafka timestamp ms)``, seeded.

    Record ``i`` arrives at ``start_ms + i * ARRIVAL_STEP_MS`` (default: arrivals end
    now, so the log looks like a live feed); its event time is its arrival minus a delay:
    0-4 s for most (out of order, a few past their window's end), 10 s up to the default
    allowed lateness for :data:`LATE_SHARE` (late, still merged), more than a window plus
    the default lateness for :data:`TOO_LATE_SHARE` (to the DLQ), and
    :data:`MALFORMED_SHARE` are malformed. The shares hold for the default ``[params]``.
    """
    rng = random.Random(seed)
    if start_ms is None:
        start_ms = int(time.time() * 1000) - count * ARRIVAL_STEP_MS
    closes = DEFAULT_WINDOW_S + DEFAULT_ALLOWED_LATENESS_S
    ranks = range(USERS)
    cum_weights = list(itertools.accumulate(1 / (r + 1) for r in ranks))  # a few click a lot
    for i in range(count):
        arrival = start_ms + i * ARRIVAL_STEP_MS
        roll = rng.random()
        if roll < MALFORMED_SHARE:
            yield rng.choice(_MALFORMED), arrival
            continue
        if roll < MALFORMED_SHARE + TOO_LATE_SHARE:
            delay_s = rng.uniform(closes + 5, closes + 600)
        elif roll < MALFORMED_SHARE + TOO_LATE_SHARE + LATE_SHARE:
            delay_s = rng.uniform(10, DEFAULT_ALLOWED_LATENESS_S)
        else:
            delay_s = rng.uniform(0, 4)
        event = {
            "user": f"u{rng.choices(ranks, cum_weights=cum_weights)[0]:04d}",
            "page": rng.choice(PAGES),
            "ts": iso_ms(arrival - round(delay_s * 1000)),
        }
        yield json.dumps(event), arrival


def synthetic_lines(count: int, seed: int) -> Iterator[str]:
    """The values of :func:`synthetic_records` (their simulated arrival left out)."""
    return (line for line, _ in synthetic_records(count, seed))
