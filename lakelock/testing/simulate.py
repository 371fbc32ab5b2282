"""The deterministic simulator, for tests of pipelines and of lakelock itself: many writers
run lakelock's commit protocol against a simulated S3 in virtual time, one thread, seeded; every
run is checked (docs/SIMULATOR.md). Also the ``lakelock simulate`` command.

```python
from lakelock.testing.simulate import Faults, SimConfig, simulate

result = simulate(SimConfig(writers=8, seconds=2, store="s3-express", seed=7,
                            faults=Faults(rate=0.02, kills=1)))
assert not result.violations, result.config.replay_command()
print(result.metrics.commits_per_second)
```
"""

from __future__ import annotations

from lakelock._sim._check import DatasetVersion, Observation, View, check
from lakelock._sim._faults import FAULT_KINDS, Brownout, Faults
from lakelock._sim._latency import PROFILES, Latency, Profile, profile
from lakelock._sim._loop import StoreRetry
from lakelock._sim._protocols import CoreProtocol, SimProtocol, ToyProtocol
from lakelock._sim._run import Metrics, SimConfig, SimResult, simulate
from lakelock._sim._store import EPOCH, SimS3
from lakelock._sim._workload import Invocation, Mix

__all__ = [
    "EPOCH",
    "FAULT_KINDS",
    "PROFILES",
    "Brownout",
    "CoreProtocol",
    "DatasetVersion",
    "Faults",
    "Invocation",
    "Latency",
    "Metrics",
    "Mix",
    "Observation",
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
    "simulate",
]
