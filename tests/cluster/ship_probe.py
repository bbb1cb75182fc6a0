"""A Spark application for the code-shipping test: where do the executors import flowctl from?

``spark-submit ship_probe.py OUT``: one task per executor slot reports the file its
Python worker imported ``flowctl`` from, its PYTHONPATH and its working directory;
the driver writes the list to OUT as JSON.
"""

from __future__ import annotations

import json
import sys


def where(_: object) -> list[dict[str, str]]:
    import os

    import flowctl
    from flowctl.pipelines import wordcount

    return [
        {
            "flowctl": os.path.abspath(flowctl.__file__),
            "definition": os.path.abspath(wordcount.__file__),
            "pythonpath": os.environ.get("PYTHONPATH", ""),
            "cwd": os.getcwd(),
        }
    ]


def main() -> None:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("flowctl-ship-probe").getOrCreate()
    rows = spark.sparkContext.parallelize(range(8), 8).mapPartitions(where).collect()
    with open(sys.argv[1], "w") as out:
        json.dump(rows, out)
    spark.stop()


if __name__ == "__main__":
    main()
