"""Building a commit: the one way every writer of a lake makes the :class:`Change` it commits.

The table operations (``append``, ``overwrite``, ``delete``, ``compact``,
``set_properties``, ``restore``), partition copy and rename, the driver's half of
``lakelock.dask`` and ``lakelock.spark``, and :meth:`Registry.commit` itself all build their
commit with a :class:`CommitBuilder` (as delta-rs's operations go through its
``CommitBuilder`` and pyiceberg's through a ``Transaction``), in this order:

1. ``CommitBuilder(registry, dataset, operation, commit_id=..., fence=...)``: the commit id
   is the caller's (validated) or the registry's one generator's (time first, then the
   commit core's randomness: docs/FORMAT.md, "Commit ids"); ``Change.generated_id`` is the
   one record of which (it travels in the intent);
2. :meth:`~CommitBuilder.bind`: the digest the id is bound to (:mod:`lakelock._digest`), of
   the operation's request and its rows, or its files' contents (the catalog's); a
   ``registry.commit``'s and the workers' files of ``lakelock.dask`` and ``lakelock.spark``,
   of what it adds, summarised, and removes (:meth:`~CommitBuilder.bind_to_files`);
3. :meth:`~CommitBuilder.check`, before the first data PUT: a re-run of a recorded commit is
   reported, an id recorded for another change refused, partition columns and schema
   checked (a ``registry.commit`` and a restore leave this to the commit loop);
4. what it commits: :meth:`~CommitBuilder.add`, :meth:`~CommitBuilder.remove`,
   :meth:`~CommitBuilder.restore`, and for a commit spanning datasets
   :meth:`~CommitBuilder.also` (one id, one digest, one operation for all of them);
5. :meth:`~CommitBuilder.commit`: ``Registry.commit_changes``, once.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from lakelock._datafile import DataFile
from lakelock._digest import change_digest
from lakelock._fence import Fence
from lakelock._names import validate_commit_id
from lakelock._properties import check_property_limits
from lakelock._readable import file_shape, held_columns, unholdable
from lakelock._registry._batch import CommitResult
from lakelock._registry._changes import (
    Change,
    check_fence_writes,
    check_fits,
    other_datasets,
    reused_commit_id,
)
from lakelock._registry._document import CommitRecord, DatasetState, RegistrySnapshot
from lakelock._registry._objects import dataset_for_checks
from lakelock.errors import SchemaMismatchError

if TYPE_CHECKING:
    from lakelock._s3 import PutResult

__all__ = [
    "CommitBuilder",
    "Committing",
    "files_held",
    "fitted_schema",
    "hedged_writes",
    "judged_by",
    "refused_rerun",
    "summary_digest",
]


class _Known(Protocol):
    """What a builder asks of ``registry.internals``
    (:class:`~lakelock._registry._shell.RegistryInternals`)."""

    def known(self) -> RegistrySnapshot: ...
    def recorded_commit(
        self, commit_id: str, dataset: str, *, snapshot: RegistrySnapshot | None = None
    ) -> CommitRecord | Mapping[str, Any] | None: ...
    def check_lease_token(self, change: Change) -> None: ...


class Committing(Protocol):
    """What a builder needs of the registry it commits to: the
    :class:`~lakelock._registry.Registry` (a protocol, so that this module, which
    the registry builds its own commits with, does not import it back)."""

    @property
    def internals(self) -> _Known: ...
    def read(self) -> RegistrySnapshot: ...
    def commit_changes(self, changes: Sequence[Change]) -> CommitResult: ...
    def _new_commit_id(self) -> str: ...
    def _hedged_write(self, put: Callable[[], PutResult]) -> PutResult: ...


class CommitBuilder:
    """One commit being built (the module docstring has the order of the steps). ``fence``
    is a :class:`Fence` or ``(name, token)``; ``schema_mode`` and ``properties`` are taken
    as given (the operations check them first)."""

    def __init__(
        self,
        registry: Committing,
        dataset: str,
        operation: str,
        *,
        commit_id: str | None = None,
        fence: Fence | tuple[str, int] | None = None,
        schema: pa.Schema | None = None,
        partition_by: Sequence[str] | None = None,
        schema_mode: str | None = None,
        properties: Mapping[str, str | None] | None = None,
    ) -> None:
        if properties:
            check_property_limits(properties)  # what the change is by itself
        self.registry = registry
        self.change = Change(
            dataset=dataset,
            commit_id=(
                validate_commit_id(commit_id)
                if commit_id is not None
                else registry._new_commit_id()
            ),
            schema=schema,
            partition_by=tuple(partition_by) if partition_by is not None else None,
            properties=properties,
            fence=Fence(*fence) if isinstance(fence, tuple) else fence,
            operation=operation,
            generated_id=commit_id is None,
            schema_mode=schema_mode,
        )
        #: The changes to other datasets in the same commit (:meth:`also`).
        self.others: list[Change] = []

    # -- what the id is bound to -----------------------------------------------------------

    def bind(
        self,
        request: Mapping[str, Any],
        *,
        table: pa.Table | None = None,
        files: Iterable[DataFile] | None = None,
    ) -> None:
        """Bind the commit id to the operation's ``request`` and the rows it writes
        (``table``) or the contents of the files it commits (``files``: an engine's, which
        the catalog commits under an id that names them)."""
        self._set(digest=change_digest(request, table=table, files=files))

    def bind_to_files(self) -> None:
        """The binding of a commit of files written elsewhere (``registry.commit``, the
        workers' files of ``lakelock.dask`` and ``lakelock.spark``), once what it adds and
        removes is given: to what it adds (summarised: rows and statistics, not the files'
        names, bytes or split), removes and declares (:func:`summary_digest`)."""
        self._set(digest=summary_digest(self.change))

    # -- before the first data PUT ---------------------------------------------------------

    def check(
        self, *, plan: bool = False, spans: Sequence[str] = ()
    ) -> RegistrySnapshot | CommitResult:
        """The earlier commit if the commit id is recorded for this very change (a re-run:
        report it, write nothing); :class:`~lakelock.errors.CommitIdReusedError` if it is
        recorded for another (a root's record of another set of datasets than this commit's
        dataset and ``spans``, the datasets :meth:`also` will add: a partition move's
        source); the error :func:`~lakelock._registry._changes.check_fits`
        raises if the partition columns or schema do not fit the dataset, and
        :class:`~lakelock.errors.InvalidArgumentError` if its fence is a path-lock grant's
        that writes nothing (:func:`~lakelock._registry._changes.check_fence_writes`) or a
        lease's with a token the lease never issued; else
        the registry it was checked against. A caller-chosen id is looked up in a fresh
        read; a generated one is nobody else's, and the registry this process knows will do
        (no request: the commit loop checks everything again on the current version), unless
        the operation plans on it (``plan``: what to delete, compact or move): then a fresh
        read."""
        change, registry = self.change, self.registry
        check_fence_writes(change, before_files=True)  # a read grant's fence: no PUT
        registry.internals.check_lease_token(change)  # a token its lease never issued: no PUT
        chosen = not change.generated_id
        fresh = chosen or plan
        snapshot = registry.read() if fresh else registry.internals.known()
        found = None
        if chosen:
            found = registry.internals.recorded_commit(
                change.commit_id, change.dataset, snapshot=snapshot
            )
        if found is None:
            # Refused whatever commits first (partition columns, schema): refused before the
            # first data PUT, so a refused commit leaves no files behind. A refusal by the
            # registry this process knew is confirmed on the current one (another process may
            # have merged the very column this change brings). The registry this process knew
            # is checked at no request where it can be: against an earlier version of the
            # dataset, if that is what this process holds, rather than a GET of this one.
            if fresh:
                dataset = snapshot.datasets.get(change.dataset)
            else:
                dataset = dataset_for_checks(snapshot.datasets, change.dataset)
            if change.properties and dataset is not None:
                check_property_limits(change.properties, dataset.properties)
            try:
                check_fits(dataset, change)
            except SchemaMismatchError:
                if fresh:
                    raise
                snapshot = registry.read()
                check_fits(snapshot.datasets.get(change.dataset), change)
            return snapshot
        reused = reused_commit_id(found, change)
        if reused is None and isinstance(found, CommitRecord):
            reused = other_datasets(found, change, (change.dataset, *spans))
        if reused is not None:
            raise reused
        version = found.version if isinstance(found, CommitRecord) else int(found["version"])
        return CommitResult(version, change.commit_id, already_committed=True)

    def fits(self, dataset: DatasetState | None) -> None:
        """Refuse now what the commit loop would refuse whatever commits first (partition
        columns, schema), against ``dataset`` as a snapshot just read holds it."""
        check_fits(dataset, self.change)

    def empty(self, version: int) -> CommitResult:
        """The result of a commit with nothing to commit: no registry version is made
        (``version`` is the one read); a generated id was nobody's, and is not reported."""
        commit_id = "" if self.change.generated_id else self.change.commit_id
        return CommitResult(version, commit_id, attempts=0, empty=True)

    # -- what it commits -------------------------------------------------------------------

    def declare(
        self,
        *,
        schema: pa.Schema | None = None,
        partition_by: Sequence[str] | None = None,
        schema_mode: str | None = None,
    ) -> None:
        """The schema, partition columns and schema mode, once known (after the source of a
        move is read, or the engine's tasks wrote the files); those not given stay."""
        change = self.change
        self._set(
            schema=schema if schema is not None else change.schema,
            partition_by=tuple(partition_by) if partition_by is not None else change.partition_by,
            schema_mode=schema_mode if schema_mode is not None else change.schema_mode,
        )

    def add(self, files: Iterable[DataFile], *, existing: bool = False) -> None:
        """Files the commit adds. ``existing``: written before this commit (a
        ``registry.commit``), so perhaps live in the dataset already, which the commit loop
        checks (FORMAT.md rule 14); lakelock's own operations add files they have just
        created by create-only PUTs, which cannot be."""
        added = (*self.change.add, *files)
        self._set(
            add=added, existing_files=self.change.existing_files or (existing and bool(added))
        )

    def remove(self, keys: Iterable[str] = (), *, partitions: Iterable[str] = ()) -> None:
        """Files the commit removes (registered keys), and partitions it removes whole as
        they are when it applies (``""``: all of them)."""
        self._set(
            remove=(*self.change.remove, *keys),
            remove_partitions=(*self.change.remove_partitions, *partitions),
        )

    def restore(
        self, state: DatasetState, *, until: float | None, since: float | None = None
    ) -> None:
        """Make ``state`` (an earlier version of the dataset) current again; ``until``: when
        that version leaves the retention, ``since``: when it was replaced (its successor's
        commit time, from which the retention runs) (FORMAT.md rule 9)."""
        self._set(restore=state, restore_until=until, restore_since=since)

    def planned_on(self, version: int | None) -> None:
        """Apply only while the dataset is still at ``version`` (0: while it does not exist;
        ``None``: at any version), else be refused (FORMAT.md rule 15): a commit planned on
        what it read, as the catalog's engines plan theirs."""
        self._set(on_version=version)

    def also(self, dataset: str, *, remove: Sequence[str] = (), fence: Fence | None = None) -> None:
        """A change to another dataset in the same commit, all or nothing: it shares the
        commit id, the operation and the digest."""
        change = self.change
        self.others.append(
            Change(
                dataset=dataset,
                commit_id=change.commit_id,
                remove=tuple(remove),
                fence=fence,
                operation=change.operation,
                generated_id=change.generated_id,
                digest=change.digest,
            )
        )

    def commit(self) -> CommitResult:
        """Commit what was built, in one registry update."""
        earlier = self._files_fit()
        if earlier is not None:
            return earlier
        return self.registry.commit_changes([self.change, *self.others])

    def _files_fit(self) -> CommitResult | None:
        """Refuse files a read of the dataset would fail on, written for another schema
        (``registry.commit`` of a worker's files: :func:`fitted_schema`), and declare the
        schema they were judged by, which the commit loop judges again on the dataset as it
        is when the commit applies. They are judged by the dataset as this process knows it,
        read anew if that does not settle it (:func:`judged_by`: it knows no schema, or one
        lacking a column a file holds, which another process may have merged since). Files
        refused under a commit id recorded for this change are a re-run: the earlier commit
        is returned, as the commit loop would report it for files without a schema."""
        change, registry = self.change, self.registry
        if all(f.schema is None for f in change.add):
            return None
        dataset = dataset_for_checks(registry.internals.known().datasets, change.dataset)
        held = files_held(change)
        if not judged_by(change, dataset, held=held):
            dataset = registry.read().datasets.get(change.dataset)
        try:
            self._set(schema=fitted_schema(change, dataset, held=held))
        except SchemaMismatchError:
            # The dataset may have changed since the files landed (a restore, a column
            # merged): a retried job hears its commit reported, not refused.
            if change.generated_id:
                raise
            found = registry.internals.recorded_commit(
                change.commit_id, change.dataset, snapshot=registry.read()
            )
            earlier = refused_rerun(change, found)
            if earlier is None:
                raise
            return earlier
        return None

    def _set(self, **fields: Any) -> None:
        self.change = replace(self.change, **fields)
        self.others = [replace(o, digest=self.change.digest) for o in self.others]


def refused_rerun(
    change: Change, found: CommitRecord | Mapping[str, Any] | None
) -> CommitResult | None:
    """The answer to a commit whose files no longer fit the dataset (:func:`fitted_schema`
    refused them) under a caller's id: the earlier commit (``already_committed``) if
    ``found``, what the registry recorded of the id (``recorded_commit``), is this very
    change, a re-run whose first run landed before the dataset changed (a restore, a
    column merged); ``None``: the refusal stands (a generated id, an id not recorded, or
    recorded for another change). The simulator's writers answer it so too
    (:func:`lakelock._sim._ops.files_fit`)."""
    if change.generated_id or found is None or reused_commit_id(found, change) is not None:
        return None
    if isinstance(found, CommitRecord) and other_datasets(found, change, (change.dataset,)):
        return None  # recorded for a commit spanning other datasets: another change
    version = found.version if isinstance(found, CommitRecord) else int(found["version"])
    return CommitResult(version, change.commit_id, already_committed=True)


#: The data columns files hold, each with the first file holding it (:func:`held_columns`).
Held = dict[str, tuple[int, pa.Field]]


def files_held(change: Change) -> Held:
    """The data columns ``change``'s typed files hold (:func:`held_columns`, in the order of
    its typed files): what :func:`judged_by` and :func:`fitted_schema` judge, computed once
    by a caller of both."""
    return held_columns((f.schema, f.partition_path) for f in change.add if f.schema is not None)


def judged_by(change: Change, dataset: DatasetState | None, *, held: Held | None = None) -> bool:
    """Whether ``dataset`` (as a process knows it, perhaps stale) settles how
    :func:`fitted_schema` judges ``change``'s files: it, or the schema the change declares,
    has a schema holding every column the files hold (``held``: :func:`files_held`, if the
    caller has it). Else the dataset is read anew."""
    target = _joined(change.schema, dataset)
    if target is None:
        return False
    return (files_held(change) if held is None else held).keys() <= set(target.names)


def fitted_schema(
    change: Change, dataset: DatasetState | None, *, held: Held | None = None
) -> pa.Schema | None:
    """The schema ``change`` declares once its typed files (``DataFile.schema``: written
    by ``write``, in a worker perhaps) are judged against ``dataset``, the dataset as last
    read; :class:`~lakelock.errors.SchemaMismatchError` for a file a read of the dataset
    would fail on, nothing committed (docs/FORMAT.md, "File statistics" and after).

    The files are judged by the schema the change declares, with the dataset's columns it
    leaves out (they stay, and are read from every file holding them); a dataset without
    a schema, where none is declared, takes the files' (each column in the first file's
    type, partition columns included, as a table makes a dataset's). A column a file holds
    that this schema lacks is refused unless the change merges it
    (``schema_mode="merge"``: it joins the schema, in the first file's type): a column the
    dataset lacks is not read today, but would be once another process merged it in a
    type that cannot hold the file's. A column in a type the schema's cannot hold (a string
    for a long: :func:`~lakelock._readable.unholdable`) is refused. A file's partition
    columns (read from its path) and the columns its pandas metadata names as the frame's
    index (not data) are never judged. The schema returned is the one judged by (of a
    declaration: what it declares, the columns merged, and those of the dataset's it
    leaves out that a file holds), so the commit loop judges it again on the current
    dataset (types never change, a column the dataset lacks is merged or refused): a
    column merged, or a restore, after ``dataset`` was read cannot slip a file past the
    check. ``change.schema`` if it adds no typed file. ``held``: :func:`files_held`, if the
    caller has it."""
    typed = [(f, f.schema) for f in change.add if f.schema is not None]
    if not typed:
        return change.schema
    target = _joined(change.schema, dataset)
    if target is None:
        made = held_columns(((s, f.partition_path) for f, s in typed), partition_columns=True)
        target = pa.schema([column.with_nullable(True) for _, column in made.values()])
    if held is None:
        held = files_held(change)
    new = [
        (name, place, column) for name, (place, column) in held.items() if name not in target.names
    ]
    if new and change.schema_mode != "merge":
        name, place, _ = new[0]
        raise SchemaMismatchError(
            f"{typed[place][0].key} holds column {name!r}, which dataset {change.dataset!r} "
            "lacks: pass schema_mode='merge' to add it to the dataset's schema (a column "
            "merged later in a type that cannot hold the file's would make every read of "
            "the dataset fail); nothing was committed",
            dataset=change.dataset,
            commit_id=change.commit_id,
        )
    merged = [column.with_nullable(True) for _, _, column in new]
    target = pa.schema([*target, *merged], metadata=target.metadata)
    judged: set[Hashable] = set()
    for f, schema in typed:
        shape = file_shape(schema, f.partition_path)
        if shape in judged:
            continue  # judged already: a file of one shape passes or fails as the first
        judged.add(shape)
        found = unholdable(schema, target, f.partition_path)
        if found is not None:
            name, wanted = found
            raise SchemaMismatchError(
                f"{f.key} holds column {name!r} as {schema.field(name).type}: dataset "
                f"{change.dataset!r} has it as {wanted}, which cannot hold it, so every "
                "read of the dataset would fail on it; nothing was committed",
                dataset=change.dataset,
                commit_id=change.commit_id,
            )
    declared = change.schema
    if declared is None:
        return target
    # What the caller declared, with the dataset's columns it leaves out that the files hold
    # (judged again by the commit loop): those it leaves out that no file holds stay left
    # out, so a required one is refused there as for any declaration.
    held_too = [c for c in target if declared.get_field_index(c.name) < 0 and c.name in held]
    return pa.schema([*declared, *held_too], metadata=declared.metadata)


def _joined(declared: pa.Schema | None, dataset: DatasetState | None) -> pa.Schema | None:
    """The schema ``declared``, then the columns of ``dataset``'s it leaves out; None if
    neither is known."""
    current = None if dataset is None else dataset.schema
    if declared is None or current is None:
        return declared if current is None else current
    kept = (c for c in current if declared.get_field_index(c.name) < 0)
    return pa.schema([*declared, *kept], metadata=declared.metadata)


def summary_digest(change: Change) -> str:
    """The digest of a commit of files written elsewhere (:mod:`lakelock._digest`, the
    ``summary`` kind):
    of what ``change`` adds, removes (keys and partitions) and declares (``partition_by``,
    properties)."""
    request: dict[str, Any] = {"remove": sorted(change.remove)}
    if change.remove_partitions:
        request["remove_partitions"] = sorted(change.remove_partitions)
    if change.partition_by is not None:
        request["partition_by"] = list(change.partition_by)
    if change.properties is not None:
        request["properties"] = dict(change.properties)
    return change_digest(request, summary=change.add)


def hedged_writes(registry: Committing) -> Callable[[Callable[[], PutResult]], PutResult]:
    """How a lake sends the data files it writes: through the registry's hedging, as its own
    writes are (docs/FORMAT.md, "Scheduling" 7), which learns how long this process's writes
    usually take."""
    return registry._hedged_write
