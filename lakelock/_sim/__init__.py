"""The deterministic simulator: lakelock's commit protocol with many writers against a
simulated S3, in virtual time, in one thread, seeded (docs/SIMULATOR.md).

A run is a pure function of its ``SimConfig`` (seed included): it replays exactly. Its one
public home is :mod:`lakelock.testing.simulate` (and the ``lakelock simulate`` command):
this package exports nothing; its modules are on docs/ARCHITECTURE.md's map.
"""
