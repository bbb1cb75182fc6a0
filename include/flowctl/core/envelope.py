"""The envelope of a failed record on its way back (replay topics) or out (the DLQ).

A record that failed is written to a replay topic or the DLQ wrapped in an
:class:`Envelope`: its origin in Eden, the record as it was read (value, key,
headers, Kafka timestamp), the attempts so far, the last error and the time before
which it is not replayed. Everything the definition saw on the first attempt travels
with it, so a replay hands the definition the same record, and the DLQ loses nothing
of it: a tombstone stays a tombstone (``payload`` ``None``, not ``b""``), the headers
stay in order with their null values.

The wire form is compact UTF-8 JSON (:func:`encode_envelope`), bytes as base64 text;
``timestamp_ms`` and ``headers`` are written only when present, so envelopes written
before they existed still decode.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .record import Headers

ENVELOPE_VERSION = 1


class EnvelopeError(ValueError):
    """A replay-topic record is not a valid envelope; the message names the field."""


@dataclass(frozen=True)
class Envelope:
    """A failed record on its way back: origin, payload, attempts, last error, not-before.

    ``topic/partition/offset`` are the record's position in Eden (kept through every
    replay, so the DLQ says where it came from). ``attempt`` counts failed processing
    attempts so far. ``not_before`` is in the platform's shared time base (epoch seconds
    in production: executors and driver compare it), before which it is not replayed.
    ``timestamp_ms`` is the Eden record's Kafka timestamp (its arrival in the log), kept
    because re-producing the record stamps it anew: a definition that judges records by
    their arrival (clickstream's allowed lateness) must see the same time on every attempt.
    ``payload`` is the record's value, ``None`` for a tombstone; ``key`` and ``headers``
    are the record's own.
    """

    topic: str
    partition: int
    offset: int
    payload: bytes | None
    attempt: int
    error: str
    not_before: float
    key: bytes | None = None
    timestamp_ms: int | None = None
    headers: Headers = ()

    def __post_init__(self) -> None:
        if not isinstance(self.topic, str) or not self.topic:
            raise EnvelopeError(
                f"envelope field 'topic' must be a non-empty str, got {self.topic!r}"
            )
        for name, minimum in (("partition", 0), ("offset", 0), ("attempt", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise EnvelopeError(
                    f"envelope field {name!r} must be an int >= {minimum}, got {value!r}"
                )
        for name in ("payload", "key"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, bytes):
                raise EnvelopeError(
                    f"envelope field {name!r} must be bytes or None, got {type(value).__name__}"
                )
        if not isinstance(self.error, str):
            raise EnvelopeError(f"envelope field 'error' must be a str, got {self.error!r}")
        ts = self.timestamp_ms
        if ts is not None and (isinstance(ts, bool) or not isinstance(ts, int) or ts < 0):
            raise EnvelopeError(
                f"envelope field 'timestamp_ms' must be an int >= 0 or None, got {ts!r}"
            )
        nb = self.not_before
        if isinstance(nb, bool) or not isinstance(nb, int | float) or not math.isfinite(nb):
            raise EnvelopeError(f"envelope field 'not_before' must be a finite number, got {nb!r}")
        _check_headers(self.headers)

    def eligible(self, now: float) -> bool:
        """May this record be replayed at ``now``?"""
        return now >= self.not_before

    def to_dict(self) -> dict[str, Any]:
        """JSON types only; bytes as base64 text; ``timestamp_ms`` and ``headers`` only
        when there are any."""
        data: dict[str, Any] = {
            "v": ENVELOPE_VERSION,
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "key": _text(self.key),
            "payload": _text(self.payload),
            "attempt": self.attempt,
            "error": self.error,
            "not_before": self.not_before,
        }
        if self.timestamp_ms is not None:
            data["timestamp_ms"] = self.timestamp_ms
        if self.headers:
            data["headers"] = [[name, _text(value)] for name, value in self.headers]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Envelope:
        if not isinstance(data, Mapping):
            raise EnvelopeError(f"envelope must be a JSON object, got {type(data).__name__}")
        fields = ("v", "topic", "partition", "offset", "payload", "attempt", "error", "not_before")
        missing = [f for f in fields if f not in data]
        if missing:
            raise EnvelopeError(f"envelope is missing field(s) {missing}")
        if data["v"] != ENVELOPE_VERSION:
            raise EnvelopeError(f"envelope field 'v' must be {ENVELOPE_VERSION}, got {data['v']!r}")
        return cls(
            topic=data["topic"],
            partition=data["partition"],
            offset=data["offset"],
            payload=None if data["payload"] is None else _b64("payload", data["payload"]),
            key=None if data.get("key") is None else _b64("key", data["key"]),
            attempt=data["attempt"],
            error=data["error"],
            not_before=data["not_before"],
            timestamp_ms=data.get("timestamp_ms"),  # absent in envelopes written before it
            headers=_headers(data.get("headers", [])),  # likewise
        )


def _text(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode("ascii")


def _b64(field: str, text: Any) -> bytes:
    if not isinstance(text, str):
        raise EnvelopeError(f"envelope field {field!r} must be base64 text, got {text!r}")
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise EnvelopeError(f"envelope field {field!r} is not valid base64: {text[:40]!r}") from exc


def _check_headers(headers: Any) -> None:
    ok = isinstance(headers, tuple) and all(
        isinstance(h, tuple)
        and len(h) == 2
        and isinstance(h[0], str)
        and (h[1] is None or isinstance(h[1], bytes))
        for h in headers
    )
    if not ok:
        raise EnvelopeError(
            f"envelope field 'headers' must be a tuple of (str, bytes or None) pairs, "
            f"got {headers!r:.200}"
        )


def _headers(raw: Any) -> Headers:
    """The wire form's ``[[name, base64 or null], ...]`` as header pairs."""
    if not isinstance(raw, list) or not all(
        isinstance(h, list) and len(h) == 2 and isinstance(h[0], str) for h in raw
    ):
        raise EnvelopeError(
            f"envelope field 'headers' must be a list of [name, base64 or null], got {raw!r:.200}"
        )
    return tuple((name, None if value is None else _b64("headers", value)) for name, value in raw)


def encode_envelope(envelope: Envelope) -> bytes:
    """The record value written to a replay or DLQ topic: compact UTF-8 JSON."""
    return json.dumps(envelope.to_dict(), separators=(",", ":"), allow_nan=False).encode()


def decode_envelope(data: bytes) -> Envelope:
    """Parse a replay-topic record value; :class:`EnvelopeError` names what is wrong."""
    if not isinstance(data, bytes | bytearray):
        raise EnvelopeError(f"envelope must be bytes, got {type(data).__name__}")
    try:
        parsed = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EnvelopeError(f"envelope is not UTF-8 JSON: {exc}") from exc
    except RecursionError:
        raise EnvelopeError(
            f"envelope is nested too deeply to be JSON of an envelope ({len(data)} bytes)"
        ) from None
    return Envelope.from_dict(parsed)
