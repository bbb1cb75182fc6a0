"""The flow source's plan in Spark's offset log, and the ``[flow]`` config that drives the spout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flowctl.core.spout_contract import Dispatch, Outcome
from flowctl.core.tuples import TupleRange
from flowctl.pipelines.config import (
    FlowConfig,
    PipelineConfigError,
    load_pipeline_config,
    resolve_path,
)
from flowctl.spark.flow.channels import LaneFeedback
from flowctl.spark.flow.plan import decode_plan, encode_plan, encode_warmup, initial_offset
from flowctl.spark.flow.settings import FlowSettings, spout_config

BIG_EDGE = 2**64 - 3  # acker edges are 64-bit: they must survive Spark's JSON offset log


def test_the_plan_round_trips_through_json_grouped_by_lane() -> None:
    dispatches = [
        Dispatch(1, TupleRange("p.eden", 0, 0, 100), BIG_EDGE, False, "p.replay.a"),
        Dispatch(0, TupleRange("p.replay.b", 2, 7, 8), 5, True, "p.replay.a"),
        Dispatch(1, TupleRange("p.eden", 1, 200, 250), 9, False, "p.replay.b"),
    ]
    offset = json.loads(json.dumps(encode_plan("p.eden", 4, dispatches, "p")))
    parts = decode_plan(offset, "p.eden", "p")
    assert [(p.lane, p.seq) for p in parts] == [(0, 4), (1, 4)]
    assert [(e.tuple, e.edge, e.replay, e.from_topic) for e in parts[1].entries] == [
        (TupleRange("p.eden", 0, 0, 100), BIG_EDGE, False, "p.replay.a"),
        (TupleRange("p.eden", 1, 200, 250), 9, False, "p.replay.b"),
    ]
    assert parts[0].entries[0].replay and parts[0].entries[0].tuple.id == "p.replay.b:2:7-8"
    assert decode_plan(initial_offset("p.eden"), "p.eden", "p") == []


def test_a_warmup_offset_gives_each_lane_one_range_and_admits_nothing() -> None:
    ranges = [TupleRange("p.eden", 0, 50, 100), TupleRange("p.eden", 1, 0, 30)]
    offset = json.loads(json.dumps(encode_warmup("p.eden", 3, 2, ranges)))
    assert offset["plan"] == [] and offset["seq"] == 3
    assert offset != encode_warmup("p.eden", 3, 3, ranges)  # a new batch for Spark each time
    parts = decode_plan(offset, "p.eden", "p")
    assert [(p.lane, p.seq, p.warmup) for p in parts] == [(0, 3, True), (1, 3, True)]
    assert [p.entries[0].tuple for p in parts] == ranges
    assert not any(p.warmup for p in decode_plan(encode_plan("p.eden", 1, [], "p"), "p.eden", "p"))


def test_a_plain_mode_offset_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"is not a flow plan of topic 'p\.eden'"):
        decode_plan({"topic": "p.eden", "offsets": {"0": 5}}, "p.eden", "p")
    with pytest.raises(ValueError, match=r"is not a flow plan of topic 'q\.eden'"):
        decode_plan(initial_offset("p.eden"), "q.eden", "p")


def _result_from_json(entry: dict) -> object:
    return LaneFeedback.decode({"results": [entry]}).results[0]


def test_lane_feedback_entries_parse_into_results() -> None:
    r = _result_from_json(
        {
            "tuple_id": "p.eden:0:0-100",
            "outcome": "dlq",
            "xor": BIG_EDGE,
            "rt": 0.5,
            "records": 100,
            "routed_records": 3,
            "dead_records": 1,
        }
    )
    assert (r.outcome, r.xor, r.routed_records, r.dead_records) == (Outcome.DLQ, BIG_EDGE, 3, 1)
    with pytest.raises(ValueError, match="'exploded' is not a valid Outcome"):
        _result_from_json({"tuple_id": "p.eden:0:0-100", "outcome": "exploded"})


def _config(tmp_path: Path, flow: str) -> Path:
    path = tmp_path / "demo.toml"
    path.write_text(
        f'name = "demo"\ndefinition = "flowctl.pipelines.wordcount"\n[stream]\n'
        f"tuple_size = 10\n[flow]\n{flow}\n"
    )
    return path


def test_flow_defaults_fix_the_latency_target_and_adaptive_stays_selectable(
    tmp_path: Path,
) -> None:
    config = load_pipeline_config(_config(tmp_path, ""))
    assert config.flow == FlowConfig()
    assert config.flow.rtt_threshold_s == 2.0 and config.flow.mode == "flow"
    adaptive = load_pipeline_config(
        _config(tmp_path, 'rtt = "adaptive"\ndispatch = "least_loaded"')
    )
    settings = FlowSettings(
        "b:1", "demo.eden", "demo", "sqlite://", "m:1", "t1", 3, "x", None, 30.0, False
    )
    spout = spout_config(settings, adaptive)
    assert spout.rtt_threshold_s is None and spout.policy == "least_loaded"
    assert (spout.lanes, spout.tuple_size, spout.tuple_timeout_s) == (3, 10, 120.0)


@pytest.mark.parametrize(
    ("flow", "message"),
    [
        ('mode = "fast"', r"flow.mode='fast' must be one of flow, plain"),
        ("w_init = 300", r"flow.w_init=300 must lie in \[w_min=1, w_max=256\]"),
        ("w_max = 0", r"flow.w_max=0 must be an integer >= 1"),
        ("load_factor = 0.4", r"flow.load_factor=0.4 must be a number > 0.5 and < 1"),
        ("backpressure_factor = 1", r"flow.backpressure_factor=1 must be a number > 1"),
        ('rtt = "tcp"', r"flow.rtt='tcp' must be one of fixed, adaptive"),
        ("latency_target_s = 0", r"flow.latency_target_s=0 must be a number > 0"),
        ("replay_backoff_max_s = 0.1", r"flow.replay_backoff_max_s=0.1 must be >= "),
        ("windw = 3", r"flow.windw=3 is not a known field"),
    ],
)
def test_bad_flow_values_name_the_field(tmp_path: Path, flow: str, message: str) -> None:
    with pytest.raises(PipelineConfigError, match=message):
        load_pipeline_config(_config(tmp_path, flow))


def _pipeline(
    tmp_path: Path, mode: str, definition: str = "flowctl.pipelines.wordcount", sink: bool = True
) -> str:
    """A minimal config; ``sink``: with the shipped word count's ``[sink]`` (where results go)."""
    shipped = resolve_path("wordcount").read_text()
    block = shipped[shipped.index("[sink]\n") : shipped.index("[topics]\n")] if sink else ""
    path = tmp_path / "jobdemo.toml"
    path.write_text(
        f'name = "jobdemo"\ndefinition = "{definition}"\n{block}[flow]\nmode = "{mode}"\n'
    )
    return str(path)


