"""Starting the plain stream jobs (word count, baseline) with their raw command line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from flowctl.config import Settings
from flowctl.spark.submit import STREAM_SCRIPT, LocalJob, job_env, spark_submit


@dataclass
class StreamJobRunner:
    """Starts stream jobs against the session's broker and one test database."""

    settings: Settings
    database_url: str
    work_dir: Path

    def submit(self, *args: str, name: str, script: Path = STREAM_SCRIPT) -> LocalJob:
        """``spark-submit script args...``, its log ``<work_dir>/<name>.log``."""
        return spark_submit(
            script,
            args,
            env=job_env(self.settings, self.database_url),
            log_path=self.work_dir / f"{name}.log",
            topology_id=name,
        )
