"""A steady producer that knows exactly which words it sent, however long it runs.

Lines are taken in turn from a fixed pool (cycled), ``rate`` per second, one
:func:`flowctl.adapters.kafka_log.produce` call per second (the platform's own producer:
few, large record batches). The words sent are the pool's counts times the full cycles
plus the counts of the partial cycle's lines, so an hour's exact expectation needs no
hour of counting.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Sequence

from flowctl.adapters import kafka_log
from flowctl.pipelines.wordcount import count_values


class SteadyFeed(threading.Thread):
    """Produce ``rate`` lines/s of ``pool`` into ``topic`` until :meth:`finish`."""

    def __init__(self, bootstrap: str, topic: str, pool: Sequence[bytes], rate: int) -> None:
        super().__init__(name=f"feed-{topic}", daemon=True)
        if rate < 1:
            raise ValueError(f"rate={rate!r} must be >= 1 line/s")
        self.bootstrap = bootstrap
        self.topic = topic
        self.pool = list(pool)
        self.rate = rate
        self.sent = 0  # lines acknowledged by the broker
        self.behind_s = 0.0  # the most the feed fell behind its schedule
        self.error: BaseException | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        second = 0
        try:
            while not self._halt.is_set():
                lines = [self.pool[(self.sent + i) % len(self.pool)] for i in range(self.rate)]
                self.sent += kafka_log.produce(
                    self.bootstrap, self.topic, lines, progress_every=len(lines)
                )
                second += 1
                late = time.monotonic() - (started + second)
                self.behind_s = max(self.behind_s, late)
                self._halt.wait(max(0.0, -late))
        except BaseException as exc:  # reported by the run, which then stops
            self.error = exc

    def finish(self, timeout_s: float = 60.0) -> int:
        """Stop after the second being sent; the lines acknowledged in all."""
        self._halt.set()
        self.join(timeout_s)
        return self.sent

    def expected_counts(self) -> Counter[str]:
        """The words of every line sent (call after :meth:`finish`)."""
        cycles, rest = divmod(self.sent, len(self.pool))
        whole = count_values(self.pool)
        out: Counter[str] = Counter({w: n * cycles for w, n in whole.items()})
        out.update(count_values(self.pool[:rest]))
        return +out
