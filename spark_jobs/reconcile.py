"""spark-submit entry point: reconcile a pipeline's stored results with its durable Kafka log.

Usage: ``spark-submit spark_jobs/reconcile.py --pipeline-config wordcount``.
Exit 0 when equal, 3 with the first differing keys on a mismatch.
"""

import sys

from flowctl.spark.reconcile import main

if __name__ == "__main__":
    sys.exit(main())
