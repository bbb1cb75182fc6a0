"""Pipeline definitions: a decoder, operators, a sink and a partitioning key."""
