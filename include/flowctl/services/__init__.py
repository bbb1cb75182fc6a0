"""The embedded services: Tansu broker, memcached and the database, run locally."""
