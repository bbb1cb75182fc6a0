"""The worker-kill benchmark's reading of the stream task's log and its exact check.

Its verdict (0 invariant errors, records processed twice per kill) rests on these pieces,
so they are checked on known input: the driver's own lines, relayed in Airflow's JSON
task log or as they are, and Spark's lines, which carry no time of the driver's format.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter

from bench import worker_kills

T0 = dt.datetime(2026, 11, 28, 23, 0, tzinfo=dt.UTC).timestamp()


def _driver(at: float, text: str) -> str:
    stamp = dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
    return f"{stamp} INFO flowctl.adapters.mrwq_flusher: {text}"


def _airflow(at: float, event: str) -> str:
    stamp = dt.datetime.fromtimestamp(at, dt.UTC).isoformat().replace("+00:00", "Z")
    return json.dumps({"timestamp": stamp, "level": "info", "event": event})


def _flush(duplicates: int, records: int) -> str:
    return (
        f"MRWQ mrwq.wordcount: flushed 9 item(s) seq 1..9 (7 applied, {duplicates} duplicate "
        f"of {records} record(s), 0 replayed, 0 dlq), 4500 record(s), 30 row(s) in 0.010 s"
    )


def test_duplicates_are_counted_for_the_kill_they_follow_and_errors_are_kept() -> None:
    kills = [{"at_epoch": T0 + 10}, {"at_epoch": T0 + 20}]
    log = "\n".join(
        [
            _driver(T0 + 5, _flush(1, 500)),  # before the first kill
            _airflow(T0 + 12, _driver(T0 + 12, _flush(2, 1000))),  # kill 1, relayed
            _driver(T0 + 13, _flush(0, 0)),
            "26/11/28 23:00:14 WARN TaskSetManager: Lost task 0.0 in stage 5.0",
            _driver(T0 + 14, "topology wc-blue-1: MRWQ gap repaired by re-dispatch (rebuild 2): x"),
            _airflow(T0 + 25, "MRWQ m: " + _flush(3, 1500)),  # kill 2, Airflow's time only
            _driver(
                T0 + 26,
                "MRWQ mrwq.wordcount: cannot apply the batch: range wordcount.eden:1:53500-54000 "
                "partially overlaps applied range wordcount.eden:1:53872-54000 (applied)",
            ),
            _driver(T0 + 40, "topology wc-blue-1 STOPPED after 26 batches, 1267500 records"),
        ]
    )
    read = worker_kills.read_stream_log(log, kills)
    assert read["records_processed_twice_per_kill"] == [1000, 1500]
    assert read["records_processed_twice_before_first_kill"] == 500
    assert read["gap_rebuilds"] == 1
    assert (
        len(read["invariant_errors"]) == 1 and "partially overlaps" in read["invariant_errors"][0]
    )
    assert read["stopped"] == {"batches": 26, "records": 1267500}


def test_the_exact_check_names_words_lost_and_doubled() -> None:
    expected = Counter({"a": 3, "b": 2})
    assert worker_kills.exact(expected, {"a": 3, "b": 2}) == {
        "words_expected": 5,
        "words_stored": 5,
        "words_lost": 0,
        "words_doubled": 0,
    }
    assert worker_kills.exact(expected, {"a": 4, "c": 1}) == {
        "words_expected": 5,
        "words_stored": 5,
        "words_lost": 2,
        "words_doubled": 2,
    }
