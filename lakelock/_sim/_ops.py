"""What a ``Lake``'s operations decide around the commit core, modelled for the simulator's
writers: the shell's decisions that are made with blocking I/O the simulator cannot run as
it is (:mod:`lakelock._operations`, :mod:`lakelock._datasets`,
:meth:`lakelock._registry.Registry.commit`), written again over the core's requests.

- **A commit of nothing** (:func:`commits_nothing`): an empty ``Lake.append``, or a
  ``registry.commit`` that adds, removes and declares nothing, under a caller's commit id is
  checked like any other (:func:`nothing_committed`: a recorded id for another change is
  ``CommitIdReusedError``, for this one the earlier commit), then records nothing: no
  version, and the id left for the run that has the rows (FORMAT.md, "Commit ids").
- **A caller-given file name** (:func:`earlier_upload`): a create-only PUT answered
  ``AlreadyExistsError`` whose key holds this very upload's bytes (an earlier run of the
  same job, refused or killed before its commit) takes that object as its own, without a
  write time, and its commit checks it as ``registry.commit`` checks files written before
  it (FORMAT.md rules 10 and 14).

- **A caller's commit id in another spelling** (:func:`checked_id`): an id not in Unicode
  NFC (decomposed, as file names read on macOS come) is refused before anything is written
  (``InvalidArgumentError``: ``CommitBuilder`` validates it), so a re-run spelling its id
  otherwise cannot land its rows a second time (FORMAT.md, "Commit ids").
- **Workers' typed files** (:func:`files_fit`): a ``registry.commit`` of files that carry
  the schema they were written with is judged as ``CommitBuilder`` judges it
  (``fitted_schema``: a column the dataset lacks refused unless merged, a type the
  dataset's cannot hold refused) against the dataset as the process knows it, read anew
  when that does not settle it, and commits declaring the schema it was judged by; refused
  under a caller's id recorded for this very change, it is answered ``already_committed``
  (``refused_rerun``: a re-run whose first run landed before the dataset changed).

- **A copy or rename of a partition whose source file is gone** (:func:`copy_refused`): the
  version it read was replaced while it copied, and vacuum took the file; the copy is
  refused (``CommitConflictError``), nothing committed (``lakelock._partitions``).

Each is one function the simulator's writers call by its module attribute, so a test can
switch the decision back to what it was before (``tests/test_sim_model.py``) and see the
checker report what a user lost.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from lakelock._names import validate_commit_id
from lakelock._registry._batch import CommitResult
from lakelock._registry._builder import fitted_schema, judged_by, refused_rerun
from lakelock._registry._changes import Change, check_fence_writes
from lakelock._registry._core._decide import recorded_version
from lakelock._registry._core._io import need
from lakelock._registry._core._requests import Get, Steps
from lakelock._registry._core._state import Retry
from lakelock._registry._document import (
    CommitRecord,
    DatasetState,
    RegistryDoc,
    parse_registry,
    with_datasets,
)
from lakelock._registry._objects import dataset_for_checks
from lakelock.errors import (
    CommitConflictError,
    CommitIdReusedError,
    NotFoundError,
    RetryBudgetExhaustedError,
    SchemaMismatchError,
)

if TYPE_CHECKING:
    from lakelock._registry._core import Committer

__all__ = [
    "LOOKS",
    "checked_id",
    "commits_nothing",
    "copy_refused",
    "earlier_upload",
    "files_fit",
    "nothing_committed",
]

#: How many times a commit of nothing reads the root again to look its id up when an object
#: that root names could not be read (the registry's read retries as often).
LOOKS = 5


def commits_nothing(changes: Sequence[Change]) -> bool:
    """Whether ``changes`` commit nothing: an append or overwrite without files and without
    a partition to replace (an empty ``Lake.append``), or a ``registry.commit`` that adds,
    removes and declares nothing (no ``partition_by``, schema or properties)."""
    if not changes:
        return False
    for change in changes:
        if (
            change.add
            or change.remove
            or change.remove_partitions
            or change.restore is not None
            or change.fence is not None
            or change.properties is not None
            or change.schema is not None
        ):
            return False
        if change.operation == "commit" and change.partition_by is not None:
            return False  # a registry.commit that declares partition columns makes a dataset
        if change.operation not in ("append", "overwrite", "commit"):
            return False
    return True


def nothing_committed(core: Committer, changes: Sequence[Change]) -> Steps:
    """The result of a commit of nothing (:func:`commits_nothing`): its commit id looked up
    in a fresh read of the root (its window, then each dataset's commit-id index), as
    ``CommitBuilder.check`` does; recorded for this change, the earlier commit
    (``already_committed``); for another, ``CommitIdReusedError``; else ``empty`` at the
    version read, nothing written."""
    for _ in range(LOOKS):
        doc = yield from _root(core)
        try:
            found = yield from need(core, functools.partial(_recorded, doc, changes, core))
        except Retry:
            continue
        for recorded in found:
            if isinstance(recorded, CommitIdReusedError):
                raise recorded
        versions = [v for v in found if isinstance(v, int)]
        commit_id = changes[0].commit_id
        if versions:
            return CommitResult(max(versions), commit_id, attempts=0, already_committed=True)
        return CommitResult(doc.version, commit_id, attempts=0, empty=True)
    raise RetryBudgetExhaustedError(
        f"commit {changes[0].commit_id!r} of nothing: its commit id could not be looked up; "
        "nothing was committed"
    )


def _recorded(
    doc: RegistryDoc, changes: Sequence[Change], core: Committer
) -> list[int | CommitIdReusedError | None]:
    return [recorded_version(doc, c, core.objects) for c in changes]


def _root(core: Committer) -> Steps:
    """The root as ``registry.read()`` reads it: retried on transient failures by the store
    layer (the empty registry where there is no root yet)."""
    try:
        data = yield Get(core.root_key)
    except NotFoundError:
        return RegistryDoc()
    doc = parse_registry(data.body, bucket=core.bucket, key=core.root_key)
    if doc.format_version > 1:
        doc = with_datasets(doc, core.objects.datasets(doc))
    return doc


def earlier_upload(key: str, body: bytes) -> Steps:
    """Whether the object at ``key``, whose create-only PUT was answered
    ``AlreadyExistsError``, is this very upload made before (``lakelock._datasets``'s
    ``_earlier_upload``: its size and recorded checksum ours, here its bytes); gone since
    (vacuum took an orphan), it is not."""
    try:
        there = yield Get(key)
    except NotFoundError:
        return False
    return bool(there.body == body)


def copy_refused(source: str, dataset: str) -> Exception:
    """What a copy (or rename) of a partition raises when a file of the version it read is
    gone as it copies it (``lakelock._partitions``' ``_copy``: the store answers the copy
    ``NoSuchKey``): the partition was replaced and vacuum deleted the file, so the copy is
    refused whole, nothing committed."""
    return CommitConflictError(
        f"{source!r}, a file of the partition as read, is gone: the partition was replaced "
        "and vacuum deleted it while it was being copied; nothing was committed (copy it "
        "again)",
        dataset=dataset,
    )


def checked_id(commit_id: str) -> str:
    """A caller's commit id as ``CommitBuilder`` takes it (``_names.validate_commit_id``):
    unchanged, or ``InvalidArgumentError`` (an id not in NFC among others) before anything
    is written."""
    return validate_commit_id(commit_id)


def fenced_writes(changes: Sequence[Change]) -> None:
    """Refuse ``changes`` as ``Registry.commit_changes`` refuses them, and an operation
    before its first data PUT: one whose path-lock fence holds what it writes only for
    reading (:func:`~lakelock._registry._changes.check_fence_writes`,
    ``InvalidArgumentError``, nothing written)."""
    for change in changes:
        check_fence_writes(change)


def files_fit(core: Committer, changes: Sequence[Change]) -> Steps:
    """``changes`` as ``CommitBuilder.commit`` commits them once their typed files are
    judged (``_files_fit``): each declaring the schema :func:`fitted_schema` returns, or
    its ``SchemaMismatchError``, nothing committed, unless the id is the caller's and
    recorded for this very change (a re-run whose first run landed before the dataset
    changed): then the earlier commit, a :class:`CommitResult` ``already_committed``
    (:func:`refused_rerun`, the shell's own decision, on the root read anew). A change
    adding no typed file is returned as it is, at no request. The dataset is the one the
    process knows (the core's last root, at no request), read anew when that does not
    settle the judgement (:func:`judged_by`), as the shell reads it."""
    fitted = []
    for change in changes:
        if all(f.schema is None for f in change.add):
            fitted.append(change)
            continue
        dataset = None
        if core.known is not None:
            datasets = core.objects.datasets(core.known[0])
            dataset = yield from need(core, functools.partial(_for_checks, datasets, change))
        if not judged_by(change, dataset):
            dataset = yield from _dataset_now(core, change.dataset)
        try:
            fitted.append(replace(change, schema=fitted_schema(change, dataset)))
        except SchemaMismatchError:
            if change.generated_id:
                raise
            found = yield from _recorded_commit(core, change)
            earlier = refused_rerun(change, found)
            if earlier is None:
                raise
            return earlier
    return fitted


def _recorded_commit(core: Committer, change: Change) -> Steps:
    """What the registry records of ``change``'s commit id in a fresh read of the root, as
    ``registry.internals.recorded_commit`` finds it: the root's record of a recent commit,
    else the entry of the dataset's commit-id index, else ``None``."""
    for _ in range(LOOKS):
        doc = yield from _root(core)
        try:
            return (yield from need(core, functools.partial(_recorded_in, doc, change, core)))
        except Retry:
            continue
    raise RetryBudgetExhaustedError(
        f"commit {change.commit_id!r}: its commit id could not be looked up; nothing was committed"
    )


def _recorded_in(
    doc: RegistryDoc, change: Change, core: Committer
) -> CommitRecord | Mapping[str, Any] | None:
    record = doc.commit(change.commit_id)
    if record is not None:
        return record
    state = doc.datasets.get(change.dataset)
    if state is None or doc.format_version == 1:
        return None
    return core.objects.commit_entry(state, change.commit_id)


def _for_checks(datasets: Any, change: Change) -> DatasetState | None:
    return dataset_for_checks(datasets, change.dataset)


def _dataset_now(core: Committer, name: str) -> Steps:
    """Dataset ``name`` as ``registry.read()`` reads it now (None: there is none)."""
    for _ in range(LOOKS):
        doc = yield from _root(core)
        try:
            return (yield from need(core, functools.partial(doc.datasets.get, name)))
        except Retry:
            continue
    raise RetryBudgetExhaustedError(
        f"dataset {name!r} could not be read to judge the files committed; nothing was committed"
    )
