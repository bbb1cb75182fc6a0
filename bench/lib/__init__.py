"""What only the benchmarks and the tests use, kept out of the shipped packages.

- :mod:`~bench.lib.submit`: ``spark-submit`` of a stream job in a subprocess, as Airflow runs it;
- :mod:`~bench.lib.derive`: a pipeline config renamed from a shipped one, per run;
- :mod:`~bench.lib.baseline` and :mod:`~bench.lib.rate_lines`: the plain Structured Streaming
  word count the experiments compare against, and its Kafka-free rate source
  (entry point ``bench/jobs/wordcount_baseline.py``);
- :mod:`~bench.lib.autoscaler`: the scaling policies' loop over simulated windows;
- :mod:`~bench.lib.direct_replace`: the replace operator with its stream runs started by a
  function instead of DAG runs (no scheduler);
- :mod:`~bench.lib.airflow_api`: a client of the split Airflow's REST API, as a user's script
  drives ``flowctl cluster``.
"""
