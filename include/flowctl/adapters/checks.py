"""Argument checks shared by the SQL adapters: one wording for every bad value.

Each raises ``ValueError`` naming the field and the value, so a bad call is
refused before any SQL runs and the message says what to fix.
"""

from __future__ import annotations

import datetime as dt


def check_text(field: str, value: object) -> str:
    """A non-blank string."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{field}={value!r} must be a non-empty string")
    return value


def check_int(field: str, value: object, minimum: int = 0) -> int:
    """An integer (not a bool) at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{field}={value!r} must be an integer >= {minimum}")
    return value


def check_time(field: str, value: object) -> dt.datetime:
    """A timezone-aware datetime (every timestamp column stores UTC)."""
    if not isinstance(value, dt.datetime) or value.tzinfo is None:
        raise ValueError(f"{field}={value!r} must be a timezone-aware datetime")
    return value
