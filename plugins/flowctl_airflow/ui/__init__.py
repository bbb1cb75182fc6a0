"""flowctl's page in the Airflow UI: metrics, parallelism timeline, replacements (FastAPI app)."""
