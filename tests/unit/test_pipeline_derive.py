"""Configs derived from a shipped one (tests and benchmarks run pipelines of their own)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.lib.derive import derive_config
from flowctl.pipelines.config import load_pipeline_config


def test_a_derived_config_is_renamed_and_loads_with_the_changed_settings(tmp_path: Path) -> None:
    path = derive_config(
        tmp_path,
        "wcderived",
        definition="tests.spark.flow_def_slow",
        sections={"topics": {"partitions": 2}, "stream": {"tuple_size": 40}, "flow": {"w_max": 9}},
    )
    config = load_pipeline_config(path)
    assert (config.name, config.eden_topic, config.partitions) == (
        "wcderived",
        "wcderived.eden",
        2,
    )
    assert config.definition == "tests.spark.flow_def_slow"
    assert config.tuple_size == 40 and config.flow.w_max == 9


def test_a_setting_changes_only_in_its_own_section(tmp_path: Path) -> None:
    text = derive_config(tmp_path, "wcsection", sections={"flow": {"w_min": 2}}).read_text()
    flow = text.partition("[flow]")[2]
    assert "\nw_min = 2\n" in flow and text.count("w_min = ") == 1


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        ({"flow": {"tuple_size": 9}}, r"'tuple_size' is not a setting of \[flow\] of wordcount"),
        ({"nosuch": {"x": 1}}, r"\[nosuch\] is not a section of the wordcount config"),
    ],
)
def test_a_setting_the_shipped_file_lacks_fails_naming_it(
    tmp_path: Path, sections: dict, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        derive_config(tmp_path, "wcbad", sections=sections)
