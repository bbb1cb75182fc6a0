"""Hook for the memcached server holding the delayed persistence queue (SPEC F)."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from airflow.sdk import BaseHook


class FlowctlMemcachedHook(BaseHook):
    """Reads the ``flowctl_memcached`` connection and returns ``host:port``.

    :param memcached_conn_id: the memcached connection (host, port; default port 11211).
    """

    conn_name_attr = "memcached_conn_id"
    default_conn_name = "flowctl_memcached"
    conn_type = "generic"
    hook_name = "flowctl memcached"

    def __init__(self, memcached_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.memcached_conn_id = memcached_conn_id

    @cached_property
    def address(self) -> str:
        conn = self.get_connection(self.memcached_conn_id)
        if not conn.host:
            raise ValueError(
                f"connection {self.memcached_conn_id!r} has no host: set host and port of memcached"
            )
        return f"{conn.host}:{conn.port or 11211}"
