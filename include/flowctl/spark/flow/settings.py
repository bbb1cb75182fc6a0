"""What the planner and the lanes of a flow-controlled source share: their settings, the
pipeline config and the per-process caches of both (:mod:`flowctl.adapters.process_cache`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from flowctl.adapters.process_cache import cached
from flowctl.core.spout_contract import SpoutConfig
from flowctl.spark.flow.channels import namespace

if TYPE_CHECKING:
    from flowctl.adapters.memcached_store import MemcachedStore
    from flowctl.pipelines.config import PipelineConfig

#: Per-process caches (:mod:`flowctl.adapters.process_cache`): configs by path, memcached clients
#: by address.
_CONFIGS = "flowctl._flow_configs"
_STORES = "flowctl._flow_stores"


@dataclass(frozen=True)
class FlowSettings:
    """Everything the planner and the lanes need, built from the source options."""

    bootstrap: str
    topic: str
    pipeline: str
    database_url: str
    memcached: str
    topology_id: str
    lanes: int
    config_path: str
    max_rows: int | None
    read_timeout_s: float
    standby: bool
    #: The application's task slots: a standby's warm-up batch runs on every one of them,
    #: so every Python worker is warm whatever lanes it is given at activation.
    slots: int | None = None

    @property
    def ns(self) -> str:
        return namespace(self.topology_id)


def load_config(path: str) -> PipelineConfig:
    """The pipeline config (cached per process: lanes call this per task)."""
    from flowctl.pipelines.config import load_pipeline_config

    return cached(_CONFIGS, path, lambda: load_pipeline_config(path))


def cached_store(address: str) -> MemcachedStore:
    """The process's :class:`~flowctl.adapters.memcached_store.MemcachedStore` at ``address``."""
    from flowctl.adapters.memcached_store import MemcachedStore

    return cached(_STORES, address, lambda: MemcachedStore(address))


def spout_config(
    settings: FlowSettings,
    config: PipelineConfig,
    *,
    lanes: int | None = None,
    w_init: int | None = None,
) -> SpoutConfig:
    """The spout's parameters: the pipeline's ``[flow]`` table and the topology's lanes
    (``lanes``: another count than the source option's, given at activation; ``w_init``:
    another start window than the lanes' share of the batch, an overlapped green's)."""
    f = config.flow
    lanes = settings.lanes if lanes is None else lanes
    return SpoutConfig(
        pipeline=config.name,
        lanes=lanes,
        tuple_size=config.tuple_size,
        w_min=f.w_min,
        w_max=f.w_max,
        w_init=config.initial_window(lanes) if w_init is None else w_init,
        rtt_threshold_s=f.rtt_threshold_s,
        rtt_min_threshold_s=f.rtt_min_threshold_s,
        slow_decrease=f.slow_decrease,
        growth=f.growth,
        policy=f.dispatch,
        tuple_timeout_s=f.ack_timeout_s,
        linger_s=f.linger_s,
    )
