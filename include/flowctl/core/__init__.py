"""The pure flow-control core (SPEC A-H).

Every module in this package imports only the Python standard library and
takes time from a :class:`flowctl.core.clock.Clock`; a test
(``tests/unit/test_core_purity.py``) enforces it. Spark, Kafka, memcached and
the database reach the core only through :mod:`flowctl.adapters`.
"""
