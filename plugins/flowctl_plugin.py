"""Registers flowctl with Airflow; the code lives in the ``flowctl_airflow`` package."""

from flowctl_airflow.plugin import FlowctlPlugin

__all__ = ["FlowctlPlugin"]
