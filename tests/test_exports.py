"""The public surface: ``lakelock.__all__`` is exactly the package's public attributes and no
more than the README's tasks use; what lakelock hands out that a pipeline seldom names is in
``lakelock.advanced``; every type a user is handed is in one of the two; the names that moved
still work for one release, with a warning naming their new home; ``Registry`` and ``Lake``
show no attribute outside the lists below; the simulator has one public home."""

from __future__ import annotations

import inspect
import subprocess
import sys
import types
import typing
from collections.abc import Iterator
from typing import Any

import orjson
import pyarrow.dataset
import pytest

import lakelock
import lakelock.advanced
import lakelock.errors
import lakelock.testing
import lakelock.testing.simulate
from lakelock import Lake
from lakelock.advanced import FoldPolicy
from lakelock.errors import InvalidArgumentError
from tests._support import REPO

#: What a user of the README needs by name: writing, reading, time travel, locks and leases,
#: the bucket policy, engines, views; errors are ``lakelock.errors.X`` (one tree, one name
#: here), the rest ``lakelock.advanced.X``.
PUBLIC = [
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

#: Exported by ``lakelock`` before, now ``lakelock.advanced``'s.
MOVED = [
    "AsyncPathLockGuard",
    "AutoMirror",
    "Change",
    "ColumnStats",
    "CommitRecord",
    "DistributedPathLock",
    "FileStats",
    "FoldPolicy",
    "Hints",
    "IntentFate",
    "LeaseOptions",
    "LockOptions",
    "LockRequest",
    "MigrationResult",
    "MoveOptions",
    "PartitionState",
    "PathLockGuard",
    "ScanOptions",
    "WriteOptions",
]

#: ``Registry``'s public attributes: reading, committing, the lake's settings, migration, the
#: log and pending commits, and ``internals`` (what the commit protocol knows and decided:
#: :class:`RegistryInternals`).
REGISTRY_PUBLIC = {
    "close",
    "commit",
    "commit_changes",
    "configure",
    "dataset",
    "files",
    "find_commit",
    "history",
    "internals",
    "lock_timeout",
    "log",
    "migrate",
    "pending_intents",
    "read",
    "retry",
    "settings",
    "store",
}
#: Kept for one release, with a DeprecationWarning: ``Lake(fold_policy=...)`` replaces it.
REGISTRY_DEPRECATED = {"policy"}

#: ``Lake``'s public attributes: its operations, what it was opened on and what it holds.
LAKE_PUBLIC = {
    "append",
    "auto_mirror",
    "bucket",
    "client",
    "close",
    "compact",
    "config",
    "configure",
    "copy_partition",
    "delete",
    "from_url",
    "history",
    "lease",
    "lock",
    "locks",
    "mirror",
    "overwrite",
    "prefix",
    "read",
    "registry",
    "rename_partition",
    "restore",
    "retry",
    "scan",
    "set_properties",
    "store",
    "url",
    "vacuum",
    "write",
}

#: Types a public method returns that are deliberately not exported, and why.
NOT_EXPORTED = {
    # The S3 adapter behind ``Lake.store``: plumbing for tests and tools, not a user's API.
    "lakelock._s3._store.ObjectStore",
    # One grant in a lock table (``PathLockHandle.grants``): diagnostics, like ``lakelock locks``.
    "lakelock._pathlock._table.Holder",
    # A partition's manifest as stored (``registry.internals.load_manifests``): the format.
    "lakelock._registry._manifest.Manifest",
    # The cache of write-once objects (``registry.internals.objects``): lakelock's own tools'.
    "lakelock._registry._objects.Objects",
}


#: Names lakelock's modules import for type checking only, as they spell them there
#: (``pyarrow.dataset`` imports pandas: ``lakelock._scan`` loads it when a dataset is asked for).
TYPE_CHECKING_ONLY = {"ds": pyarrow.dataset}


def public_attributes() -> list[str]:
    """``lakelock``'s public attributes in a fresh interpreter (here, other tests may have
    imported submodules such as ``lakelock.testing``, which then appear as attributes)."""
    code = "import json, lakelock; print(json.dumps(sorted(vars(lakelock))))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, check=True
    ).stdout
    names: list[str] = orjson.loads(out)
    return [name for name in names if not name.startswith("_")]


def test_all_lists_every_public_attribute() -> None:
    """``__all__`` equals the public attributes: nothing exported is missing, nothing public
    is unlisted (``annotations`` from a ``__future__`` import included), no name twice."""
    assert len(set(lakelock.__all__)) == len(lakelock.__all__)
    assert public_attributes() == sorted(lakelock.__all__)
    assert "annotations" not in dir(lakelock)


def test_the_public_names_are_what_the_readme_needs() -> None:
    """``lakelock`` exports the names listed above (at most 25), no protocol object among
    them; ``lakelock.advanced`` holds what moved, plus ``registry.internals``'s type and
    ``registry.log``'s entries."""
    assert sorted(lakelock.__all__) == sorted(PUBLIC)
    assert len(lakelock.__all__) <= 25
    assert sorted(lakelock.advanced.__all__) == sorted([*MOVED, "LogEntry", "RegistryInternals"])


@pytest.mark.parametrize("name", MOVED)
def test_a_name_that_moved_still_works_and_says_where_it_went(name: str) -> None:
    """``lakelock.X`` and ``from lakelock import X`` of a name that moved still give the
    object, for one release, with a DeprecationWarning that names its new home."""
    with pytest.warns(DeprecationWarning, match=rf"lakelock\.advanced\.{name}\b"):
        assert getattr(lakelock, name) is getattr(lakelock.advanced, name)
    with pytest.warns(DeprecationWarning, match=rf"lakelock\.advanced\.{name}\b"):
        exec(f"from lakelock import {name}", {})


