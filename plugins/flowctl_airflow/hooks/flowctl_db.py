"""Hook for the flowctl database: results, control plane and metrics.

The connection (default ``flowctl_db``) holds a SQLAlchemy URL in its extra
``{"sqlalchemy_url": "postgresql+psycopg2://user@host/db"}``, so any database
SQLAlchemy speaks works without a dedicated connection type. A ``postgres``
or ``sqlite`` connection is accepted too, its URL built from the fields.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

if TYPE_CHECKING:
    from airflow.sdk import Connection

    from flowctl.adapters.control_plane import ControlPlane


class FlowctlDbHook(BaseHook):
    """Reads the ``flowctl_db`` connection; hands out the SQLAlchemy URL and clients.

    :param flowctl_conn_id: the connection holding the database URL.
    """

    conn_name_attr = "flowctl_conn_id"
    default_conn_name = "flowctl_db"
    conn_type = "generic"
    hook_name = "flowctl database"

    def __init__(self, flowctl_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.flowctl_conn_id = flowctl_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["port", "login", "password", "schema"],
            "relabeling": {},
            "placeholders": {
                "extra": '{"sqlalchemy_url": "postgresql+psycopg2://postgres@127.0.0.1:5432/flowctl"}'
            },
        }

    @cached_property
    def sqlalchemy_url(self) -> str:
        """The database URL; a clear error names the connection if it has none."""
        return connection_url(self.get_connection(self.flowctl_conn_id), self.flowctl_conn_id)

    @classmethod
    async def async_sqlalchemy_url(cls, flowctl_conn_id: str = default_conn_name) -> str:
        """:attr:`sqlalchemy_url` for a trigger: the connection read without blocking the loop."""
        return connection_url(await cls.aget_connection(flowctl_conn_id), flowctl_conn_id)

    def get_control_plane(self) -> ControlPlane:
        """The control plane on this database, schema ensured."""
        from flowctl.adapters.control_plane import ControlPlane

        plane = ControlPlane(self.sqlalchemy_url)
        plane.ensure_schema()
        return plane

    def test_connection(self) -> tuple[bool, str]:
        """``SELECT 1`` on the database, for the Airflow UI's Test button."""
        import sqlalchemy as sa

        try:
            engine = sa.create_engine(self.sqlalchemy_url)
            with engine.connect() as connection:
                connection.execute(sa.text("SELECT 1"))
            engine.dispose()
        except Exception as exc:  # reported to the UI, not raised
            return False, f"{type(exc).__name__}: {exc}"
        return True, "flowctl database reachable"


def connection_url(conn: Connection, conn_id: str) -> str:
    """The SQLAlchemy URL a connection names: its ``sqlalchemy_url`` extra, or its fields.

    Built with ``sqlalchemy.URL.create`` so a login or password holding ``@``, ``/``,
    ``:`` or ``%`` is escaped; rendered with the password because the URL is handed to
    engines and to job processes (never log it: ``flowctl.adapters.db.masked_url`` hides it).
    """
    import sqlalchemy as sa

    url = (conn.extra_dejson or {}).get("sqlalchemy_url")
    if url:
        return str(url)
    if conn.conn_type in ("postgres", "postgresql"):
        return sa.URL.create(
            "postgresql+psycopg2",
            username=conn.login or "postgres",
            password=conn.password or None,
            host=conn.host,
            port=conn.port or None,
            database=conn.schema or "postgres",
        ).render_as_string(hide_password=False)
    if conn.conn_type == "sqlite" and conn.host:
        return sa.URL.create("sqlite", database=conn.host).render_as_string()
    raise ValueError(
        f"connection {conn_id!r} (conn_type={conn.conn_type!r}) has no "
        'database URL: set its extra to {"sqlalchemy_url": "<SQLAlchemy URL>"}'
    )
