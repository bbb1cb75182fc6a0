"""Airflow DAGs of every flowctl pipeline, one set per config in include/pipelines/.

A thin DAG file: the DAGs are built by ``flowctl_airflow.dag_factory`` from
each pipeline's config file, so adding a pipeline never means copying a DAG.
"""

from flowctl_airflow.dag_factory import all_pipeline_dags

for _dag in all_pipeline_dags():
    globals()[_dag.dag_id] = _dag
