"""``DEFINITION``: the word count refusing records that contain ``POISON`` (tests only)."""

from tests.spark.flow_definitions import Poisonous

DEFINITION = Poisonous()
