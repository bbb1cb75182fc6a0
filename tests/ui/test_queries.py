"""The read model's pure parts: where A and C come from, and the paper's per-window signal."""

from __future__ import annotations

import re

import pytest

from flowctl.pipelines.config import ScalingConfig, load_pipeline_config
from flowctl_airflow.ui.queries import paper_signal, scaling_rule


def test_a_config_name_reads_its_scaling_section() -> None:
    scaling = load_pipeline_config("wordcount").scaling
    assert scaling_rule("wordcount") == (
        scaling.history_windows,
        scaling.threshold_c,
        "config",
        None,
    )


@pytest.mark.parametrize(
    ("pipeline", "problem"),
    [
        ("nosuch", r"file .*nosuch.toml does not exist"),
        ("..", r"pipeline='..' is not a config name"),
        ("Word.Count", r"pipeline='Word.Count' is not a config name"),
    ],
)
def test_anything_else_gets_the_defaults_and_says_why(pipeline: str, problem: str) -> None:
    history, threshold_c, source, why = scaling_rule(pipeline)
    assert (history, threshold_c, source) == (
        ScalingConfig().history_windows,
        ScalingConfig().threshold_c,
        "default",
    )
    assert why is not None
    assert re.search(problem, why)


@pytest.mark.parametrize(
    ("fail_num", "mean", "s2", "c", "signal"),
    [
        (6, 2.0, 5.0, 4.0, "up"),
        (0, 2.0, 5.0, 4.0, "down"),
        (6, 2.0, 4.0, 4.0, "none"),  # S^2 must exceed C, not reach it
        (2, 2.0, 9.0, 4.0, "none"),  # failNum == E(M): neither way
    ],
)
def test_paper_signal(fail_num: int, mean: float, s2: float, c: float, signal: str) -> None:
    assert paper_signal(fail_num, mean, s2, c) == signal
