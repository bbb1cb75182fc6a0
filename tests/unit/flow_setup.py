"""A pipeline config and flow settings for the planner and lane unit tests."""

from __future__ import annotations

import itertools
from pathlib import Path

from flowctl.spark.flow.settings import FlowSettings

_configs = itertools.count()


def flow_settings(
    tmp_path: Path,
    *,
    definition: str = "flowctl.pipelines.wordcount",
    lanes: int = 2,
    standby: bool = False,
    tuple_size: int = 10,
    flow: str = "",
    topics: str = "",
) -> FlowSettings:
    """Settings of a topology ``demo-blue-1`` of a pipeline ``demo`` (Eden ``demo.eden``);
    the addresses are never dialled (the tests pass fakes)."""
    folder = tmp_path / f"config{next(_configs)}"  # lanes cache configs by path
    folder.mkdir()
    path = folder / "demo.toml"
    path.write_text(
        f'name = "demo"\ndefinition = "{definition}"\n[stream]\ntuple_size = {tuple_size}\n'
        f"[flow]\n{flow}\n[topics]\n{topics}\n"
    )
    return FlowSettings(
        bootstrap="kafka.invalid:9092",
        topic="demo.eden",
        pipeline="demo",
        database_url="sqlite://",
        memcached="memcached.invalid:11211",
        topology_id="demo-blue-1",
        lanes=lanes,
        config_path=str(path),
        max_rows=None,
        read_timeout_s=1.0,
        standby=standby,
    )
