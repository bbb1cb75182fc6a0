"""The operator tests import Airflow: configure the throwaway home first (tests/airflow_env.py)."""

from tests.airflow_env import configure

configure()
