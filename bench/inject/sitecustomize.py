"""Faults injected on purpose by the benchmarks, into the jobs' processes only.

Imported at start-up by every Python process whose ``PYTHONPATH`` starts with this
directory (a job's driver and its Spark workers); does nothing unless asked:

- ``FLOWCTL_BENCH_SLOW_SQLITE=1``: every new ``sqlite3`` connection gets the SQL
  function ``bench_sleep_ms(ms)``; ``bench/persistence.py`` creates triggers on
  ``word_counts`` that call it for each row inserted or updated, so every path that
  writes results (direct writes, MRWQ flushes) pays the same cost per row;
- ``FLOWCTL_BENCH_LANE_DELAY=MS,LANE,FACTOR``: the word count's
  ``count_values`` sleeps ``MS`` ms per record, ``FACTOR`` times longer in lane
  ``LANE`` (the flow lane, or the Spark partition of a plain job): an operator whose
  time is waiting, identical in the flow-controlled job and the baseline;
- ``FLOWCTL_BENCH_LANE_DRIFT=PATH`` (with the above): lane ``LANE`` is ``FACTOR`` times
  slower only while the file ``PATH`` exists (``bench/drift.py`` creates and removes it:
  a lane that slows down and recovers during one run);
- ``FLOWCTL_BENCH_TRACE=PATH``: no fault: timestamps of the flow job's steps appended
  to ``PATH`` (``bench/lib/latency_trace.py``, read by ``bench/latency_parts.py``).
"""

import os

if os.environ.get("FLOWCTL_BENCH_TRACE"):
    from bench.lib import latency_trace

    latency_trace.install(os.environ["FLOWCTL_BENCH_TRACE"])

if os.environ.get("FLOWCTL_BENCH_SLOW_SQLITE"):
    import sqlite3
    import sqlite3.dbapi2
    import time

    _connect = sqlite3.connect

    def _sleep_ms(ms):
        time.sleep(float(ms) / 1000.0)
        return 0

    def _slow_connect(*args, **kwargs):
        conn = _connect(*args, **kwargs)
        conn.create_function("bench_sleep_ms", 1, _sleep_ms)
        return conn

    sqlite3.connect = _slow_connect
    sqlite3.dbapi2.connect = _slow_connect  # what SQLAlchemy's pysqlite dialect calls

if os.environ.get("FLOWCTL_BENCH_LANE_DELAY"):
    import sys
    import time

    _ms, _lane, _factor = os.environ["FLOWCTL_BENCH_LANE_DELAY"].split(",")
    _MS, _LANE, _FACTOR = float(_ms), int(_lane), float(_factor)
    _DRIFT = os.environ.get("FLOWCTL_BENCH_LANE_DRIFT")

    def _lane_now():
        flow = sys.modules.get("flowctl.spark.flow.deadline")
        lane = flow.current_lane() if flow is not None else None
        if lane is None:
            try:
                from pyspark import TaskContext

                ctx = TaskContext.get()
                lane = None if ctx is None else ctx.partitionId()
            except Exception:
                lane = None
        return lane

    try:
        from flowctl.pipelines import wordcount as _wc

        _count_values = _wc.count_values

        def _slow_count_values(values):
            values = list(values)
            lane = _lane_now()
            if lane is not None:
                slowed = lane == _LANE and (_DRIFT is None or os.path.exists(_DRIFT))
                factor = _FACTOR if slowed else 1.0
                time.sleep(len(values) * _MS * factor / 1000.0)
            return _count_values(values)

        _wc.count_values = _slow_count_values
    except ImportError:
        pass
