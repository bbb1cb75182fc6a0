"""flowctl: a self-regulating stream platform on Airflow and Spark.

Layout (see docs/architecture.md):

- ``flowctl.core``      the flow-control algorithms of SPEC A-H. Pure: standard
                        library only, time passed in through a clock, no I/O.
- ``flowctl.adapters``  one module per real thing (Kafka, memcached, SQL).
- ``flowctl.spark``     the flow-controlled Kafka streaming source, sinks, jobs.
- ``flowctl.services``  the embedded services (Tansu, memcached, database).
- ``flowctl.pipelines`` pipeline definitions (decoder, operators, sink).
"""

__version__ = "0.1.0"
