"""``DEFINITION``: the word count with lane 0 slow on purpose (tests only)."""

from tests.spark.flow_definitions import SlowLane

DEFINITION = SlowLane()
