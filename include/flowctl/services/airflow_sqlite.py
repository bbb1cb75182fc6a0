"""Connection arguments of the embedded Airflow's SQLite metadata database.

Airflow opens its SQLite database with WAL on (readers never wait for a writer)
but keeps Python's default busy timeout of 5 s: a write that waits longer for
another writer's lock fails with "database is locked". On the embedded
platform the API server (a form's unpause, a trigger), the scheduler and the
task runners' heartbeats all write at once, and a 5 s wait was seen to fail an
unpause with HTTP 500 while the trigger that followed it still succeeded (a run
queued behind a paused DAG). A writer here waits up to :data:`BUSY_TIMEOUT_S`.

Airflow imports these dicts by dotted path (``[database]
sql_alchemy_connect_args`` and ``sql_alchemy_connect_args_async``, set by
:func:`flowctl.services.airflow.airflow_env`); it adds its own keys to them.
"""

from __future__ import annotations

#: Seconds a write waits for SQLite's lock before it fails (Python's default: 5).
BUSY_TIMEOUT_S = 60.0

#: ``sqlite3.connect`` keyword arguments of Airflow's (sync) engine.
CONNECT_ARGS: dict[str, object] = {"timeout": BUSY_TIMEOUT_S}

#: The same for its async engine (aiosqlite passes them to ``sqlite3.connect``).
CONNECT_ARGS_ASYNC: dict[str, object] = {"timeout": BUSY_TIMEOUT_S}
