"""The Spark driver JVM's class-data sharing (CDS) archive: a topology's driver starts sooner.

A Spark driver's JVM spends most of its start loading and verifying Spark's classes. Java
17 can write the classes an application loaded to an archive when it exits
(``-XX:ArchiveClassesAtExit``) and map them at the next JVM's start
(``-XX:SharedArchiveFile``). Measured on the 2-core dev machine, a local SparkSession was
built 5.2-5.3 s after spark-submit with the archive against 7.5-8.9 s without, and its first
job done at 7.1-7.3 s against 10.6-12.4 s; a cold green's replacement took 22.7 s
against 33.9 s (bench/README.md, "The driver's class archive").

``scripts/bootstrap`` builds the archive once per virtualenv (``flowctl class-archive``,
about 30-40 s): :func:`build` runs ``spark_jobs/class_archive.py`` (a session, a Python job,
a short stream) with the dump option. Every ``spark-submit`` of the platform then names
the archive in ``spark.driver.extraJavaOptions`` (:func:`driver_java_options`). The
archive is keyed by the pyspark version, the ``java`` binary and ``$SPARK_CONF_DIR`` (the
head of the driver's classpath), so another Spark, JVM or Spark conf dir looks for an
archive of its own, and a driver with none starts without one; an archive the JVM still
cannot use costs one warning line in the driver log, and the JVM starts as it would without.
``FLOWCTL_SPARK_CLASS_ARCHIVE=off`` (``Settings.spark_class_archive``) leaves it out
(docs/services.md).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

log = logging.getLogger(__name__)

#: The application the archive is dumped from (a thin ``spark_jobs`` entry point).
APP = Path(__file__).resolve().parents[3] / "spark_jobs" / "class_archive.py"


class ClassArchiveError(RuntimeError):
    """The archive could not be built (the message says why and where the log is)."""


def _java() -> Path | None:
    """The ``java`` spark-submit runs: ``$JAVA_HOME/bin/java``, else the one on ``PATH``."""
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else None
    if found is None or not found.exists():
        which = shutil.which("java")
        found = Path(which) if which else None
    return found.resolve() if found is not None else None


@functools.cache
def archive_path() -> Path | None:
    """Where this virtualenv's archive for this Spark and JVM lives (``None``: no java).

    Cached for the process: an operator asks at every DAG parse."""
    java = _java()
    if java is None:
        return None
    from importlib.metadata import version

    stat = java.stat()
    # The JVM maps an archive only for the classpath it was dumped with, and spark-submit
    # puts $SPARK_CONF_DIR first on it: a driver of the process cluster (its own conf dir)
    # looks for an archive of its own, and without one none is passed (Spark's warning
    # "Unable to use shared archive" at every cluster driver's start otherwise).
    conf_dir = os.environ.get("SPARK_CONF_DIR", "")
    key = f"{version('pyspark')}|{java}|{stat.st_size}|{stat.st_mtime_ns}|{conf_dir}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return Path(sys.prefix) / "share" / "flowctl" / f"spark-driver-{digest}.jsa"


def driver_java_options(enabled: bool = True) -> str:
    """The driver JVM's option that maps the archive, or ``""`` (none built, or not
    ``enabled``: ``Settings.spark_class_archive``)."""
    if not enabled:
        return ""
    path = archive_path()
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path}"


def build(*, rebuild: bool = False, timeout_s: float = 600.0) -> Path:
    """Build the archive (unless it exists and not ``rebuild``); returns its path.

    The JVM writes it at its exit to a temporary name, renamed once the run succeeded, so
    a driver never maps a half-written archive; archives of another key are removed.
    """
    path = archive_path()
    if path is None:
        raise ClassArchiveError("no java found ($JAVA_HOME/bin/java or java on PATH)")
    if path.is_file() and not rebuild:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.part")
    run_log = path.with_suffix(".log")
    env = dict(os.environ)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    command = [
        str(Path(sys.executable).parent / "spark-submit"),
        "--master",
        "local[2]",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        f"spark.driver.extraJavaOptions=-XX:ArchiveClassesAtExit={partial}",
        str(APP),
    ]
    try:
        with run_log.open("wb") as out:
            code = subprocess.run(
                command, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=timeout_s
            ).returncode
        if code != 0 or not partial.is_file():
            raise ClassArchiveError(
                f"spark-submit {APP.name} exited {code} without an archive; see {run_log}"
            )
        os.replace(partial, path)
    except subprocess.TimeoutExpired:
        raise ClassArchiveError(f"no archive within {timeout_s:g} s; see {run_log}") from None
    finally:
        partial.unlink(missing_ok=True)
    for old in path.parent.glob("spark-driver-*.jsa"):
        if old != path:
            old.unlink(missing_ok=True)
    log.info("Spark driver class archive: %s (%.0f MB)", path, path.stat().st_size / 1e6)
    return path
