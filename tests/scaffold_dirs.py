"""A tmp project root for ``flowctl pipeline new`` in a test, never the checkout.

The scaffold writes its definition to ``<root>/include/flowctl/pipelines/NAME.py``, to be
imported as ``flowctl.pipelines.NAME``. The fixture :func:`scaffold_root` puts that
directory on the package's path and the config directory in ``FLOWCTL_PIPELINES_DIR``
for the test, as the checkout's own are for a real pipeline, and forgets the modules
the test imported from it afterwards. Import the fixture into a test module to use it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import flowctl.pipelines

#: Runs a generated test in a child process with the same package path:
#: ``python -c RUN_GENERATED_TEST <package dir> <pytest args...>``.
RUN_GENERATED_TEST = (
    "import sys, flowctl.pipelines as p; p.__path__.append(sys.argv[1]); import pytest; "
    "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', *sys.argv[2:]]))"
)


@dataclass(frozen=True)
class ScaffoldRoot:
    root: Path
    config_dir: Path
    package: Path


@pytest.fixture
def scaffold_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ScaffoldRoot]:
    dirs = ScaffoldRoot(
        root=tmp_path / "project",
        config_dir=tmp_path / "project" / "include" / "pipelines",
        package=tmp_path / "project" / "include" / "flowctl" / "pipelines",
    )
    dirs.package.mkdir(parents=True)
    dirs.config_dir.mkdir(parents=True)
    monkeypatch.setenv("FLOWCTL_PIPELINES_DIR", str(dirs.config_dir))
    paths = [*flowctl.pipelines.__path__, str(dirs.package)]
    monkeypatch.setattr(flowctl.pipelines, "__path__", paths)
    importlib.invalidate_caches()
    before = set(sys.modules)
    yield dirs
    for name in set(sys.modules) - before:
        if name.startswith("flowctl.pipelines."):
            del sys.modules[name]
