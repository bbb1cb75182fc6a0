"""Discrete-event simulation of one flow-controlled source and P lanes.

Pure like :mod:`flowctl.core` (standard library only, a fake clock, seeded
randomness): the same configuration always gives the same result, so a test
can check properties of the algorithms, not of a machine.
"""
