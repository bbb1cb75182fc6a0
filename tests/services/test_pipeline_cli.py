"""``flowctl pipeline new|check`` through the command line, on a tmp project root.

What the scaffold writes must pass, as written: ``flowctl pipeline check``, its own
generated test (run in a child process, as a user would run it), ``ruff check`` and
``ruff format --check`` with the project's settings. (tests/dags/test_pipeline_scaffold.py
parses its DAGs.)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from flowctl.cli import main
from flowctl.config import PROJECT_ROOT
from flowctl.pipelines.config import load_pipeline_config
from tests.scaffold_dirs import RUN_GENERATED_TEST, ScaffoldRoot, scaffold_root

__all__ = ["scaffold_root"]  # the fixture, imported for this module's tests

RUFF = Path(sys.executable).parent / "ruff"


def _new(dirs: ScaffoldRoot, name: str, capsys: pytest.CaptureFixture[str]) -> list[Path]:
    assert main(["pipeline", "new", name, "--root", str(dirs.root)]) == 0
    out = capsys.readouterr().out
    files = [
        dirs.config_dir / f"{name}.toml",
        dirs.package / f"{name}.py",
        dirs.root / "tests" / "unit" / f"test_pipeline_{name}.py",
    ]
    for path in files:
        assert str(path) in out and path.is_file()
    assert f"flowctl pipeline check {name}" in out and f"stream_{name}" in out
    return files


@pytest.mark.parametrize("name", ["clicks", "a_longest_allowed_name_of_41_characters_x"])
def test_new_writes_files_that_pass_check_their_test_and_ruff(
    scaffold_root: ScaffoldRoot, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    config, definition, test = _new(scaffold_root, name, capsys)

    assert main(["pipeline", "check", name]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        f"ok: config {config} loads; definition flowctl.pipelines.{name} has process, reference"
    )
    assert out[1:] == [
        f"ok: results go to table {name}_counts by merge = 'sum'",
        "ok: process over 400 sample records in 8 tuples: the [sink] accepts every result "
        "and would store what reference() computes",
    ]
    loaded = load_pipeline_config(name)
    assert (loaded.source, loaded.eden_topic, loaded.sink and loaded.sink.table) == (
        config,
        f"{name}.eden",
        f"{name}_counts",
    )

    settings = ["--config", str(PROJECT_ROOT / "pyproject.toml")]
    for command in (["check"], ["format", "--check"]):
        ran = subprocess.run(
            [str(RUFF), *command, *settings, str(definition), str(test)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert ran.returncode == 0, f"ruff {command}: {ran.stdout}{ran.stderr}"

    args = ["--rootdir", str(PROJECT_ROOT), "-c", str(PROJECT_ROOT / "pyproject.toml"), str(test)]
    ran = subprocess.run(
        [sys.executable, "-c", RUN_GENERATED_TEST, str(scaffold_root.package), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=PROJECT_ROOT,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "7 passed" in ran.stdout, ran.stdout


def test_check_names_the_file_field_and_value_in_one_line(
    scaffold_root: ScaffoldRoot, capsys: pytest.CaptureFixture[str]
) -> None:
    config, definition, _ = _new(scaffold_root, "clicks", capsys)
    text = config.read_text()
    config.write_text(text.replace('merge = "sum"', 'merge = "add"'))
    assert main(["pipeline", "check", "clicks"]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"flowctl: error: {config}: sink.merge='add' must be one of sum, insert, max, min, "
        "replace\n"
    )
    config.write_text(text)
    definition.write_text(definition.read_text().replace("def parse(", "def parse(:"))
    sys.modules.pop("flowctl.pipelines.clicks")  # a new `flowctl` process imports it afresh
    assert main(["pipeline", "check", "clicks"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        f"flowctl: error: {config}: definition='flowctl.pipelines.clicks' cannot be imported: "
        "invalid syntax"
    ), err
    assert f"({definition.name}, line " in err


def test_new_refuses_a_taken_name_and_writes_nothing(
    scaffold_root: ScaffoldRoot, capsys: pytest.CaptureFixture[str]
) -> None:
    _new(scaffold_root, "clicks", capsys)
    before = sorted(p for p in scaffold_root.root.rglob("*") if p.is_file())
    assert main(["pipeline", "new", "clicks", "--root", str(scaffold_root.root)]) == 1
    assert "name='clicks' is taken" in capsys.readouterr().err
    assert main(["pipeline", "new", "Clicks", "--root", str(scaffold_root.root)]) == 1
    assert "name='Clicks' must be lower-case" in capsys.readouterr().err
    assert sorted(p for p in scaffold_root.root.rglob("*") if p.is_file()) == before
