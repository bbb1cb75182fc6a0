"""Starting the plain stream jobs (word count, baseline) with their raw command line."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bench.lib.submit import STREAM_SCRIPT, LocalJob, job_env, spark_submit
from flowctl.config import Settings


@dataclass
class StreamJobRunner:
    """Starts stream jobs against the session's broker and one test database."""

    settings: Settings
    database_url: str
    work_dir: Path
    jobs: list[LocalJob] = field(default_factory=list)

    def submit(self, *args: str, name: str, script: Path = STREAM_SCRIPT) -> LocalJob:
        """``spark-submit script args...``, its log ``<work_dir>/<name>.log``."""
        job = spark_submit(
            script,
            args,
            env=job_env(self.settings, self.database_url),
            log_path=self.work_dir / f"{name}.log",
            topology_id=name,
        )
        self.jobs.append(job)
        return job

    def kill_leftovers(self) -> None:
        """SIGKILL every job still running (a failed test must not leave Spark running)."""
        for job in self.jobs:
            job.kill_hard()
