"""Operators of the platform: ingest, stream submission."""
