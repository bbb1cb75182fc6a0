"""``[scaling] handover``: overlap by default, sequential selectable, anything else named."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowctl.pipelines.config import PipelineConfigError, load_pipeline_config

SHIPPED = Path(__file__).resolve().parents[2] / "include" / "pipelines" / "wordcount.toml"


def _config(tmp_path: Path, extra: str) -> Path:
    text = SHIPPED.read_text().replace("[scaling]\n", f"[scaling]\n{extra}\n", 1)
    path = tmp_path / "wordcount.toml"
    path.write_text(text.replace('handover = "overlap"\n', "", 1) if extra else text)
    return path


def test_a_replacement_overlaps_by_default(tmp_path: Path) -> None:
    assert load_pipeline_config(_config(tmp_path, "")).scaling.handover == "overlap"


def test_the_sequential_handover_stays_selectable(tmp_path: Path) -> None:
    config = load_pipeline_config(_config(tmp_path, 'handover = "sequential"'))
    assert config.scaling.handover == "sequential"


def test_an_unknown_handover_is_named_with_its_value(tmp_path: Path) -> None:
    with pytest.raises(PipelineConfigError, match=r"scaling\.handover.*'parallel'"):
        load_pipeline_config(_config(tmp_path, 'handover = "parallel"'))
