"""spark-submit entry point of the log-ETL stream topology.

    spark-submit spark_jobs/logetl_stream.py --topology-id ID --colour blue \
        --parallelism 2 [--airflow-run-id RUN] [--standby] [--pipeline-config logetl]

The same job as every stream topology (:mod:`flowctl.spark.job`) with the ``logetl``
pipeline config by default. Addresses come from FLOWCTL_KAFKA_BOOTSTRAP,
FLOWCTL_DATABASE_URL, FLOWCTL_MEMCACHED and FLOWCTL_HOME. Runs until a ``stop`` control
signal (or SIGTERM), then exits 0; exits non-zero if the query fails.
"""

from __future__ import annotations

import sys

from flowctl.spark.entry import main

if __name__ == "__main__":
    # A later --pipeline-config on the command line overrides this default.
    sys.exit(main(["--pipeline-config", "logetl", *sys.argv[1:]]))
