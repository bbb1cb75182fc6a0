"""The value checks every boundary shares: config files, Spark options, command lines, forms.

One set of plain functions instead of a schema library: the core is standard library only
(the Spark executors and the job's driver import it, and neither needs Airflow's pydantic),
and the errors must read the project's way, ``<field>=<value> <why>``, whatever the
boundary. A caller adds its own context (the config file's path, the Spark source's
name, argparse's ``argument --x:``) around the :class:`InvalidValue` it catches.

Two kinds of input:

- typed values (TOML, JSON conf, Python callers): :func:`integer`, :func:`number` and
  :func:`choice` refuse a wrong type outright; a bool is never a number and a fraction is
  never an integer;
- text (command lines, Spark's string options, rendered templates):
  :func:`integer_from_text` and :func:`number_from_text` read the text first and show it,
  as given, in the error.

:func:`allowed_parallelisms` is the one rule for lane counts: powers of two within a
pipeline's bounds (a rescale doubles or halves, so every reachable parallelism is one).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

#: The largest parallelism ever offered (2**30 lanes): the bound of an "unbounded" check.
MAX_PARALLELISM = 1 << 30


class InvalidValue(ValueError):
    """``field=value why``: a value a boundary refuses; ``field``, ``value``, ``why`` kept apart."""

    def __init__(self, field: str, value: Any, why: str) -> None:
        super().__init__(f"{field}={value!r} {why}")
        self.field = field
        self.value = value
        self.why = why


def _bounds(lo: float | None, hi: float | None, *, lo_open: bool, hi_open: bool) -> str:
    parts = []
    if lo is not None:
        parts.append(f"> {lo:g}" if lo_open else f">= {lo:g}")
    if hi is not None:
        parts.append(f"< {hi:g}" if hi_open else f"<= {hi:g}")
    return " and ".join(parts)


def _outside(
    value: float, lo: float | None, hi: float | None, *, lo_open: bool, hi_open: bool
) -> bool:
    if lo is not None and (value <= lo if lo_open else value < lo):
        return True
    return hi is not None and (value >= hi if hi_open else value > hi)


def integer(field: str, value: Any, *, lo: int | None = None, hi: int | None = None) -> int:
    """``value`` if it is an int within ``[lo, hi]`` (a bool or a float is refused)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or _outside(value, lo, hi, lo_open=False, hi_open=False)
    ):
        bounds = _bounds(lo, hi, lo_open=False, hi_open=False)
        raise InvalidValue(field, value, f"must be an integer {bounds}".rstrip())
    return value


def number(
    field: str,
    value: Any,
    *,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
    hi_open: bool = False,
) -> float:
    """``value`` as a float if it is a finite int or float within the bounds (no bool)."""
    bad = isinstance(value, bool) or not isinstance(value, int | float)
    bad = (
        bad or not math.isfinite(value) or _outside(value, lo, hi, lo_open=lo_open, hi_open=hi_open)
    )
    if bad:
        bounds = _bounds(lo, hi, lo_open=lo_open, hi_open=hi_open)
        raise InvalidValue(field, value, f"must be a number {bounds}".rstrip())
    return float(value)


def choice(field: str, value: Any, allowed: Sequence[T]) -> T:
    """``value`` if it is one of ``allowed``; the error lists them."""
    if value not in allowed:
        raise InvalidValue(field, value, f"must be one of {', '.join(map(str, allowed))}")
    # ``value`` is Any: membership in ``allowed`` is what makes it a T, which no checker
    # can see through ``in``; a cast would say the same with no check behind it.
    return value  # type: ignore[no-any-return]


#: The record-batch compression codecs a platform producer may write (``none``: uncompressed).
#: Every one of them is also read, whoever wrote it: kafka-python decodes them with the
#: codec libraries the project depends on (docs/flow-control.md, "What is read").
COMPRESSION_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
#: The codec of a producer told none: uncompressed, what bench/codecs.py measured best
#: (the flow job reads every codec within noise of it, and it produced fastest; on the
#: embedded broker a codec saves no network or disk; bench/README.md, "codecs").
DEFAULT_COMPRESSION = "none"


