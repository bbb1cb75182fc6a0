"""What the planner and the lanes of a flow-controlled source share: their settings, the
pipeline config and per-process caches (a Python worker of Spark runs many tasks, and
module globals do not survive between them, so the cache lives in ``sys.modules``)."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, cast

from flowctl.core.spout_contract import SpoutConfig
from flowctl.spark.flow.channels import namespace

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    from flowctl.adapters.memcached_store import MemcachedStore
    from flowctl.pipelines.config import PipelineConfig

_CACHE_MODULE = "flowctl._flow_lane_cache"


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


class WorkerCache(Protocol):
    """What :func:`worker_cache` holds, each keyed by what it was built from."""

    configs: dict[str, PipelineConfig]  # by config path
    stores: dict[str, MemcachedStore]  # by memcached address
    planners: dict[str, object]  # by topology id: flowctl.spark.flow.planner.planner_for's
    pool: ThreadPoolExecutor | None  # the thread that runs process() under a deadline


def worker_cache() -> WorkerCache:
    """Per-process cache in ``sys.modules`` (module globals do not survive between tasks)."""
    cache = sys.modules.get(_CACHE_MODULE)
    if cache is None:
        cache = types.ModuleType(_CACHE_MODULE, "Per-worker state of flowctl lanes.")
        vars(cache).update(configs={}, stores={}, planners={}, pool=None)
        sys.modules[_CACHE_MODULE] = cache
    # A module answers any attribute: the type checker cannot see the ones set above.
    return cast("WorkerCache", cache)


def load_config(path: str) -> PipelineConfig:
    """The pipeline config (cached per process: lanes call this per task)."""
    cache = worker_cache()
    config = cache.configs.get(path)
    if config is None:
        from flowctl.pipelines.config import load_pipeline_config

        config = load_pipeline_config(path)
        cache.configs[path] = config
    return config


def cached_store(address: str) -> MemcachedStore:
    """The process's :class:`~flowctl.adapters.memcached_store.MemcachedStore` at ``address``."""
    from flowctl.adapters.memcached_store import MemcachedStore

    cache = worker_cache()
    store = cache.stores.get(address)
    if store is None:
        store = MemcachedStore(address)
        cache.stores[address] = store
    return store


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
