"""A small client of the split Airflow's REST API (what a user's script or the UI does).

The cluster tests and ``bench/cluster_volume.py`` drive ``flowctl cluster`` through it.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any


class AirflowApi:
    """Token login, then JSON requests against ``/api/v2``."""

    def __init__(self, base_url: str, username: str, password: str) -> None:
        self.base_url = base_url.rstrip("/")
        body = self._request("POST", "/auth/token", {"username": username, "password": password})
        self.token = body["access_token"]

    def _request(self, method: str, path: str, payload: object | None = None) -> Any:
        headers = {"Content-Type": "application/json"}
        if getattr(self, "token", None):
            headers["Authorization"] = f"Bearer {self.token}"
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(
            self.base_url + path, data=data, method=method, headers=headers
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise AssertionError(
                f"{method} {path} -> {exc.code}: {exc.read().decode(errors='replace')}"
            ) from None

    def get(self, path: str) -> Any:
        return self._request("GET", "/api/v2" + path)

    def wait_for_dag(self, dag_id: str, timeout: float) -> None:
        """Until the dag-processor has parsed ``dag_id`` into the metadata DB."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.get(f"/dags/{dag_id}")
                return
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)

    def unpause(self, dag_id: str) -> None:
        self._request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})

    def trigger(self, dag_id: str, run_id: str, conf: dict[str, Any]) -> None:
        self._request(
            "POST",
            f"/api/v2/dags/{dag_id}/dagRuns",
            {"dag_run_id": run_id, "logical_date": None, "conf": conf},
        )

    def run_state(self, dag_id: str, run_id: str) -> str:
        return str(self.get(f"/dags/{dag_id}/dagRuns/{run_id}")["state"])

    def task_instance(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        return self.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")

    def wait_run(self, dag_id: str, run_id: str, timeout: float) -> str:
        """The run's final state (success or failed) within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.run_state(dag_id, run_id)
            if state in ("success", "failed"):
                return state
            time.sleep(2.0)
        raise AssertionError(f"{dag_id} run {run_id} not finished after {timeout:.0f} s")
