"""The process cluster's Kafka: three Apache Kafka nodes, each broker and KRaft controller.

A quorum of three (:class:`~flowctl.services.kafka_node.KafkaQuorum`): topics are created
with replication 3 and ``min.insync.replicas`` 2, and the platform's producers write with
``acks=all``, so a record acknowledged is on two brokers at least and the loss of any one
broker loses nothing and stops nothing. Each node keeps its config and log in
``<cluster home>/kafka-<n>/``; all three are formatted with one cluster id, kept in
``<cluster home>/kafka-cluster-id`` so that a node's log formatted later still joins.
"""

from __future__ import annotations

from flowctl.services.cluster_layout import ClusterLayout
from flowctl.services.kafka_node import KafkaNode, KafkaQuorum, new_cluster_id


def quorum(layout: ClusterLayout) -> KafkaQuorum:
    """The cluster's brokers, from the layout's ports."""
    s = layout.settings
    nodes = tuple(
        KafkaNode(i, layout.host, port, controller, layout.home / f"kafka-{i}")
        for i, (port, controller) in enumerate(
            zip(layout.kafka_ports, layout.kafka_controller_ports, strict=True), start=1
        )
    )
    return KafkaQuorum(nodes, s.kafka_heap, s.kafka_retention_hours, s.kafka_retention_mb)


def cluster_id(layout: ClusterLayout) -> str:
    """The id every node of the cluster is formatted with (made once, then kept)."""
    path = layout.home / "kafka-cluster-id"
    if not path.exists():
        layout.home.mkdir(parents=True, exist_ok=True)
        path.write_text(new_cluster_id())
    return path.read_text().strip()
