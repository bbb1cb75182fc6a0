"""``flowctl pipeline check``'s checks and ``flowctl pipeline new``'s refusals, in process.

Each broken definition is a small module in a tmp directory on ``sys.path``, named by a
config with word count's ``[sink]`` (or none): the check must name the file, the field
or method, and the value, before any Spark or Airflow sees the pipeline.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from flowctl.pipelines.check import check_pipeline
from flowctl.pipelines.config import PIPELINES_DIR, PipelineConfigError
from flowctl.pipelines.scaffold import CONFIG, new_pipeline

SHIPPED = (PIPELINES_DIR / "wordcount.toml").read_text()
SINK = SHIPPED[SHIPPED.index("[sink]\n") : SHIPPED.index("[topics]\n")]

HEADER = """\
import json
from collections import Counter
from flowctl.pipelines.base import PoisonRecord

def synthetic_lines(count, seed):
    return [f"w{i % 7} w{i % 3}" for i in range(count)]

def _counts(values):
    return dict(Counter(w for v in values for w in (v or b"").decode().split()))

class Base:
    name = "case"
    def process(self, records):
        return _counts(r.value for r in records)
    def reference(self, values):
        return _counts(values)
"""

CASES = {
    "no_definition": ("", "DEFINITION=None has no process() method"),
    "no_reference": (
        "class D:\n    def process(self, records):\n        return {}\nDEFINITION = D()",
        "has no reference() method",
    ),
    "refused_by_sink": (
        "class D(Base):\n    def process(self, records):\n        return {'w': 'many'}\n"
        "DEFINITION = D()",
        "the [sink] refuses a result of process: sink word_counts: count of word='w' is 'many'",
    ),
    "disagrees_with_reference": (
        "class D(Base):\n    def reference(self, values):\n        return {'w0': 1}\n"
        "DEFINITION = D()",
        "what the [sink] would store differs from reference() at 7 key(s) ('w0': stored 192, "
        "reference 1, 'w1': stored 190, reference None",
    ),
    "poison_without_offset": (
        "class D(Base):\n    def process(self, records):\n        raise PoisonRecord('bad')\n"
        "DEFINITION = D()",
        "process raised PoisonRecord('bad') with offset=None",
    ),
    "crashes": (
        "class D(Base):\n    def process(self, records):\n        raise KeyError('x')\n"
        "DEFINITION = D()",
        "process raised on sample offsets 0..49: KeyError('x')",
    ),
    "combine_breaks": (
        "class D(Base):\n    def process(self, records):\n"
        "        return {'first': records[0].offset + 1}\n"
        "    def apply(self, conn, pipeline, results):\n        return 0\n"
        "    def stored(self, conn, pipeline):\n        return {}\nDEFINITION = D()",
        "combine() of a tuple's two halves differs from process() of the whole",
    ),
    "rows_merged_without_combine": (
        "class D(Base):\n    def process(self, records):\n"
        "        return [{'word': w, 'count': n} for w, n in sorted(_counts(r.value for r in "
        "records).items())]\nDEFINITION = D()",
        "differs from process() of the whole: the default combine (lists of rows concatenate, "
        "mappings add key by key; rows merged or sorted by process need a combine(results) "
        "method) gave [{'word': 'w0', 'count': ",
    ),
    "own_combine_breaks": (
        "class D(Base):\n    def combine(self, results):\n        return {}\nDEFINITION = D()",
        "differs from process() of the whole: the definition's combine() gave {}, process() "
        "gave {'w0': ",
    ),
    "not_json": (
        "class D(Base):\n    def process(self, records):\n        return {1: 2}\nDEFINITION = D()",
        "process returned {1: 2}, which cannot wait in memcached",
    ),
}


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory of definition modules ``checkcase_<case>`` on ``sys.path``."""
    for case, (body, _) in CASES.items():
        (tmp_path / f"checkcase_{case}.py").write_text(HEADER + textwrap.dedent(body) + "\n")
    (tmp_path / "checkcase_no_samples.py").write_text(
        HEADER.replace("def synthetic_lines", "def other_lines") + "DEFINITION = Base()\n"
    )
    (tmp_path / "checkcase_own_apply.py").write_text(
        HEADER + "class D(Base):\n    def apply(self, conn, pipeline, results):\n"
        "        return 0\n    def stored(self, conn, pipeline):\n        return {}\n"
        "DEFINITION = D()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _config(directory: Path, case: str, sink: str = SINK) -> Path:
    path = directory / f"case_{case}.toml"
    path.write_text(f'name = "case_{case}"\ndefinition = "checkcase_{case}"\n{sink}')
    return path


def test_the_shipped_pipelines_pass() -> None:
    for name in ("wordcount", "logetl"):
        done = check_pipeline(name)
        assert len(done) == 3 and str(PIPELINES_DIR / f"{name}.toml") in done[0]
    assert "(the definition's own stored)" in check_pipeline("logetl")[1]


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_broken_definition_is_named_with_its_file(modules: Path, case: str) -> None:
    path = _config(modules, case)
    with pytest.raises(PipelineConfigError) as caught:
        check_pipeline(str(path))
    message = str(caught.value)
    assert message.startswith(f"{path}: definition='checkcase_{case}': "), message
    assert CASES[case][1] in message, message


def test_results_with_nowhere_to_go_are_named(modules: Path) -> None:
    path = _config(modules, "refused_by_sink", sink="")
    with pytest.raises(
        PipelineConfigError, match=r"has no apply\(\) and the config has no \[sink\]"
    ):
        check_pipeline(str(path))


def test_samples_are_required_and_own_apply_skips_the_sink_comparison(modules: Path) -> None:
    with pytest.raises(PipelineConfigError, match=r"has no synthetic_lines\(count, seed\)"):
        check_pipeline(str(_config(modules, "no_samples")))
    done = check_pipeline(str(_config(modules, "own_apply", sink="")))
    assert done[1:] == [
        "results go through the definition's own apply and stored",
        "process over 400 sample records in 8 tuples: results are JSON and combine",
    ]


def test_a_sink_on_a_control_table_is_refused(modules: Path) -> None:
    path = _config(modules, "own_apply", sink=SINK.replace('"word_counts"', '"offsets"'))
    with pytest.raises(PipelineConfigError, match=r"sink\.table='offsets' is a flowctl control"):
        check_pipeline(str(path))


# -- the scaffold's refusals and its config -----------------------------------------------------


@pytest.mark.parametrize("name", ["Clicks", "my-pipe", "9lives", "", "a" * 42])
def test_new_refuses_a_name_that_is_not_a_module_name(tmp_path: Path, name: str) -> None:
    with pytest.raises(PipelineConfigError, match=rf"name={name!r} must be lower-case"):
        new_pipeline(name, root=tmp_path, config_dir=tmp_path)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("name", ["wordcount", "base", "sinks"])
def test_new_refuses_a_name_that_is_taken_and_writes_nothing(tmp_path: Path, name: str) -> None:
    with pytest.raises(PipelineConfigError, match=rf"name='{name}' is taken"):
        new_pipeline(name, root=tmp_path, config_dir=tmp_path / "configs")
    assert not any(tmp_path.iterdir())


def test_new_never_overwrites_a_file(tmp_path: Path) -> None:
    (tmp_path / "clicks.toml").write_text("mine")
    with pytest.raises(PipelineConfigError, match=r"clicks\.toml exists"):
        new_pipeline("clicks", root=tmp_path, config_dir=tmp_path)
    assert (tmp_path / "clicks.toml").read_text() == "mine"
    assert not (tmp_path / "include").exists()


def test_the_generated_config_documents_every_key() -> None:
    lines = CONFIG.format(name="clicks").splitlines()
    keys = [i for i, line in enumerate(lines) if "=" in line and not line.startswith("#")]
    assert len(keys) == 17
    for i in keys:
        assert lines[i - 1].startswith("#"), f"undocumented key: {lines[i]!r}"
