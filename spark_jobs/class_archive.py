"""spark-submit entry point: the application the driver's class-data sharing archive is
dumped from (``flowctl class-archive`` runs it; see :mod:`flowctl.adapters.class_archive`).
"""

import sys

from flowctl.spark.class_archive_app import main

if __name__ == "__main__":
    sys.exit(main())
