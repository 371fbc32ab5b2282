"""The public surface is exactly what DESIGN.md §5 promises, and nothing private leaks."""

from __future__ import annotations

import lakelock
import lakelock.errors
import lakelock.testing


def test_public_names() -> None:
    """lakelock.__all__ lists the documented entry points, each importable."""
    assert set(lakelock.__all__) == {
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
    }
    for name in lakelock.__all__:
        assert getattr(lakelock, name) is not None


def test_error_tree_has_one_root() -> None:
    """Every exported error descends from LakelockError; builtin bases are as documented."""
    for name in lakelock.errors.__all__:
        error = getattr(lakelock.errors, name)
        assert issubclass(error, lakelock.errors.LakelockError), name
    assert issubclass(lakelock.errors.AlreadyExistsError, FileExistsError)
    assert issubclass(lakelock.errors.LockTimeout, TimeoutError)
    assert issubclass(lakelock.errors.InvalidNameError, ValueError)
    assert issubclass(lakelock.errors.NotFoundError, FileNotFoundError)
    assert issubclass(lakelock.errors.DatasetNotFoundError, KeyError)
    assert issubclass(lakelock.errors.MissingExtraError, ImportError)


def test_testing_exports() -> None:
    """lakelock.testing exposes the endpoint and the fault vocabulary."""
    assert {"S3Endpoint", "FaultRule", "FaultPlan", "parse_fault_spec"} <= set(
        lakelock.testing.__all__
    )
