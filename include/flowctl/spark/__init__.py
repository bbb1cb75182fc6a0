"""The Spark side: the flow-controlled Kafka streaming source, sinks and jobs."""
