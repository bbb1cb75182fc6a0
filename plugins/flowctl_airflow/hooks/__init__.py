"""Hooks: each wraps one Airflow connection of the platform."""
