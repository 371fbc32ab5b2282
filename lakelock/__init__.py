"""lakelock: many writers, one S3 data lake, no coordinator but S3's conditional requests.

```python
import lakelock

lake = lakelock.Lake("my-bucket")
result = lake.append("customer_profiles", table, partition_by=["year", "month", "day"])
snapshot = lake.registry.read()
policy = lakelock.generate_bucket_policy(
    "my-bucket", principals=["arn:aws:iam::111111111111:role/etl"]
)
```
"""

from __future__ import annotations

from lakelock import errors
from lakelock._datafile import DataFile
from lakelock._lake import Lake, LakeConfig
from lakelock._pathlock import AsyncPathLock, PathLock
from lakelock._policy import generate_bucket_policy
from lakelock._registry import CommitResult, Fence, Registry, RegistrySnapshot
from lakelock._retry import RetryPolicy
from lakelock._scan import Scan

__all__ = [
    "AsyncPathLock",
    "CommitResult",
    "DataFile",
    "Fence",
    "Lake",
    "LakeConfig",
    "PathLock",
    "Registry",
    "RegistrySnapshot",
    "RetryPolicy",
    "Scan",
    "errors",
    "generate_bucket_policy",
]

__version__ = "0.1.0"
