"""The Spark driver's class-data sharing archive (flowctl.adapters.class_archive): built
once per virtualenv (``scripts/bootstrap`` runs ``flowctl class-archive``), mapped by every
driver the platform submits."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from flowctl.adapters import class_archive
from flowctl.config import ConfigError, Settings

APP = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.appName("archive-check").getOrCreate()
assert spark.range(100).count() == 100
spark.stop()
"""


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.integration
def test_a_driver_loads_sparks_classes_from_the_archive(tmp_path: Path) -> None:
    path = class_archive.build()  # scripts/bootstrap has built it: returns at once
    options = class_archive.driver_java_options()
    assert options == f"-XX:SharedArchiveFile={path}"
    script = tmp_path / "app.py"
    script.write_text(APP)
    loads = tmp_path / "class-load.txt"
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "spark-submit"),
            "--master",
            "local[1]",
            "--driver-memory",
            "768m",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            f"spark.driver.extraJavaOptions={options} -Xlog:class+load=info:file={loads}",
            str(script),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Unable to use shared archive" not in done.stdout + done.stderr
    lines = loads.read_text().splitlines()
    shared = sum("shared objects file (top)" in line for line in lines)
    from_jars = sum("source: jar:" in line or "source: file:" in line for line in lines)
    assert shared > 5000 and shared > 5 * from_jars, (shared, from_jars)


def test_the_archive_is_named_once_built_and_the_setting_off_leaves_it_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "spark-driver-x.jsa"
    monkeypatch.setattr(class_archive, "archive_path", lambda: archive)
    assert class_archive.driver_java_options() == ""  # not built
    archive.write_bytes(b"")
    assert class_archive.driver_java_options() == f"-XX:SharedArchiveFile={archive}"
    off = Settings.from_env({"FLOWCTL_SPARK_CLASS_ARCHIVE": "off"})
    assert class_archive.driver_java_options(off.spark_class_archive) == ""
    assert Settings.from_env(off.to_env()).spark_class_archive is False
    with pytest.raises(ConfigError, match="FLOWCTL_SPARK_CLASS_ARCHIVE='sometimes' must be"):
        Settings.from_env({"FLOWCTL_SPARK_CLASS_ARCHIVE": "sometimes"})
