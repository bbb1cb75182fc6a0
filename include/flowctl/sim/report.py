"""Turn simulation results into a table (text and markdown) and plain data for JSON."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

from .engine import SimResult

HEADERS = (
    "mode",
    "scenario",
    "policy",
    "records/s",
    "x equal",
    "makespan s",
    "rt p99 s",
    "latency p99 s",
    "failed",
    "timed out",
    "repeated",
    "settle rounds",
    "steady windows",
)


def _f(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def rows(results: Sequence[tuple[str, SimResult]]) -> list[tuple[str, ...]]:
    """One row per (mode, result); ``x equal`` is relative to equal_split of the same
    mode and scenario in the same run."""
    baseline = {
        (mode, r.scenario): r.throughput_rps for mode, r in results if r.policy == "equal_split"
    }
    out: list[tuple[str, ...]] = []
    for mode, r in results:
        base = baseline.get((mode, r.scenario))
        ratio = r.throughput_rps / base if base else None
        bands = " ".join(f"{b[0]}-{b[1]}" for b in (lr.steady_band for lr in r.lanes) if b)
        out.append(
            (
                mode,
                r.scenario,
                r.policy,
                f"{r.throughput_rps:.0f}",
                _f(ratio),
                _f(r.makespan_s, 1),
                _f(r.rt_p99_s),
                _f(r.latency_p99_s),
                str(r.failed),
                str(r.timed_out),
                str(r.wasted),
                "-" if r.settle_rounds is None else str(r.settle_rounds),
                bands or "-",
            )
        )
    return out


def text_table(table: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in table)) for i, h in enumerate(HEADERS)]
    line = "  ".join(h.ljust(w) for h, w in zip(HEADERS, widths, strict=True))
    body = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in table]
    return "\n".join([line, "  ".join("-" * w for w in widths), *body])


def markdown_table(table: Sequence[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(r) + " |" for r in table]
    return "\n".join(lines)


def _rounded(value: object, digits: int) -> object:
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, dict):
        return {k: _rounded(v, digits) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_rounded(v, digits) for v in value]
    return value


def to_json(mode: str, result: SimResult, digits: int = 4) -> dict[str, object]:
    """Everything in a result as plain data (floats rounded to ``digits``), plus its mode."""
    data = _rounded({"mode": mode, **asdict(result)}, digits)
    assert isinstance(data, dict)
    return data
