"""lakelock: many writers, one S3 data lake, no coordinator but S3's conditional requests.

```python
import pyarrow as pa
import lakelock

lake = lakelock.Lake("my-bucket")
table = pa.table({"id": [1, 2], "year": [2024, 2024], "month": [1, 2], "day": [30, 1]})
result = lake.append("customer_profiles", table, partition_by=["year", "month", "day"])
snapshot = lake.registry.read()
policy = lakelock.generate_bucket_policy(
    "my-bucket", principals=["arn:aws:iam::111111111111:role/etl"]
)
```
"""

from lakelock import errors
from lakelock._datafile import DataFile
from lakelock._fence import Fence
from lakelock._lake import Lake, LakeConfig, MoveOptions, ScanOptions
from lakelock._lease import Lease, LeaseOptions
from lakelock._mirror import MirrorResult
from lakelock._mirror._auto import AutoMirror
from lakelock._operations import WriteOptions
from lakelock._pathlock import (
    AsyncPathLock,
    AsyncPathLockGuard,
    DistributedPathLock,
    LockOptions,
    LockRequest,
    PathLock,
    PathLockGuard,
    PathLockHandle,
)
from lakelock._policy import generate_bucket_policy
from lakelock._registry import (
    Change,
    CommitRecord,
    CommitResult,
    DatasetState,
    HistoryEntry,
    IntentFate,
    MigrationResult,
    PartitionState,
    Registry,
    RegistrySnapshot,
)
from lakelock._registry._core import FoldPolicy, Hints
from lakelock._registry._settings import LakeSettings
from lakelock._retry import RetryPolicy
from lakelock._s3 import ListedObject
from lakelock._scan import Scan
from lakelock._stats import ColumnStats, FileStats
from lakelock._vacuum import VacuumReport

__all__ = [
    "AsyncPathLock",
    "AsyncPathLockGuard",
    "AutoMirror",
    "Change",
    "ColumnStats",
    "CommitRecord",
    "CommitResult",
    "DataFile",
    "DatasetState",
    "DistributedPathLock",
    "Fence",
    "FileStats",
    "FoldPolicy",
    "Hints",
    "HistoryEntry",
    "IntentFate",
    "Lake",
    "LakeConfig",
    "LakeSettings",
    "Lease",
    "LeaseOptions",
    "ListedObject",
    "LockOptions",
    "LockRequest",
    "MigrationResult",
    "MirrorResult",
    "MoveOptions",
    "PartitionState",
    "PathLock",
    "PathLockGuard",
    "PathLockHandle",
    "Registry",
    "RegistrySnapshot",
    "RetryPolicy",
    "Scan",
    "ScanOptions",
    "VacuumReport",
    "WriteOptions",
    "errors",
    "generate_bucket_policy",
]

__version__ = "0.1.0"
