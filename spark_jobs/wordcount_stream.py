"""spark-submit entry point of the word-count stream topology.

    spark-submit spark_jobs/wordcount_stream.py --topology-id ID --colour blue \
        --parallelism 2 [--airflow-run-id RUN] [--standby] [--pipeline-config wordcount]

Addresses come from FLOWCTL_KAFKA_BOOTSTRAP, FLOWCTL_DATABASE_URL,
FLOWCTL_MEMCACHED and FLOWCTL_HOME. Runs until a ``stop`` control signal (or
SIGTERM), then exits 0; exits non-zero if the query fails. The pipeline config's
``[flow] mode`` picks the flow-controlled topology (default) or the plain job.
"""

from __future__ import annotations

import sys

from flowctl.spark.entry import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
