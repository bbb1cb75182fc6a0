"""``DEFINITION``: the word count sleeping on every tuple (tests only)."""

from tests.spark.flow_definitions import SleepyTuples

DEFINITION = SleepyTuples()
