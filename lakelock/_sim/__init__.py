"""The deterministic simulator: lakelock's commit protocol with many writers against a
simulated S3, in virtual time, in one thread, seeded (docs/SIMULATOR.md).

A run is a pure function of its :class:`SimConfig` (seed included): it replays exactly.
Public as :mod:`lakelock.testing.simulate` and the ``lakelock simulate`` command.
"""

from __future__ import annotations

from lakelock._sim._check import EXPIRY_SLACK, DatasetVersion, Expired, Observation, View, check
from lakelock._sim._faults import FAULT_KINDS, Brownout, Faults
from lakelock._sim._latency import PROFILES, Latency, Profile, profile
from lakelock._sim._loop import Endpoint, Loop, Process, StoreRetry
from lakelock._sim._protocols import CoreProtocol, SimProtocol, ToyProtocol, protocol_named
from lakelock._sim._run import Metrics, SimConfig, SimResult, simulate
from lakelock._sim._store import EPOCH, SimS3
from lakelock._sim._workload import Invocation, Mix

__all__ = [
    "EPOCH",
    "EXPIRY_SLACK",
    "FAULT_KINDS",
    "PROFILES",
    "Brownout",
    "CoreProtocol",
    "DatasetVersion",
    "Endpoint",
    "Expired",
    "Faults",
    "Invocation",
    "Latency",
    "Loop",
    "Metrics",
    "Mix",
    "Observation",
    "Process",
    "Profile",
    "SimConfig",
    "SimProtocol",
    "SimResult",
    "SimS3",
    "StoreRetry",
    "ToyProtocol",
    "View",
    "check",
    "profile",
    "protocol_named",
    "simulate",
]