def compression(field: str, value: Any) -> str:
    """A producer's codec name, one of :data:`COMPRESSION_CODECS` (text is stripped and
    lower-cased: ``LZ4`` is ``lz4``); anything else names the field and the value."""
    name = value.strip().lower() if isinstance(value, str) else value
    if name not in COMPRESSION_CODECS:
        raise InvalidValue(field, value, f"must be one of {', '.join(COMPRESSION_CODECS)}")
    return str(name)


def integer_from_text(
    field: str, text: Any, *, lo: int | None = None, hi: int | None = None
) -> int:
    """The integer ``text`` spells (an int passes as it is); errors show the text as given."""
    if isinstance(text, bool) or (isinstance(text, float) and not text.is_integer()):
        raise InvalidValue(field, text, "is not an integer")
    try:
        value = int(text)
    except (TypeError, ValueError, OverflowError):
        raise InvalidValue(field, text, "is not an integer") from None
    if _outside(value, lo, hi, lo_open=False, hi_open=False):
        raise InvalidValue(field, text, f"must be {_bounds(lo, hi, lo_open=False, hi_open=False)}")
    return value


def number_from_text(
    field: str,
    text: Any,
    *,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
    hi_open: bool = False,
) -> float:
    """The finite number ``text`` spells; errors show the text as given."""
    if isinstance(text, bool):
        raise InvalidValue(field, text, "is not a number")
    try:
        value = float(text)
    except (TypeError, ValueError, OverflowError):
        raise InvalidValue(field, text, "is not a number") from None
    if not math.isfinite(value):
        raise InvalidValue(field, text, "is not a finite number")
    if _outside(value, lo, hi, lo_open=lo_open, hi_open=hi_open):
        raise InvalidValue(
            field, text, f"must be {_bounds(lo, hi, lo_open=lo_open, hi_open=hi_open)}"
        )
    return value


#: How a yes/no reads as text (a rendered template gives "True"/"False", a form true/false).
_FLAGS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def flag_from_text(field: str, text: Any, *, blank: bool | None = False) -> bool:
    """A bool, or the text of one (``true``/``false``, ``yes``/``no``, ``1``/``0``, any case).

    ``blank`` is what an empty value or ``None`` means (``None``: refused).
    """
    if isinstance(text, bool):
        return text
    word = "" if text is None else str(text).strip().lower()
    if word in ("", "none") and blank is not None:
        return blank
    if word not in _FLAGS:
        raise InvalidValue(field, text, "must be true or false")
    return _FLAGS[word]


def allowed_parallelisms(lo: int = 1, hi: int = MAX_PARALLELISM) -> list[int]:
    """The parallelisms a pipeline may run: powers of two within ``[lo, hi]``."""
    out, p = [], 1
    while p <= hi:
        if p >= lo:
            out.append(p)
        p <<= 1
    return out


def parallelism(
    field: str, value: Any, lo: int = 1, hi: int = MAX_PARALLELISM, *, where: str = ""
) -> int:
    """``value`` (an int or the text of one) if it is one of :func:`allowed_parallelisms`.

    ``where`` names the bounds' origin (``"of wordcount.toml"``) in the error.
    """
    allowed = allowed_parallelisms(lo, hi)
    shown = allowed if hi < MAX_PARALLELISM else "1, 2, 4, 8, ..."
    try:
        lanes = integer_from_text(field, value)
    except InvalidValue:
        raise InvalidValue(field, value, f"is not an integer; allowed values: {shown}") from None
    if lanes not in allowed:
        within = f"[{lo}, {hi}]" if hi < MAX_PARALLELISM else f">= {lo}"
        origin = f" {where}" if where else ""
        raise InvalidValue(
            field,
            lanes,
            f"is not allowed: it must be a power of two within {within}{origin}, "
            f"i.e. one of {shown}",
        )
    return lanes


def argparse_type(parse: Callable[[str, str], T]) -> Callable[[str], T]:
    """An argparse ``type=`` from a ``(field, text)`` check: argparse names the option, the
    error the value and why (``argument --lines: '0' must be >= 1``)."""

    def convert(text: str) -> T:
        try:
            return parse("value", text)
        except InvalidValue as exc:
            raise argparse.ArgumentTypeError(f"{exc.value!r} {exc.why}") from None

    return convert
