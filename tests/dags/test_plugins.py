"""The plugins folder loads as one package and shadows no library.

Airflow imports every ``.py`` file under ``plugins/`` as a top-level module
named after the file; ``plugins/.airflowignore`` keeps the package's files
(e.g. ``hooks/kafka.py``) out of that scan, or ``import kafka`` would break.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.airflow


def _airflow(*args: str) -> str:
    airflow = Path(sys.executable).parent / "airflow"
    done = subprocess.run(
        [str(airflow), *args], capture_output=True, text=True, env=os.environ.copy(), check=True
    )
    return done.stdout


def test_only_the_flowctl_plugin_is_loaded_from_plugins_folder() -> None:
    plugins = json.loads(_airflow("plugins", "-o", "json"))
    ours = [p for p in plugins if p["source"].startswith("$PLUGINS_FOLDER/flowctl")]
    assert [(p["name"], p["source"]) for p in ours] == [
        ("flowctl", "$PLUGINS_FOLDER/flowctl_plugin.py")
    ]


def test_plugin_scan_does_not_shadow_kafka_python() -> None:
    script = (
        "from airflow.plugins_manager import get_plugin_info; get_plugin_info(); "
        "import kafka; print(kafka.__file__)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        check=True,
    )
    assert "site-packages/kafka/" in done.stdout.strip().splitlines()[-1]
