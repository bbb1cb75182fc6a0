"""kafka-python's network client, as every consumer, producer and admin client of the
platform builds it (their ``kafka_client`` config).

kafka-python 3 warns when one step of its I/O loop runs longer than
``slow_task_threshold_secs`` (0.1 s): "Task ... ran for 0.168s (>0.100s threshold). It is
blocking the event loop". On the 2-core machine a producer's step that compresses a
1 MiB record batch, or any step while Spark takes both cores, passes 0.1 s with nothing
wrong, and the ingest log filled with the warning. The clients' own configs do not take
the threshold (the producer refuses it as unrecognized); the network client does.
"""

from __future__ import annotations

import functools

from kafka.net.compat import KafkaNetClient

#: Seconds one step of kafka-python's I/O loop may run before it warns: a step that long
#: is a livelock, the check's purpose, not a busy machine.
SLOW_STEP_S = 2.0

#: The ``kafka_client`` of every kafka-python client of the platform.
NETWORK_CLIENT = functools.partial(KafkaNetClient, slow_task_threshold_secs=SLOW_STEP_S)
