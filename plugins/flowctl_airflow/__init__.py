"""Airflow plugins of flowctl."""
