"""spark-submit entry point of any pipeline's stream topology.

    spark-submit spark_jobs/stream.py --pipeline-config NAME_OR_PATH --topology-id ID \
        --colour blue --parallelism 2 [--airflow-run-id RUN] [--standby]

The job (:mod:`flowctl.spark.job`) runs the pipeline definition its config names; the
per-pipeline files (``wordcount_stream.py``, ...) are this with a default config.
"""

from __future__ import annotations

import sys

from flowctl.spark.entry import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
