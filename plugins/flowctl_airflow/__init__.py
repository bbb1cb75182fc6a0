"""flowctl's Airflow integration: hooks, operators, sensors, triggers, UI.

Laid out like an Airflow provider (``hooks/``, ``operators/``, ...), so a user
who knows ``airflow.providers.apache.spark`` finds their way around. Airflow
puts ``plugins/`` on ``sys.path``; the project's ``pyproject.toml`` also
installs this package, so tests and Spark jobs import it the same way.
"""
