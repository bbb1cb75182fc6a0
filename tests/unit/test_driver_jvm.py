"""The Spark driver JVM's options (flowctl.adapters.driver_jvm): a heap of the settings' size,
fixed and touched at start, on huge pages where the kernel offers them; an operator's own
``spark.driver.memory`` sets that size instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowctl.adapters import driver_jvm
from flowctl.config import ConfigError, Settings
from flowctl_airflow.operators.driver_log import quiet_driver_conf


@pytest.mark.parametrize(
    ("text", "offered"),
    [
        ("always [madvise] never\n", True),
        ("[always] madvise never\n", True),
        ("always madvise [never]\n", False),
    ],
)
def test_huge_pages_are_asked_for_only_where_the_kernel_offers_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, offered: bool
) -> None:
    setting = tmp_path / "enabled"
    setting.write_text(text)
    monkeypatch.setattr(driver_jvm, "THP_SETTING", setting)
    assert driver_jvm.huge_pages_offered(setting) is offered
    options = driver_jvm.java_options("768m", archive=False)
    assert options.split()[:2] == ["-Xms768m", "-XX:+AlwaysPreTouch"]
    assert ("-XX:+UseTransparentHugePages" in options) is offered
    assert not driver_jvm.huge_pages_offered(tmp_path / "absent")


def test_the_driver_memory_setting_is_a_jvm_size_and_travels_to_child_processes() -> None:
    assert Settings.from_env({}).spark_driver_memory == "1g"
    settings = Settings.from_env({"FLOWCTL_SPARK_DRIVER_MEMORY": "768M"})
    assert settings.spark_driver_memory == "768m"
    assert Settings.from_env(settings.to_env()).spark_driver_memory == "768m"
    conf = driver_jvm.driver_conf(settings.spark_driver_memory, settings.spark_class_archive)
    assert conf["spark.driver.memory"] == "768m"
    assert conf["spark.driver.extraJavaOptions"].startswith("-Xms768m ")
    for bad in ("lots", "1.5g", "0m", "-1g", "1024"):
        with pytest.raises(ConfigError, match=f"FLOWCTL_SPARK_DRIVER_MEMORY='{bad}' is not"):
            Settings.from_env({"FLOWCTL_SPARK_DRIVER_MEMORY": bad})


def test_an_operators_driver_memory_sets_the_fixed_heap_and_its_own_options_win(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOWCTL_SPARK_DRIVER_MEMORY", "1g")
    log4j = tmp_path / "log4j2.properties"
    conf = quiet_driver_conf(None, log4j)
    assert conf["spark.driver.memory"] == "1g"
    assert conf["spark.log.level"] == "WARN"
    options = conf["spark.driver.extraJavaOptions"]
    assert options.startswith(f"-Dlog4j2.configurationFile=file:{log4j} -Xms1g ")
    bigger = quiet_driver_conf({"spark.driver.memory": "2g"}, log4j)
    assert bigger["spark.driver.memory"] == "2g"
    assert " -Xms2g " in bigger["spark.driver.extraJavaOptions"]
    own = quiet_driver_conf({"spark.driver.extraJavaOptions": "-Dx=1"}, log4j)
    assert own["spark.driver.extraJavaOptions"] == "-Dx=1"


def test_a_driver_with_another_spark_conf_dir_looks_for_an_archive_of_its_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """spark-submit puts $SPARK_CONF_DIR first on the driver's classpath, and the JVM maps
    an archive only for the classpath it was dumped with: the process cluster's drivers
    (a conf dir of their own) are given no archive built for the embedded platform's."""
    from flowctl.adapters import class_archive

    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    class_archive.archive_path.cache_clear()
    embedded = class_archive.archive_path()
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "spark-conf"))
    class_archive.archive_path.cache_clear()
    try:
        cluster = class_archive.archive_path()
        assert embedded is not None and cluster is not None and cluster != embedded
        if not cluster.exists():
            assert class_archive.driver_java_options() == ""
    finally:
        class_archive.archive_path.cache_clear()
