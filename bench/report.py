"""Print the markdown table of the latest results (bench/results/<experiment>.json).

    .venv/bin/python -m bench.report

One row per experiment: candidate vs baseline value, ratio, target, met or not, date,
commit (``-`` for a file written before results recorded it; ``+`` after it: the work
tree had changes) and the command that produced it. Experiments without a result file
are listed as not yet measured; older trees' results in ``bench/results/archive/`` are
not read.
"""

from __future__ import annotations

import json
import sys

from bench._experiment import RESULTS

EXPERIMENTS = (
    "throughput",
    "latency",
    "latency_librdkafka",
    "latency_parts",
    "persistence",
    "heterogeneous",
    "overload",
    "replacement",
    "replacement_cold",
    "autoscale",
    "autoscale_live",
    "poison",
    "crc",
    "codecs",
    "cluster",
    "cluster_volume",
    "cluster_volume_s3",
    "broker_cost",
    "soak",
    "soak_20min",
    "planning",
    "planning_ends",
)


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def _measured(result: dict[str, object]) -> dict[str, object]:
    """Where a result keeps what measured it: ``measured_on`` when it was summarised again
    later (``--from-raw``), else the result itself (written by the run)."""
    measured = result.get("measured_on")
    return measured if isinstance(measured, dict) else result


def _commit(result: dict[str, object]) -> str:
    """The commit the figures were measured on, ``+`` if the tree had changes."""
    source = _measured(result)
    commit = source.get("commit")
    if not isinstance(commit, str):
        return "-"
    return commit[:7] + ("+" if source.get("tree_modified") else "")


def _command(result: dict[str, object]) -> object:
    """The command that measured the figures."""
    return _measured(result).get("command") or result.get("command")


def main() -> int:
    print(
        "| experiment | metric | candidate | baseline | ratio | target | met | date | commit "
        "| command |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in EXPERIMENTS:
        path = RESULTS / f"{name}.json"
        if not path.exists():
            print(f"| {name} | not yet measured | | | | | | | | |")
            continue
        d = json.loads(path.read_text())
        met = "yes" if d.get("meets_target") else "**no**"
        if d.get("target") is None or d.get("meets_target") is None:  # reported, not targeted
            met = "-"
        unit = f" ({d['unit']})" if d.get("unit") else ""
        print(
            f"| {name} | {d['metric']}{unit} | {_fmt(d.get('candidate_value'))} | "
            f"{_fmt(d.get('baseline_value'))} | {_fmt(d.get('ratio'))} | {d['target']} | "
            f"{met} | {d['date'][:16]} | {_commit(d)} | `{_command(d)}` |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
