"""What every benchmark shares: its command line, its main, and what its result file records.

A result file is only comparable with the code it names, so the writer itself adds the
commit, the work tree's state and the date: no experiment can leave them out.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import pytest

from bench import _experiment
from bench._experiment import (
    BadArgument,
    exit_code,
    experiment_parser,
    run_experiment,
    write_result,
)
from flowctl.config import PROJECT_ROOT


def test_a_result_records_its_commit_date_and_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(_experiment, "RESULTS", tmp_path)
    monkeypatch.setattr("sys.argv", [str(PROJECT_ROOT / "bench" / "crc.py"), "--records", "5"])
    path = write_result("crc", {"metric": "records/s", "meets_target": True})
    data = json.loads(path.read_text())
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True
    ).stdout.strip()
    assert path == tmp_path / "crc.json"
    assert data["experiment"] == "crc" and data["metric"] == "records/s"
    assert data["commit"] == head and len(head) == 40
    assert isinstance(data["tree_modified"], bool)
    assert data["date"].endswith("+00:00")
    assert data["command"] == ".venv/bin/python -m bench.crc --records 5"
    assert data["machine"]["cores"] >= 1


def test_a_result_cannot_override_what_the_writer_records(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(_experiment, "RESULTS", tmp_path)
    path = write_result("drift", {"commit": "made-up", "date": "long ago"}, name="drift_trial")
    data = json.loads(path.read_text())
    assert path.name == "drift_trial.json"
    assert data["commit"] != "made-up" and data["date"] != "long ago"


def test_every_experiment_gets_seed_from_the_shared_parser() -> None:
    parser = experiment_parser("Throughput.\n\nDetails.", seed=7)
    parser.add_argument("--lanes", type=int, default=2)
    assert parser.description == "Throughput."
    assert parser.parse_args([]).seed == 7
    assert parser.parse_args(["--seed", "3"]).seed == 3


def test_a_bad_flag_is_a_usage_error_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    def run(args: argparse.Namespace) -> int:
        if args.lanes < 1:
            raise BadArgument(f"--lanes={args.lanes!r} must be >= 1")
        return 0

    parser = experiment_parser("Doc.", seed=1)
    parser.add_argument("--lanes", type=int, default=2)
    assert run_experiment(parser, run, []) == 0
    with pytest.raises(SystemExit) as exited:
        run_experiment(parser, run, ["--lanes", "0"])
    assert exited.value.code == 2
    assert "--lanes=0 must be >= 1" in capsys.readouterr().err


def test_the_exit_code_says_whether_the_target_was_met() -> None:
    assert exit_code({"meets_target": True}) == 0
    assert exit_code({"meets_target": False}) == 1
    assert exit_code({"target": None}) == 0  # reported, not targeted
