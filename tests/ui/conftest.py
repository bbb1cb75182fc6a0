"""UI tests run against a throwaway Airflow home (see tests/airflow_env.py)."""

from tests.airflow_env import configure

configure()
