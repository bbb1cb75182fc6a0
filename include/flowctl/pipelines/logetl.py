"""The log-ETL pipeline: web-server access log lines -> enriched rows in ``log_events``.

A record's value is one access-log line in the Combined Log Format (Apache
``%h %l %u %t "%r" %>s %b "%{Referer}i" "%{User-agent}i"``, nginx's default)::

    203.0.113.7 - alice [10/Oct/2000:13:55:36 -0700] "GET /a?x=1 HTTP/1.1" 200 2326 "-" "curl/8"

The Common Log Format (the same without referer and user agent) is accepted
too: many servers still write it. Fields are separated by exactly one space,
as both servers write them; quoted fields may contain ``\\"`` escapes.

A line that cannot be parsed raises :class:`~flowctl.pipelines.base.PoisonRecord`
whose reason names the field and the value (``bad timestamp '32/Foo/2020:...'``):
no retry can fix a malformed line, so the topology sends it to the DLQ at
once, where an operator can read why. Parsing never raises anything else, for
any bytes (a property test holds it to that), so a malformed line can never be
mistaken for a transient failure and retried ``max_attempts`` times. A record
without a value (a tombstone) is not a log line either (``empty record (no
value)``), nor is an empty value (``empty line``): both go to the DLQ as read.

Enrichment, computed once here so every consumer of ``log_events`` agrees:

- ``status_class``: ``"2xx"``, ``"4xx"``, ...;
- ``path``: the request target without query string or fragment (the key of
  per-page reports; queries are unbounded and often carry personal data);
- ``is_bot``: the user agent looks automated (crawler, script, monitoring);
  a missing user agent counts as a bot, since every browser sends one;
- ``ip_prefix``: the client's /24 network (/64 for IPv6), the usual unit of
  per-client aggregation that does not store whole addresses in reports.

Rows are keyed by the line's Kafka coordinates ``(pipeline, topic, partition,
offset)`` and inserted with insert-or-ignore, so applying a tuple twice cannot
duplicate a row even if a caller slips. The definition writes no SQL for it:
``include/pipelines/logetl.toml`` declares the ``log_events`` table, its column
types and the ``insert`` rule (:mod:`flowctl.pipelines.sinks`), which check every
row before any is written. Only the reconcile summary is the definition's own
(:meth:`LogEtlDefinition.stored`: rows per status class, counted by the database).
"""

from __future__ import annotations

import datetime as dt
import functools
import ipaddress
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flowctl.pipelines.base import Connection, PoisonRecord, Record

NAME = "logetl"

#: Longest value (in bytes) shown in a poison reason; the DLQ keeps the whole record anyway.
SHOW_CHARS = 80

_MONTHS = {
    m: i
    for i, m in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}
# ASCII only: ``\d`` would otherwise accept other scripts' digits, which no server writes.
_TIMESTAMP = re.compile(
    r"(\d{2})/([A-Za-z]{3})/(\d{4}):(\d{2}):(\d{2}):(\d{2}) ([+-])(\d{2})(\d{2})", re.ASCII
)
_METHOD = re.compile(r"[A-Z][A-Z_-]{0,31}", re.ASCII)
_PROTOCOL = re.compile(r"HTTP/\d(?:\.\d)?", re.ASCII)
_STATUS = re.compile(r"\d{3}", re.ASCII)
_SIZE = re.compile(r"\d{1,18}", re.ASCII)
_BOT = re.compile(
    r"bot\b|bot/|crawl|spider|slurp|archiver|facebookexternalhit|bingpreview|"
    r"curl/|wget/|python-requests|python-urllib|go-http-client|java/|libwww-perl|"
    r"okhttp|httpclient|headless|phantomjs|scrapy|monitor|pingdom|uptime",
    re.IGNORECASE,
)


def show(text: str) -> str:
    """``text`` quoted for a reason, shortened to :data:`SHOW_CHARS` characters."""
    if len(text) > SHOW_CHARS:
        text = text[:SHOW_CHARS] + "..."
    return repr(text)


