"""The stream job's MRWQ flusher thread: started, stopped, and told of a gap.

Mixed into :class:`~flowctl.spark.flow.job.FlowStreamJob` (whose attributes it uses):
the driver's main process is the only long-lived process of a topology Spark does not
restart behind our back, so the flusher
(:class:`~flowctl.adapters.mrwq_flusher.FlusherService`) runs there on a thread of its
own. It first flushes whatever earlier generations left in the MRWQ; a gap (lost items)
is resynced at once and the planner told to rebuild its spout from the database.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flowctl.adapters.kafka_group_offsets import GroupCheckpoint
    from flowctl.adapters.memcached_store import MemcachedStore
    from flowctl.adapters.mrwq_flusher import FlusherService
    from flowctl.adapters.mrwq_reports import GapReport
    from flowctl.config import Settings
    from flowctl.pipelines.config import PipelineConfig
    from flowctl.pipelines.config_sections import FlowConfig
    from flowctl.pipelines.sinks import ResultStore

log = logging.getLogger("flowctl.job")

#: Seconds a flush of the whole MRWQ may take at start, activation, drain and stop.
FLUSH_ALL_TIMEOUT_S = 120.0


class FlusherThread:
    """The flusher's thread and service, owned by the driver."""

    topology_id: str
    config: PipelineConfig
    flow: FlowConfig
    store: MemcachedStore
    database_url: str
    results: ResultStore
    rebuild_no: int
    gaps: int
    gap: str | None
    flusher: FlusherService | None
    settings: Settings
    #: The durable checkpoint's copy in the pipeline's consumer group (Kafka's lag tools).
    _group_checkpoint: GroupCheckpoint | None
    _flusher_stop: threading.Event
    _flusher_thread: threading.Thread | None
    _flusher_lock: threading.Lock

    if TYPE_CHECKING:  # FlowStreamJob's, which this mixes into

        def _write_ctl(self, *, required: bool = False) -> None: ...
        def _checkpoint(self) -> dict[int, int] | str: ...

    def _start_flusher(self) -> None:
        """A fresh flusher (its position from the database), the MRWQ flushed, its thread."""
        from flowctl.adapters.kafka_group_offsets import GroupCheckpoint
        from flowctl.adapters.mrwq_flusher import FlusherService
        from flowctl.core.flusher import FlushPolicy

        with self._flusher_lock:
            if self._flusher_thread is not None:
                return
            group = GroupCheckpoint(
                self.settings.kafka_bootstrap, self.config.name, self.config.eden_topic
            )
            service = FlusherService(
                self.store,
                self.database_url,
                self.config.name,
                self.results.apply,
                policy=FlushPolicy(
                    self.flow.flush_max_length,
                    self.flow.flush_update_time_s,
                    self.flow.flush_as_queued,
                ),
                gap_grace_s=self.flow.gap_grace_s,
                poll_interval_s=self.flow.flush_poll_s,
                coalesce_every_s=self.flow.coalesce_every_s,
                on_checkpoint=group.offer,
            )
            self._group_checkpoint = group
            service.on_gap = lambda report: self._on_gap(service, report)
            service.start()
            drained = service.flush_all(FLUSH_ALL_TIMEOUT_S)
            if drained.items:
                log.info(
                    "topology %s: flushed %d item(s) earlier generations left in the MRWQ "
                    "(%d applied, %d duplicate)",
                    self.topology_id,
                    drained.items,
                    drained.applied,
                    drained.duplicates,
                )
            self.flusher = service
            self._flusher_stop = threading.Event()
            self._flusher_thread = threading.Thread(
                target=service.run, args=(self._flusher_stop,), name="mrwq-flusher", daemon=True
            )
            self._flusher_thread.start()

    def _stop_flusher(self, *, flush: bool) -> None:
        from flowctl.adapters.mrwq_flusher import FlushTimeout

        with self._flusher_lock:
            thread, service = self._flusher_thread, self.flusher
            if thread is None or service is None:
                return
            self._flusher_stop.set()
            thread.join(timeout=60)
            self._flusher_thread = None
            if flush:
                try:
                    result = service.flush_all(FLUSH_ALL_TIMEOUT_S)
                    log.info(
                        "topology %s: MRWQ flushed (%d item(s)); durable checkpoint %s",
                        self.topology_id,
                        result.items,
                        self._checkpoint(),
                    )
                except FlushTimeout as exc:
                    log.error(
                        "topology %s: %s; the next topology flushes the rest at its start",
                        self.topology_id,
                        exc,
                    )
            group, self._group_checkpoint = self._group_checkpoint, None
            if group is not None:
                group.close()

    def _on_gap(self, service: FlusherService, report: GapReport) -> bool:
        """MRWQ items were lost: resync now, then have the planner rebuild from the database.

        The order matters: everything queued at the resync is skipped, so the planner must
        rebuild (and dispatch what is not durable) only after it; results of tuples
        dispatched later are flushed normally.
        """
        service.resync()
        self.rebuild_no += 1
        self.gaps += 1
        self.gap = f"rebuild {self.rebuild_no} after lost MRWQ items: {report.gap}"
        self._write_ctl()
        log.error(
            "topology %s: MRWQ gap repaired by re-dispatch (rebuild %d): %s",
            self.topology_id,
            self.rebuild_no,
            report,
        )
        return False