def test_a_name_made_private_still_works_and_warns() -> None:
    """``lakelock.ListedObject`` (an S3 listing's entry, private now) still works for one
    release, warning that it goes; an unknown name is an AttributeError as ever."""
    with pytest.warns(DeprecationWarning, match="ListedObject is private now"):
        listed = lakelock.ListedObject  # type: ignore[attr-defined]
    assert listed.__module__.startswith("lakelock._s3")
    with pytest.raises(AttributeError, match="Nope"):
        lakelock.Nope  # type: ignore[attr-defined]  # noqa: B018


def test_exports_are_lakelocks_own() -> None:
    """Every export, of ``lakelock`` and of ``lakelock.advanced``, is defined by lakelock
    itself (no re-exported third-party names)."""
    for package in (lakelock, lakelock.advanced):
        for name in package.__all__:
            value = getattr(package, name)
            module = value.__name__ if isinstance(value, types.ModuleType) else value.__module__
            assert module.startswith("lakelock"), (name, module)


def _public(value: object) -> set[str]:
    return {name for name in dir(value) if not name.startswith("_")}


def test_registry_shows_no_internals(lake: Lake) -> None:
    """A lake's ``Registry`` has no public attribute outside the listed set: the commit
    protocol's state (the root it last saw, intents' fates, its learnt hints, its policy)
    is ``registry.internals``'s. ``Lake``'s are listed too."""
    assert _public(lake.registry) == REGISTRY_PUBLIC | REGISTRY_DEPRECATED
    assert _public(lake) == LAKE_PUBLIC
    internals = lake.registry.internals
    assert isinstance(internals, lakelock.advanced.RegistryInternals)
    for name in ("known", "intent_fates", "hints", "policy"):
        assert hasattr(internals, name), name


def test_the_old_registry_policy_still_works_and_warns(lake: Lake) -> None:
    """``registry.policy`` (read and set, as ``dataclasses.replace`` recipes did) works for
    one release, warning that ``Lake(fold_policy=...)`` replaces it."""
    with pytest.warns(DeprecationWarning, match=r"Lake\(fold_policy=\.\.\.\)"):
        policy = lake.registry.policy
    assert policy is lake.registry.internals.policy
    with pytest.warns(DeprecationWarning, match="fold_policy"):
        lake.registry.policy = FoldPolicy(linger=0)
    assert lake.registry.internals.policy == FoldPolicy(linger=0)


def test_tuning_is_one_lake_argument(client: Any, bucket: str) -> None:
    """``Lake(fold_policy=...)`` is the policy this Lake's commits run (and its ``config``
    opens a Lake with it on a worker); anything else is refused before any request."""
    policy = FoldPolicy(linger=0)
    lake = Lake(bucket, s3=client, fold_policy=policy)
    assert lake.registry.internals.policy is policy
    assert lake.config.open().registry.internals.policy == policy
    assert Lake.from_url(f"s3://{bucket}", fold_policy=policy).registry.internals.policy is policy
    with pytest.raises(InvalidArgumentError, match="fold_policy"):
        Lake(bucket, s3=client, fold_policy={"linger": 0})  # type: ignore[arg-type]


def test_the_simulator_has_one_public_home() -> None:
    """``lakelock.testing.simulate`` is the simulator's public home and loads without moto
    (the embedded endpoint's extra), as the ``lakelock simulate`` command does;
    ``lakelock._sim`` re-exports nothing; the endpoint without moto says what to install."""
    import lakelock._sim

    assert not [n for n in vars(lakelock._sim) if not n.startswith("_")]
    assert all(hasattr(lakelock.testing.simulate, n) for n in lakelock.testing.simulate.__all__)
    code = (
        "import sys; sys.modules['moto'] = None\n"
        "import lakelock._cli._simulate, lakelock.cli\n"
        "from lakelock.testing.simulate import SimConfig, simulate\n"
        "try:\n"
        "    from lakelock.testing import S3Endpoint\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    assert "pip install 'lakelock[local]'" in out


def _classes(annotation: object) -> Iterator[type]:
    if isinstance(annotation, type):
        yield annotation
    for argument in typing.get_args(annotation):
        yield from _classes(argument)


def _handed_out(cls: type) -> Iterator[tuple[str, type]]:
    """The lakelock classes that the public methods and properties of ``cls`` return."""
    for name, member in inspect.getmembers(cls):
        if name.startswith("_"):
            continue
        function = member.fget if isinstance(member, property) else member
        if not callable(function):
            continue
        try:
            hints = typing.get_type_hints(function, localns=TYPE_CHECKING_ONLY)
        except TypeError:
            continue
        for returned in _classes(hints.get("return")):
            if returned.__module__.startswith("lakelock"):
                yield f"{cls.__name__}.{name}", returned


def test_every_type_a_user_is_handed_is_exported() -> None:
    """What the exported classes return (a lease from ``Lake.lease``, a handle from
    ``Lake.lock``, a report from ``Lake.vacuum``...) is exported too, by ``lakelock`` or
    ``lakelock.advanced``, or listed above with the reason it is not; errors are in
    ``lakelock.errors``."""
    exported = {getattr(lakelock, name) for name in lakelock.__all__}
    exported |= {getattr(lakelock.advanced, name) for name in lakelock.advanced.__all__}
    errors = {getattr(lakelock.errors, name) for name in lakelock.errors.__all__}
    missing = set()
    for cls in [value for value in exported if isinstance(value, type)]:
        for where, returned in _handed_out(cls):
            qualified = f"{returned.__module__}.{returned.__qualname__}"
            if returned not in exported | errors and qualified not in NOT_EXPORTED:
                missing.add(f"{where} -> {qualified}")
    assert sorted(missing) == []


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