@dataclass(frozen=True)
class LogEvent:
    """One parsed and enriched access-log line."""

    ts: dt.datetime
    ip: str
    ip_prefix: str
    remote_user: str | None
    method: str
    path: str
    protocol: str
    status: int
    status_class: str
    bytes: int
    referer: str | None
    user_agent: str | None
    is_bot: bool

    def to_json(self, topic: str, partition: int, offset: int) -> dict[str, Any]:
        """The row as a JSON-serialisable dict (the tuple result waits in memcached)."""
        return {
            "topic": topic,
            "partition": partition,
            "offset": offset,
            "ts": self.ts.isoformat(),
            "ip": self.ip,
            "ip_prefix": self.ip_prefix,
            "remote_user": self.remote_user,
            "method": self.method,
            "path": self.path,
            "protocol": self.protocol,
            "status": self.status,
            "status_class": self.status_class,
            "bytes": self.bytes,
            "referer": self.referer,
            "user_agent": self.user_agent,
            "is_bot": self.is_bot,
        }


# -- enrichment -------------------------------------------------------------------------------


def status_class(status: int) -> str:
    """``404 -> "4xx"``."""
    return f"{status // 100}xx"


def path_of(target: str) -> str:
    """The request target without query string or fragment.

    Origin form (``/a/b?x=1``) gives ``/a/b``; absolute form, sent to proxies
    (``http://host/a?x``), gives ``/a``; authority form (``CONNECT host:443``)
    and asterisk form (``OPTIONS *``) have no path and are kept as they are.
    """
    if "://" in target and not target.startswith("/"):
        rest = target.split("://", 1)[1]
        slash = rest.find("/")
        if slash < 0:
            return "/"
        target = rest[slash:]
    if target.startswith("/"):
        return target.split("?", 1)[0].split("#", 1)[0]
    return target


def is_bot(user_agent: str | None) -> bool:
    """Whether the user agent looks automated; no user agent at all counts as a bot.

    Cached: a log has few distinct user agents, and the pattern search is
    otherwise the most expensive step of a line. Only ordinary lengths are
    cached, so a client sending huge random user agents cannot fill a lane's
    memory.
    """
    if user_agent is None:
        return True
    if len(user_agent) > _CACHED_AGENT_CHARS:
        return _BOT.search(user_agent) is not None
    return _is_bot_cached(user_agent)


_CACHED_AGENT_CHARS = 512


@functools.lru_cache(maxsize=8192)
def _is_bot_cached(user_agent: str) -> bool:
    return _BOT.search(user_agent) is not None


