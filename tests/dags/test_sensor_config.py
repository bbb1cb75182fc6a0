"""The ``[scaling]`` section of a pipeline config: parsed, defaulted, every bad key named."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowctl.core.scaling_policy import WindowPolicy
from flowctl.pipelines.config import PipelineConfigError, ScalingConfig, load_pipeline_config

HEAD = 'name = "demo"\ndefinition = "flowctl.pipelines.wordcount"\n'


def _load(tmp_path: Path, scaling: str):
    path = tmp_path / "demo.toml"
    path.write_text(HEAD + ("[scaling]\n" + scaling if scaling is not None else ""))
    return load_pipeline_config(path)


def test_every_shipped_pipeline_has_a_scaling_section() -> None:
    for name in ("wordcount", "logetl"):
        text = load_pipeline_config(name).source.read_text()
        assert "\n[scaling]\n" in text, name
    assert load_pipeline_config("wordcount").scaling.policy == "paper"
    assert load_pipeline_config("logetl").scaling.policy == "adaptive"


def test_a_missing_section_gets_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "demo.toml"
    path.write_text(HEAD)
    assert load_pipeline_config(path).scaling == ScalingConfig()


def test_values_are_read(tmp_path: Path) -> None:
    config = _load(
        tmp_path,
        'policy = "adaptive"\nhistory_windows = 8\nthreshold_c = 2\ncooldown_s = 30\n'
        'schedule = "*/5 * * * *"\n',
    )
    s = config.scaling
    assert (s.policy, s.history_windows, s.threshold_c, s.cooldown_s, s.schedule) == (
        "adaptive", 8, 2.0, 30.0, "*/5 * * * *",
    )  # fmt: skip
    policy = WindowPolicy.from_config(config)
    assert policy.max_parallelism == config.max_parallelism and policy.policy == "adaptive"
    assert WindowPolicy.from_config(config, threshold_c=9.0, policy=None).threshold_c == 9.0


@pytest.mark.parametrize(
    ("line", "field", "why"),
    [
        ('policy = "magic"', "scaling.policy='magic'", "one of paper, adaptive"),
        ("history_windows = 1", "scaling.history_windows=1", "integer >= 2"),
        ("history_windows = 2.5", "scaling.history_windows=2.5", "integer >= 2"),
        ("threshold_c = -1", "scaling.threshold_c=-1", "number >= 0"),
        ('cooldown_s = "soon"', "scaling.cooldown_s='soon'", "number >= 0"),
        ("poke_interval_s = 0", "scaling.poke_interval_s=0", "number > 0"),
        ("ready_timeout_s = 0", "scaling.ready_timeout_s=0", "number > 0"),
        ("target_utilisation = 1.5", "scaling.target_utilisation=1.5", "<= 1"),
        ("low_saturation = 0.95", "scaling.low_saturation=0.95", "< high_saturation=0.9"),
        ('schedule = ""', "scaling.schedule=''", "cron expression"),
        ("colour = 1", "scaling.colour=1", "is not a known field"),
    ],
)
def test_bad_values_are_named(tmp_path: Path, line: str, field: str, why: str) -> None:
    with pytest.raises(PipelineConfigError) as info:
        _load(tmp_path, line + "\n")
    assert field in str(info.value) and why in str(info.value)


@pytest.mark.airflow
def test_dags_of_another_config_directory_carry_their_config_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flowctl_airflow.dag_factory import all_pipeline_dags

    path = tmp_path / "demo.toml"
    path.write_text(HEAD + '[scaling]\npolicy = "adaptive"\nschedule = "@daily"\n')
    monkeypatch.setenv("FLOWCTL_PIPELINES_DIR", str(tmp_path))
    dags = {dag.dag_id: dag for dag in all_pipeline_dags()}
    assert set(dags) == {
        f"{kind}_demo" for kind in ("ingest", "stream", "autoscale", "rescale", "reconcile")
    }
    autoscale = dags["autoscale_demo"]
    assert autoscale.max_active_runs == 1
    assert autoscale.get_task("decide").policy == "adaptive"
    for dag_id, task_id in [
        ("stream_demo", "topology"),
        ("autoscale_demo", "decide"),
        ("autoscale_demo", "replace"),
        ("rescale_demo", "replace"),
        ("reconcile_demo", "reconcile"),
    ]:
        assert dags[dag_id].get_task(task_id).pipeline_config == str(path), (dag_id, task_id)


@pytest.mark.airflow
def test_every_shipped_pipeline_gets_its_control_dags() -> None:
    from flowctl.pipelines.config import PIPELINES_DIR
    from flowctl_airflow.dag_factory import RECONCILE_SCHEDULE, all_pipeline_dags

    dags = {dag.dag_id: dag for dag in all_pipeline_dags(PIPELINES_DIR)}
    for path in sorted(PIPELINES_DIR.glob("*.toml")):
        config = load_pipeline_config(path)
        autoscale = dags[f"autoscale_{config.name}"]
        assert autoscale.max_active_runs == 1
        assert autoscale.schedule == config.scaling.schedule
        assert [t.task_id for t in autoscale.topological_sort()] == ["decide", "replace"]
        decide = autoscale.get_task("decide")
        assert (decide.policy, decide.history_windows, decide.threshold_c) == (
            config.scaling.policy,
            config.scaling.history_windows,
            config.scaling.threshold_c,
        )
        assert decide.soft_fail and decide.mode == "reschedule"
        assert decide.timeout == config.scaling.sensor_timeout_s
        rescale = dags[f"rescale_{config.name}"]
        assert rescale.schedule is None and rescale.max_active_runs == 1
        assert set(rescale.params) == {"change", "reason", "start_next_standby"}
        assert set(autoscale.params) == {"start_next_standby"}
        assert dags[f"reconcile_{config.name}"].schedule == RECONCILE_SCHEDULE
