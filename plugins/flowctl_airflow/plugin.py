"""The Airflow plugin object of flowctl (hooks and operators are plain imports)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin


class FlowctlPlugin(AirflowPlugin):
    """flowctl's entry in Airflow's plugin list (Admin > Plugins)."""

    name = "flowctl"
