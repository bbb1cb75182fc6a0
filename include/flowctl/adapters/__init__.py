"""Adapters: the I/O. One module per real thing (Kafka log, memcached store, SQL)."""
