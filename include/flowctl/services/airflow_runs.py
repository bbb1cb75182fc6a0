"""The embedded Airflow's DAG runs, over its REST API: none may be left ``running``.

A stream task ends when its topology stops, but the scheduler closes the DAG
run only on its next loop; stopped before that, it leaves the run ``running``
for ever (and the next ``up`` shows a stale run). So ``demo down`` waits for
the scheduler to close the runs, and marks what is still open ``failed``
(with a note saying why) before it stops Airflow; ``demo up`` does the same
for runs an earlier, unclean stop left behind.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from flowctl.config import Settings
from flowctl.services.airflow import ADMIN_USER, admin_password
from flowctl.services.base import ServiceError

OPEN_STATES = ("queued", "running")


class AirflowApi:
    """A logged-in client of the embedded Airflow's ``/api/v2``."""

    def __init__(self, settings: Settings, timeout: float = 30.0) -> None:
        self.base = f"http://{settings.host}:{settings.airflow_port}"
        self.timeout = timeout
        password = admin_password(settings)
        if not password:
            raise ServiceError("Airflow wrote no generated admin password; cannot log in")
        body = self._call("POST", "/auth/token", {"username": ADMIN_USER, "password": password})
        self.token = str(body["access_token"])

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        headers = {"Content-Type": "application/json"}
        if getattr(self, "token", None):
            headers["Authorization"] = f"Bearer {self.token}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:300].decode(errors="replace")
            raise ServiceError(f"Airflow {method} {path}: HTTP {exc.code} {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise ServiceError(f"Airflow {method} {path}: {exc}") from None

    def open_runs(self) -> list[tuple[str, str]]:
        """(dag_id, run_id) of every queued or running DAG run."""
        query = urllib.parse.urlencode([("state", s) for s in OPEN_STATES] + [("limit", 100)])
        body = self._call("GET", f"/api/v2/dags/~/dagRuns?{query}")
        return [(run["dag_id"], run["dag_run_id"]) for run in body["dag_runs"]]

    def mark_failed(self, dag_id: str, run_id: str, note: str) -> None:
        path = f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}"
        self._call("PATCH", path, {"state": "failed", "note": note})


def close_runs(settings: Settings, *, wait_s: float, note: str) -> list[tuple[str, str]]:
    """Wait up to ``wait_s`` for open runs to finish; mark the rest failed; those marked."""
    api = AirflowApi(settings)
    deadline = time.monotonic() + wait_s
    runs = api.open_runs()
    while runs and time.monotonic() < deadline:
        time.sleep(2.0)
        runs = api.open_runs()
    for dag_id, run_id in runs:
        api.mark_failed(dag_id, run_id, note)
    return runs
