"""Simulate one flow-controlled source and P lanes; compare dispatch policies.

Runs every scenario of :mod:`flowctl.sim.scenarios` under the baseline
``equal_split`` (static 1/P split, fixed in-flight cap, no adaptation) and the
production spout (:class:`flowctl.core.spout.Spout`: adaptive windows) with
``round_robin`` and ``least_loaded`` dispatch, in the
continuous (Storm-like) and micro-batch (Spark-like) modes; prints a table,
and writes bench/results/simulate.json and bench/results/simulate.png (each
lane's window over time, and throughput over time per policy).

    .venv/bin/python -m bench.simulate [--lanes 4] [--slow-factor 4] [--tuples 4000]
        [--modes continuous,microbatch] [--scenarios heterogeneous,...] [--seed 1]

Everything is simulated time: the numbers do not depend on this machine.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from bench._experiment import RESULTS, experiment_parser, provenance, run_experiment
from flowctl.sim.engine import SimResult, simulate
from flowctl.sim.model import MODES, POLICIES
from flowctl.sim.report import markdown_table, rows, text_table, to_json
from flowctl.sim.scenarios import SCENARIOS, Knobs, build

TARGET_RATIO = 1.3
TARGET_SETTLE_ROUNDS = 20


def _csv(value: str, allowed: tuple[str, ...] | list[str], what: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in items if v not in allowed]
    if bad or not items:
        raise argparse.ArgumentTypeError(f"{what}: unknown {bad or value!r}; choose from {allowed}")
    return items


def _parser() -> argparse.ArgumentParser:
    p = experiment_parser(__doc__, seed=1)
    p.add_argument("--lanes", type=int, default=4, help="number of lanes P (>= 2)")
    p.add_argument("--speed", type=float, default=1000.0, help="records/s of a normal lane")
    p.add_argument(
        "--slow-factor", type=float, default=4.0, help="how much slower the slow lane is"
    )
    p.add_argument("--tuples", type=int, default=4000, help="workload in tuples")
    p.add_argument("--tuple-size", type=int, default=100, help="records per tuple")
    p.add_argument("--threshold", type=float, default=1.0, help="fixed rt threshold, seconds")
    p.add_argument(
        "--modes",
        type=lambda v: _csv(v, MODES, "--modes"),
        default=list(MODES),
        help=f"comma-separated, from {MODES}",
    )
    p.add_argument(
        "--scenarios",
        type=lambda v: _csv(v, list(SCENARIOS), "--scenarios"),
        default=list(SCENARIOS),
        help=f"comma-separated, from {tuple(SCENARIOS)}",
    )
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    p.add_argument("--markdown", action="store_true", help="print the table as markdown")
    return p


def run_all(args: argparse.Namespace) -> list[tuple[str, SimResult]]:
    knobs = Knobs(
        lanes=args.lanes,
        speed=args.speed,
        slow_factor=args.slow_factor,
        tuples=args.tuples,
        tuple_size=args.tuple_size,
        threshold=args.threshold,
        seed=args.seed,
    )
    results = []
    for mode in args.modes:
        for name in args.scenarios:
            config = build(name, replace(knobs, mode=mode))
            for policy in POLICIES:
                results.append((mode, simulate(config, policy)))
    return results


def targets(results: list[tuple[str, SimResult]]) -> list[str]:
    """The stated targets, checked on the heterogeneous scenario of each mode."""
    lines = []
    for mode in sorted({m for m, _ in results}):
        by_policy = {r.policy: r for m, r in results if m == mode and r.scenario == "heterogeneous"}
        if not {"equal_split", "least_loaded"} <= set(by_policy):
            continue
        ll, eq = by_policy["least_loaded"], by_policy["equal_split"]
        ratio = ll.throughput_rps / eq.throughput_rps
        settle = ll.settle_rounds
        ok_ratio = ratio >= TARGET_RATIO
        ok_settle = settle is not None and settle <= TARGET_SETTLE_ROUNDS
        lines.append(
            f"[{mode}] least_loaded / equal_split = {ratio:.2f} "
            f"(target >= {TARGET_RATIO}: {'met' if ok_ratio else 'MISSED'}); "
            f"windows settle in {settle} rounds "
            f"(target <= {TARGET_SETTLE_ROUNDS}: {'met' if ok_settle else 'MISSED'})"
        )
    return lines


def plot(results: list[tuple[str, SimResult]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = sorted({m for m, _ in results}, key=list(MODES).index)
    scenarios = list(dict.fromkeys(r.scenario for _, r in results))
    fig, axes = plt.subplots(
        len(scenarios),
        2 * len(modes),
        figsize=(6 * 2 * len(modes), 3.2 * len(scenarios)),
        squeeze=False,
    )
    for row, scenario in enumerate(scenarios):
        for col, mode in enumerate(modes):
            runs = {r.policy: r for m, r in results if m == mode and r.scenario == scenario}
            ax_w, ax_t = axes[row][2 * col], axes[row][2 * col + 1]
            ll = runs.get("least_loaded")
            if ll is not None:
                for lane in ll.lanes:
                    if lane.window_trace:
                        ts, ws = zip(*lane.window_trace, strict=True)
                        ax_w.step(ts, ws, where="post", label=f"lane {lane.lane}")
            ax_w.set_title(f"{mode} / {scenario}: window per lane (least_loaded)", fontsize=9)
            ax_w.set_xlabel("simulated s")
            ax_w.set_ylabel("window (tuples)")
            ax_w.legend(fontsize=7)
            styles = {"equal_split": "-", "round_robin": "--", "least_loaded": ":"}
            for policy, r in runs.items():
                if r.throughput_series:
                    ts, rps = zip(*r.throughput_series, strict=True)
                    ax_t.plot(
                        ts,
                        rps,
                        styles.get(policy, "-"),
                        linewidth=1.6,
                        label=f"{policy} ({r.throughput_rps:.0f}/s)",
                    )
            ax_t.set_title(f"{mode} / {scenario}: records/s", fontsize=9)
            ax_t.set_xlabel("simulated s")
            ax_t.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _run(args: argparse.Namespace) -> int:
    results = run_all(args)
    table = rows(results)
    print(markdown_table(table) if args.markdown else text_table(table))
    print()
    checks = targets(results)
    for line in checks:
        print(line)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    payload = {
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "targets": checks,
        "results": [to_json(mode, r) for mode, r in results],
        **provenance(),
    }
    (args.out_dir / "simulate.json").write_text(json.dumps(payload, separators=(",", ":")))
    plot(results, args.out_dir / "simulate.png")
    print(f"\nwrote {args.out_dir / 'simulate.json'} and {args.out_dir / 'simulate.png'}")
    return 0 if all("MISSED" not in line for line in checks) else 1


def main(argv: list[str] | None = None) -> int:
    return run_experiment(_parser(), _run, argv)


if __name__ == "__main__":
    sys.exit(main())
