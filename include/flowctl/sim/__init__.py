"""Discrete-event simulation of one flow-controlled source and P lanes.

The source is the production spout (:class:`flowctl.core.spout.Spout`) or the
equal-split baseline; the lanes and the links are modelled (:mod:`flowctl.sim.sources`
says what of the Spark source is left out).

Pure like :mod:`flowctl.core` (standard library only, a fake clock, seeded
randomness): the same configuration always gives the same result, so a test
can check properties of the algorithms, not of a machine.
"""