def test_the_config_mode_picks_the_job_and_standby_needs_flow(tmp_path: Path) -> None:
    from flowctl.config import Settings
    from flowctl.spark.entry import make_job
    from flowctl.spark.flow.job import FlowStreamJob
    from flowctl.spark.job import StreamJob, parse_args

    settings = Settings(home=tmp_path, database_url=f"sqlite:///{tmp_path / 'db.sqlite'}")
    flow_job = make_job(
        parse_args(["--pipeline-config", _pipeline(tmp_path, "flow"), "--standby"]), settings
    )
    assert isinstance(flow_job, FlowStreamJob) and flow_job.standby and not flow_job.admit
    assert flow_job.ns == f"flow.{flow_job.topology_id}"
    plain = make_job(parse_args(["--pipeline-config", _pipeline(tmp_path, "plain")]), settings)
    assert type(plain) is StreamJob
    with pytest.raises(ValueError, match=r"--standby needs flow\.mode='flow'"):
        make_job(
            parse_args(["--pipeline-config", _pipeline(tmp_path, "plain"), "--standby"]), settings
        )
    logetl = _pipeline(tmp_path, "plain", "flowctl.pipelines.logetl")
    with pytest.raises(ValueError, match=r"flow\.mode='plain' runs the word count only"):
        make_job(parse_args(["--pipeline-config", logetl]), settings)


def test_a_flow_job_without_apply_or_sink_is_refused_before_it_starts(tmp_path: Path) -> None:
    from flowctl.config import Settings
    from flowctl.spark.entry import make_job
    from flowctl.spark.job import parse_args

    settings = Settings(home=tmp_path, database_url=f"sqlite:///{tmp_path / 'db.sqlite'}")
    config = _pipeline(tmp_path, "flow", sink=False)
    with pytest.raises(PipelineConfigError, match=r"jobdemo\.toml: definition=.* has no apply\(\)"):
        make_job(parse_args(["--pipeline-config", config]), settings)


def test_a_definition_module_without_definition_is_named(tmp_path: Path) -> None:
    from flowctl.config import Settings
    from flowctl.spark.entry import make_job
    from flowctl.spark.job import parse_args

    settings = Settings(home=tmp_path, database_url=f"sqlite:///{tmp_path / 'db.sqlite'}")
    config = _pipeline(tmp_path, "flow", "flowctl.textgen")
    with pytest.raises(ValueError, match=r"definition='flowctl\.textgen' has no DEFINITION"):
        make_job(parse_args(["--pipeline-config", config]), settings)


def test_a_tuple_past_its_deadline_raises_and_never_blocks_the_next() -> None:
    import time

    from flowctl.spark.flow.deadline import TupleTimeout, current_lane
    from flowctl.spark.flow.deadline import run_with_deadline as _run_with_deadline

    def slow(records: list[int]) -> int:
        time.sleep(1.0)
        return len(records)

    with pytest.raises(TupleTimeout, match=r"deadline of 0\.05 s"):
        _run_with_deadline(slow, [1, 2], 0.05, lane=3)
    # a fresh helper thread: the abandoned call is still sleeping, this one is not behind it
    assert _run_with_deadline(lambda rs: (current_lane(), len(rs)), [1], 0.5, lane=3) == (3, 1)
    assert current_lane() is None  # the lane is set in the helper thread's context only
