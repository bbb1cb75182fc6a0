"""spark-submit entry point of the baseline word count (plain Structured Streaming).

    spark-submit bench/jobs/wordcount_baseline.py --topology-id ID --parallelism 2 \
        --max-records-per-batch 50000 [--pipeline-config wordcount]

The same pipeline and command line as ``wordcount_stream.py``, without flow
control: fixed micro-batches and direct database writes in ``foreachBatch``
(see :mod:`bench.lib.baseline`). Addresses come from
FLOWCTL_KAFKA_BOOTSTRAP, FLOWCTL_DATABASE_URL and FLOWCTL_HOME. Runs until a
``stop`` control signal (or SIGTERM), then exits 0; exits non-zero if the
query fails.
"""

from __future__ import annotations

import sys

from bench.lib.baseline import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
