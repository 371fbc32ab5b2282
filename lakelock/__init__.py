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

The names here are what the README's tasks use; errors are ``lakelock.errors``'s (one tree
under :class:`~lakelock.errors.LakelockError`); the commit protocol's objects, tuning
(:class:`~lakelock.advanced.FoldPolicy`) and the types behind a few attributes are
:mod:`lakelock.advanced`'s; the simulator is :mod:`lakelock.testing.simulate`'s.
"""

# Private aliases: the package's own attributes are its public names only.
import importlib as _importlib
import warnings as _warnings

from lakelock import advanced, errors
from lakelock._datafile import DataFile
from lakelock._fence import Fence
from lakelock._lake import Lake, LakeConfig
from lakelock._lease import Lease
from lakelock._mirror import MirrorResult
from lakelock._pathlock import AsyncPathLock, PathLock, PathLockHandle
from lakelock._policy import generate_bucket_policy
from lakelock._registry import (
    CommitResult,
    DatasetState,
    HistoryEntry,
    Registry,
    RegistrySnapshot,
)
from lakelock._registry._settings import LakeSettings
from lakelock._retry import RetryPolicy
from lakelock._scan import Scan
from lakelock._vacuum import VacuumReport

__all__ = [
    "AsyncPathLock",
    "CommitResult",
    "DataFile",
    "DatasetState",
    "Fence",
    "HistoryEntry",
    "Lake",
    "LakeConfig",
    "LakeSettings",
    "Lease",
    "MirrorResult",
    "PathLock",
    "PathLockHandle",
    "Registry",
    "RegistrySnapshot",
    "RetryPolicy",
    "Scan",
    "VacuumReport",
    "advanced",
    "errors",
    "generate_bucket_policy",
]

__version__ = "0.1.0"

#: Names this package exported before, and where each is now: it still works, with a
#: DeprecationWarning naming its new home, until the next release.
_MOVED = {name: "lakelock.advanced" for name in advanced.__all__ if name != "RegistryInternals"}
#: An S3 listing's entry (``Lake.store``'s plumbing): private now, no new home.
_MOVED["ListedObject"] = "lakelock._s3"


def __getattr__(name: str) -> object:
    """A name that moved: the object, with a DeprecationWarning that names its new home."""
    home = _MOVED.get(name)
    if home is None:
        raise AttributeError(f"module 'lakelock' has no attribute {name!r}")
    moved = "is private now" if home == "lakelock._s3" else f"moved to {home}.{name}"
    _warnings.warn(
        f"lakelock.{name} {moved} (lakelock.{name} goes in the next release)",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(_importlib.import_module(home), name)
