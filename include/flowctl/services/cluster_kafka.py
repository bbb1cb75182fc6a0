"""The process cluster's Kafka: three Apache Kafka nodes, each broker and KRaft controller.

A quorum of three (:class:`~flowctl.services.kafka_node.KafkaQuorum`): topics are created
with replication 3 and ``min.insync.replicas`` 2, and the platform's producers write with
``acks=all``, so a record acknowledged is on two brokers at least and the loss of any one
broker loses nothing and stops nothing. Each node keeps its config and log in
``<cluster home>/kafka-<n>/``; all three are formatted with one cluster id, kept in
``<cluster home>/kafka-cluster-id`` so that a node's log formatted later still joins.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from flowctl.services.cluster_layout import ClusterLayout
from flowctl.services.kafka import kafka_health
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


def nodes(
    layout: ClusterLayout, for_start: bool = False
) -> list[tuple[str, tuple[str, ...], int, Callable[[float], None]]]:
    """``(name, argv, port, health check)`` of each broker (none when the layout's broker is
    Tansu, a service of ``manager``); ``for_start``: their config written and their logs
    formatted, all with the cluster's id. Started together: a node answers only once a
    quorum of them has formed (three JVMs at once, and an election)."""
    if layout.broker != "kafka":
        return []
    brokers = quorum(layout)
    if for_start:
        formatted_with = cluster_id(layout)
        for node in brokers.nodes:
            brokers.prepare(node, formatted_with)
    return [
        (
            f"kafka-{node.node_id}",
            brokers.argv(node, for_start),
            node.port,
            functools.partial(kafka_health, node.address),
        )
        for node in brokers.nodes
    ]


def durability(layout: ClusterLayout) -> str:
    """Where the brokers' logs live and what survives: the last line of ``up`` and ``status``."""
    dirs = ", ".join(str(n.log_dir) for n in quorum(layout).nodes)
    return (
        f"log: on disk in {dirs}, each record on 3 brokers (acknowledged once on 2: "
        "min.insync.replicas); it survives a broker's kill or restart and `cluster down`; "
        "`cluster down --purge` deletes it"
    )
