"""``DEFINITION``: the word count with a bug, every record raising AttributeError (tests only)."""

from tests.spark.flow_definitions import BrokenCode

DEFINITION = BrokenCode()