def ip_prefix(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """The client's network: ``/24`` for IPv4, ``/64`` for IPv6 (``"203.0.113.0/24"``)."""
    if ip.version == 4:
        a, b, c, _ = str(ip).split(".")
        return f"{a}.{b}.{c}.0/24"  # as ip_network(..., strict=False) writes it, 5x faster
    return str(ipaddress.ip_network((int(ip), 64), strict=False))


# -- parsing ----------------------------------------------------------------------------------


class _Cursor:
    """Walks a line field by field, naming the field when the line ends or breaks early."""

    def __init__(self, line: str) -> None:
        self.line = line
        self.pos = 0

    def at_end(self) -> bool:
        return self.pos >= len(self.line)

    def _space_before(self, field: str) -> None:
        if self.pos == 0:
            return
        if self.at_end():
            raise PoisonRecord(f"line ends before the {field}: {show(self.line)}")
        if self.line[self.pos] != " ":
            raise PoisonRecord(
                f"expected a space before the {field} at column {self.pos + 1}: {show(self.line)}"
            )
        self.pos += 1

    def token(self, field: str) -> str:
        """A run of non-space characters."""
        self._space_before(field)
        end = self.line.find(" ", self.pos)
        end = len(self.line) if end < 0 else end
        if end == self.pos:
            raise PoisonRecord(f"missing {field} at column {self.pos + 1}: {show(self.line)}")
        text, self.pos = self.line[self.pos : end], end
        return text

    def delimited(self, field: str, opening: str, closing: str) -> str:
        """A field between ``opening`` and ``closing``; ``\\`` escapes inside quotes."""
        self._space_before(field)
        if self.at_end() or self.line[self.pos] != opening:
            found = self.line[self.pos : self.pos + SHOW_CHARS]
            raise PoisonRecord(f"expected {opening} to open the {field}, found {show(found)}")
        i = self.line.find(closing, self.pos + 1)
        while i >= 0:
            # A closing quote preceded by an odd run of backslashes is escaped (\\").
            backslashes = 0
            while opening == '"' and self.line[i - 1 - backslashes] == "\\":
                backslashes += 1
            if backslashes % 2 == 0:
                text, self.pos = self.line[self.pos + 1 : i], i + 1
                return text
            i = self.line.find(closing, i + 1)
        raise PoisonRecord(f"unterminated {field}: {show(self.line[self.pos :])}")


def parse_timestamp(text: str) -> dt.datetime:
    """``10/Oct/2000:13:55:36 -0700`` -> an aware UTC datetime.

    Month names are matched without the locale (``strptime``'s ``%b`` would
    follow it), so a worker with a non-English locale parses the same logs.
    """
    match = _TIMESTAMP.fullmatch(text)
    month = _MONTHS.get(match.group(2)) if match else None
    if match is None or month is None:
        raise PoisonRecord(f"bad timestamp {show(text)} (expected dd/Mon/yyyy:HH:MM:SS +zzzz)")
    day, _, year, hour, minute, second, sign, tz_h, tz_m = match.groups()
    try:
        offset = dt.timedelta(hours=int(tz_h), minutes=int(tz_m))
        zone = dt.timezone(offset if sign == "+" else -offset)
        local = dt.datetime(
            int(year), month, int(day), int(hour), int(minute), int(second), tzinfo=zone
        )
        return local.astimezone(dt.UTC)
    except (ValueError, OverflowError) as exc:
        raise PoisonRecord(f"bad timestamp {show(text)} ({exc})") from None


def _parse_ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if "%" in text:  # a scoped IPv6 address has no meaning outside its host
        raise PoisonRecord(f"bad ip {show(text)} (zone index not allowed)")
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        raise PoisonRecord(f"bad ip {show(text)} (not an IPv4 or IPv6 address)") from None


def _parse_request(text: str) -> tuple[str, str, str]:
    parts = text.split(" ")
    if (
        len(parts) != 3
        or not _METHOD.fullmatch(parts[0])
        or not parts[1]
        or not _PROTOCOL.fullmatch(parts[2])
    ):
        raise PoisonRecord(f"bad request {show(text)} (expected METHOD target HTTP/x.y)")
    return parts[0], parts[1], parts[2]


def _dash(text: str) -> str | None:
    return None if text == "-" else text


def decode_line(value: bytes | str | None) -> str:
    """A record value as one line of text; a missing or undecodable value is poison."""
    if value is None:
        raise PoisonRecord("empty record (no value)")
    if isinstance(value, str):
        text = value
    else:
        try:
            text = bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            bad = bytes(value)[exc.start : exc.start + 1]
            raise PoisonRecord(f"value is not UTF-8 (byte {exc.start}: {bad!r})") from None
    if text.endswith("\n"):
        text = text[:-2] if text.endswith("\r\n") else text[:-1]
    if not text.strip():
        raise PoisonRecord("empty line")
    return text


def parse_line(value: bytes | str | None) -> LogEvent:
    """Parse and enrich one access-log line; raise :class:`PoisonRecord` saying what is wrong."""
    line = decode_line(value)
    cur = _Cursor(line)
    ip = _parse_ip(cur.token("ip"))
    cur.token("ident")
    user = cur.token("user")
    ts = parse_timestamp(cur.delimited("timestamp", "[", "]"))
    method, target, protocol = _parse_request(cur.delimited("request", '"', '"'))
    status_text = cur.token("status")
    if not _STATUS.fullmatch(status_text) or not 100 <= int(status_text) <= 599:
        raise PoisonRecord(f"bad status {show(status_text)} (expected 100-599)")
    size_text = cur.token("size")
    if size_text != "-" and not _SIZE.fullmatch(size_text):
        raise PoisonRecord(f"bad size {show(size_text)} (expected bytes or '-')")
    referer: str | None = None
    agent: str | None = None
    if not cur.at_end():
        referer = _dash(cur.delimited("referer", '"', '"'))
        agent = _dash(cur.delimited("user agent", '"', '"'))
        if not cur.at_end():
            rest = line[cur.pos :]
            raise PoisonRecord(f"unexpected text after the user agent: {show(rest)}")
    status = int(status_text)
    return LogEvent(
        ts=ts,
        ip=str(ip),
        ip_prefix=ip_prefix(ip),
        remote_user=_dash(user),
        method=method,
        path=path_of(target),
        protocol=protocol,
        status=status,
        status_class=status_class(status),
        bytes=0 if size_text == "-" else int(size_text),
        referer=referer,
        user_agent=agent,
        is_bot=is_bot(agent),
    )


def parse_values(values: Iterable[bytes | str | None]) -> Iterator[LogEvent | PoisonRecord]:
    """Each value parsed, or the :class:`PoisonRecord` that rejects it (never raises it)."""
    for value in values:
        try:
            yield parse_line(value)
        except PoisonRecord as exc:
            yield exc


# -- the definition ---------------------------------------------------------------------------

#: The table ``include/pipelines/logetl.toml``'s ``[sink]`` writes (read by :meth:`stored`).
TABLE = "log_events"


def _summary(classes: Mapping[str, int]) -> dict[str, Any]:
    return {"rows": sum(classes.values()), "status_classes": dict(sorted(classes.items()))}


class LogEtlDefinition:
    """``DEFINITION`` of the log-ETL pipeline (see :mod:`flowctl.pipelines.base`)."""

    name = NAME

    def process(self, records: Sequence[Record]) -> list[dict[str, Any]]:
        """One row per line of the tuple; the first malformed line poisons it.

        The :class:`PoisonRecord` carries the offending record's offset, so
        the caller can send exactly that line to the DLQ and retry the rest.
        Replayed records must be handed over with their original coordinates:
        they are the row's key, which is what makes a replay idempotent.
        """
        rows = []
        for record in records:
            try:
                event = parse_line(record.value)
            except PoisonRecord as exc:
                raise PoisonRecord(exc.reason, offset=record.offset) from None
            rows.append(event.to_json(record.topic, record.partition, record.offset))
        return rows

    def combine(self, results: Sequence[Any]) -> list[dict[str, Any]]:
        """The rows of consecutive parts of a tuple, in order: the rows of the whole."""
        rows: list[dict[str, Any]] = []
        for result in results:
            if not isinstance(result, list):
                raise ValueError(f"logetl result={result!r} is not a list of rows")
            rows.extend(result)
        return rows

    def reference(self, values: Iterable[bytes | None]) -> dict[str, Any]:
        """Rows per status class of the lines that parse (malformed ones go to the DLQ)."""
        classes: Counter[str] = Counter()
        for outcome in parse_values(values):
            if isinstance(outcome, LogEvent):
                classes[outcome.status_class] += 1
        return _summary(classes)

    def stored(self, conn: Connection, pipeline: str) -> dict[str, Any]:
        """Rows per status class in ``log_events``, shaped like :meth:`reference`."""
        from flowctl.adapters import sink_sql

        return _summary(sink_sql.count_by(conn, TABLE, pipeline, "status_class"))


DEFINITION = LogEtlDefinition()


def synthetic_lines(count: int, seed: int) -> Iterator[str]:
    """Demo input for ``flowctl ingest``: seeded access-log lines, a few malformed."""
    from flowctl.loggen import access_log_lines

    return access_log_lines(count, seed=seed)
