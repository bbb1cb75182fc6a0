"""Triggers of flowctl's deferrable sensors and operators (run in the Airflow triggerer)."""
