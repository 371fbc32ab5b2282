"""The public surface: ``lakelock.__all__`` is exactly the package's public attributes, every
type a user is handed is among them, and nothing private leaks."""

from __future__ import annotations

import inspect
import subprocess
import sys
import types
import typing
from collections.abc import Iterator

import orjson
import pyarrow.dataset

import lakelock
import lakelock.errors
import lakelock.testing
from tests._support import REPO

#: Types a public method returns that are deliberately not exported, and why.
NOT_EXPORTED = {
    # The S3 adapter behind ``Lake.store``: plumbing for tests and tools, not a user's API.
    "lakelock._s3._store.ObjectStore",
    # One grant in a lock table (``PathLockHandle.grants``): diagnostics, like ``lakelock locks``.
    "lakelock._pathlock._table.Holder",
    # A partition's manifest as stored (``Registry.load_manifests``): the registry's format.
    "lakelock._registry._manifest.Manifest",
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


def test_exports_are_lakelocks_own() -> None:
    """Every export is defined by lakelock itself (no re-exported third-party names)."""
    for name in lakelock.__all__:
        value = getattr(lakelock, name)
        module = value.__name__ if isinstance(value, types.ModuleType) else value.__module__
        assert module.startswith("lakelock"), (name, module)


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
    ``Lake.lock``, a report from ``Lake.vacuum``...) is exported too, or listed above with
    the reason it is not; errors are in ``lakelock.errors``."""
    exported = {getattr(lakelock, name) for name in lakelock.__all__}
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
