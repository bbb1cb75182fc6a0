"""The cluster's Celery broker when it is someone else's Redis: checked, left running, and
cleared of this cluster's keys on ``cluster down``.

``flowctl cluster up`` uses the Redis answering at the layout's URL, else starts a
``redis-server`` of its own (no persistence: its keys end with it). An external Redis is
not ours to stop; what the cluster's Celery left in it is: the queue's list and its
priority variants, kombu's bindings, and the unacknowledged-message bookkeeping
(kombu's Redis transport). They are deleted by name, never by pattern, so no key of
another application of that Redis is touched.
"""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

from flowctl.services.base import ServiceError

#: Airflow's Celery queue (``[operators] default_queue``) and kombu's priority separator
#: and steps (``kombu.transport.redis``): the queue's lists are ``default`` and
#: ``default\x06\x163`` and so on.
QUEUE = "default"
PRIORITY_SEP = "\x06\x16"
PRIORITY_STEPS = (3, 6, 9)
#: kombu's bookkeeping of the Redis transport, and its bindings of the queue, Celery's
#: remote-control mailbox (pidbox) and its events exchange.
BOOKKEEPING = ("unacked", "unacked_index", "unacked_mutex")
BINDINGS = (f"_kombu.binding.{QUEUE}", "_kombu.binding.celery.pidbox", "_kombu.binding.celeryev")


def celery_keys() -> list[str]:
    """Every key the cluster's Celery writes into its broker (see the module docstring)."""
    queues = [QUEUE, *(f"{QUEUE}{PRIORITY_SEP}{step}" for step in PRIORITY_STEPS)]
    return [*queues, *BOOKKEEPING, *BINDINGS]


def redis_ping(url: str, timeout: float) -> None:
    """``PING`` answered with ``+PONG`` at the Redis of ``url``."""
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname, parts.port or 6379), timeout) as sock:
            sock.sendall(b"PING\r\n")
            answer = sock.recv(64)
    except OSError as exc:
        raise ServiceError(f"redis at {url} is not answering: {exc}") from None
    if not answer.startswith(b"+PONG"):
        raise ServiceError(f"redis at {url} answered {answer!r} to PING")


def leave_external(url: str) -> str:
    """``cluster down`` for a Redis that is not ours: left running, our keys deleted; the
    line says what was done."""
    import redis

    try:
        client = redis.Redis.from_url(url, socket_timeout=5.0)
        removed = int(client.delete(*celery_keys()))
    except redis.RedisError as exc:
        return f"redis at {url} is not ours: left running; its Celery keys not removed ({exc})"
    return (
        f"redis at {url} is not ours: left running; removed {removed} Celery key(s) of this "
        f"cluster (queue {QUEUE!r} and kombu's bookkeeping)"
    )
