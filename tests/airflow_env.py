"""A throwaway Airflow for the test session, configured before Airflow is imported.

Airflow reads its configuration once, at import; so the conftest files of
the Airflow test folders call :func:`configure` at import time, before any
test module does ``import airflow``. The metadata database is a SQLite file
in a temporary ``AIRFLOW_HOME``, migrated once per session.
"""

from __future__ import annotations

import atexit
import base64
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_MARK = "FLOWCTL_TEST_AIRFLOW_HOME"


def configure() -> Path:
    """Point Airflow at a fresh home with our dags/ and plugins/ (idempotent)."""
    existing = os.environ.get(_MARK)
    if existing:
        return Path(existing)
    home = Path(tempfile.mkdtemp(prefix="flowctl-airflow-"))
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    os.environ.update(
        {
            _MARK: str(home),
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            # HS512 wants 64 bytes; Airflow's generated 16-byte key makes PyJWT warn.
            "AIRFLOW__API_AUTH__JWT_SECRET": base64.b64encode(os.urandom(64)).decode(),
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "SPARK_LOCAL_IP": "127.0.0.1",
        }
    )
    # spark-submit must be on PATH for SparkSubmitOperator.
    venv_bin = str(Path(sys.executable).parent)
    if venv_bin not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}"
    airflow = Path(sys.executable).parent / "airflow"
    subprocess.run(
        [str(airflow), "db", "migrate"], check=True, capture_output=True, env=os.environ.copy()
    )
    return home
