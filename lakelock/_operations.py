"""The table operations ETL jobs expect: append, overwrite, delete, compact -- each one
registry commit -- as methods of :class:`~lakelock.Lake` (:class:`TableOperations`, its base).

========== ======================================================= =========================
operation  what the commit does                                    beside concurrent writers
========== ======================================================= =========================
append     adds the new files                                      every commit's files are
                                                                   kept
overwrite  adds the new files and removes every file of the        the replaced partitions
           replaced partitions (those the table has rows for, or   lose whatever they hold
           the ones given, or all), as the registry holds them     when the commit applies,
           when the commit applies                                 appends that landed first
                                                                   included; others keep
delete     removes every file of the matching partitions, as the   as overwrite
           registry holds them when the commit applies
compact    adds merged files and removes exactly the small files   appends to any partition
           it read                                                 survive; a commit that
                                                                   removed one of those files
                                                                   first makes it a conflict
========== ======================================================= =========================

A commit is atomic for readers: a snapshot shows the dataset wholly before or wholly after.
Every operation takes ``commit_id`` (a re-run of the same change with a recorded id does
nothing and reports the earlier commit; the id recorded for another change is
:class:`~lakelock.errors.CommitIdReusedError`: checked before the first data PUT by
:meth:`~lakelock._registry._builder.CommitBuilder.check`, which builds every commit) and
``fence`` (a lease's or path lock's fencing token, checked by the registry), and records its
name in the commit log (``lakelock registry log``).

Which partitions: a partition is a path (``"year=2024/month=1"``) or a mapping as
:meth:`~lakelock.Lake.read` takes (``{"year": 2024, "month": 1}``). For delete and compact
(and overwrite's ``partitions``) a leading part also works (``"year=2024"``, ``{"year":
2024}``: every month of 2024). ``delete(where=...)`` takes a pyarrow expression over the
partition columns (``pc.field("year") < 2020``), evaluated on the partitions the registry
holds when the delete is planned; it removes those partitions whole. A partition created
after that evaluation is not deleted: hold the path lock on the dataset to exclude writers.

Files that leave the registry are not deleted: readers of older snapshots may still read
them; ``vacuum`` removes them once no retained snapshot needs them. Files written for a
commit that then failed are orphans for ``vacuum`` too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Literal, TypedDict, Unpack

import pyarrow as pa
import pyarrow.compute as pc

from lakelock._datafile import DataFile
from lakelock._datasets import Progress, read_files, table_schema, write_table
from lakelock._names import (
    PartitionSpec,
    is_utf8,
    parse_partition_path,
    parse_partition_value,
    partition_columns,
    partition_path,
    partition_prefix,
    validate_dataset_name,
    validate_partition_path,
)
from lakelock._registry import CommitResult, DatasetState, Fence, RegistrySnapshot
from lakelock._registry._builder import CommitBuilder, hedged_writes
from lakelock._registry._changes import SchemaMode, checked_schema_mode
from lakelock.errors import DatasetNotFoundError, InvalidArgumentError, InvalidNameError

if TYPE_CHECKING:
    from lakelock._registry import Registry
    from lakelock._s3 import ObjectStore

__all__ = [
    "DEFAULT_TARGET_FILE_SIZE",
    "SchemaMode",
    "TableOperations",
    "WriteOptions",
    "checked_schema_mode",
]

#: Compaction's default output size: big enough for efficient scans, small enough to
#: parallelise (engines commonly aim at 128 MiB to 1 GiB).
DEFAULT_TARGET_FILE_SIZE = 128 * 1024 * 1024


class WriteOptions(TypedDict, total=False):
    """Options of :meth:`~lakelock.Lake.append` and :meth:`~lakelock.Lake.overwrite`."""

    #: The partition columns, outermost first (a dataset's never change; default, or
    #: ``None``: none, not partitioned).
    partition_by: Sequence[str] | None
    #: What to do with columns the dataset lacks (:data:`SchemaMode`).
    schema_mode: SchemaMode
    #: Properties to set (``None`` removes one) in the same commit: see ``set_properties``.
    properties: Mapping[str, str | None] | None
    #: Makes the commit idempotent: a re-run of the same change commits nothing twice.
    commit_id: str | None
    #: A lease's or path lock's fencing token, checked by the registry.
    fence: Fence | tuple[str, int] | None
    #: The data files' name in each partition (default: a generated, unique one): a
    #: caller-given name makes the upload idempotent (:mod:`lakelock._datasets`): the re-run
    #: of a run refused after its upload commits the files it left.
    file_name: str | None
    #: ``progress(done, total)``, called as the files are uploaded (bytes).
    progress: Progress | None


#: A column name no partition column can have (they never start with "_").
_INDEX = "__lakelock_index"


class TableOperations:
    """The table operations of a :class:`~lakelock.Lake` (its base class), on its
    ``registry`` and ``store``: write, append, overwrite, delete, compact."""

    registry: Registry
    store: ObjectStore

    def write(
        self,
        dataset: str,
        table: pa.Table,
        *,
        partition_by: Sequence[str] | None = (),
        file_name: str | None = None,
        progress: Progress | None = None,
    ) -> list[DataFile]:
        """Write ``table`` as write-once parquet files (one per partition), not yet visible:
        commit them with ``registry.commit`` (or use :meth:`append`)."""
        return write_table(
            self.store,
            dataset,
            table,
            partition_by=partition_by,
            file_name=file_name,
            progress=progress,
            hedge=hedged_writes(self.registry),
        )

    def append(
        self, dataset: str, table: pa.Table, **options: Unpack[WriteOptions]
    ) -> CommitResult:
        """Write ``table`` and commit its files in one registry update (``options``:
        :class:`WriteOptions`). A column the dataset lacks is refused
        (:class:`~lakelock.errors.SchemaMismatchError`) unless ``schema_mode="merge"`` adds it
        to the dataset's schema; a nullable column the table lacks reads as null for its rows
        (the dataset keeps it); types never change. What does not fit is refused before any
        file is written.

        With a ``commit_id`` that is already recorded for this change (same dataset,
        operation and rows: see :mod:`lakelock._digest`), nothing is written and the earlier
        commit is reported (``already_committed``): a re-run pipeline appends once; recorded
        for another change, it is :class:`~lakelock.errors.CommitIdReusedError`. An empty
        table (no rows) is checked like any other (its commit id, partition columns and
        column names; not its column types, null in a table built from no rows), then
        appends nothing: no file, no registry version; the result says so (``empty``,
        ``version`` the current one).
        """
        return self._put("append", dataset, table, None, **options)

    def overwrite(
        self,
        dataset: str,
        table: pa.Table,
        *,
        partitions: Iterable[PartitionSpec] | Literal["all"] | None = None,
        **options: Unpack[WriteOptions],
    ) -> CommitResult:
        """Replace partitions by ``table`` in one commit: by default the partitions
        ``table`` has rows for, else those given (paths, mappings or leading parts of them)
        or ``"all"`` of the dataset (other ``options``: :class:`WriteOptions`, as for
        :meth:`append`). Whatever those partitions hold when the commit applies is removed,
        appends that landed just before included. Re-run with the same ``commit_id`` (and the
        same rows), it does nothing (``already_committed``): the idempotent way to re-run
        yesterday's job.

        With partitions given, each row of ``table`` must fall in one of them
        (:class:`InvalidNameError` otherwise, before anything is written). An empty table
        with ``partitions=None`` or ``[]`` commits nothing (``result.empty``); with
        partitions given, it empties them.
        """
        return self._put("overwrite", dataset, table, partitions, **options)

    def _put(
        self,
        operation: Literal["append", "overwrite"],
        dataset: str,
        table: pa.Table,
        partitions: Iterable[PartitionSpec] | Literal["all"] | None,
        *,
        partition_by: Sequence[str] | None = (),
        schema_mode: SchemaMode = None,
        properties: Mapping[str, str | None] | None = None,
        commit_id: str | None = None,
        fence: Fence | tuple[str, int] | None = None,
        file_name: str | None = None,
        progress: Progress | None = None,
    ) -> CommitResult:
        """Append or overwrite: check ``table`` and the options, plan the commit, write the
        files, commit them (and for an overwrite, remove the replaced partitions)."""
        dataset = validate_dataset_name(dataset)
        columns = partition_columns(partition_by)
        schema = table_schema(table, columns, dataset)
        replaced: tuple[str, ...] | None = None
        if partitions == "all":
            replaced = ("",)
        elif partitions is not None:
            replaced = tuple(partition_prefix(columns, p) for p in _specs(partitions))
        # An empty append commits nothing, so its columns' types are not held against the
        # dataset's (a table built from no rows has null-typed columns); its commit id and
        # partition columns are.
        nothing = operation == "append" and table.num_rows == 0
        commit = CommitBuilder(
            self.registry,
            dataset,
            operation,
            commit_id=commit_id,
            fence=fence,
            schema=None if nothing else schema,
            partition_by=columns,
            schema_mode=checked_schema_mode(schema_mode),
            properties=_properties(properties),
        )
        commit.bind(
            _request(partition_by=columns, replaced=_replaced_set(replaced), properties=properties),
            table=table,
        )
        planned = commit.check()
        if isinstance(planned, CommitResult):
            return planned
        if not replaced and table.num_rows == 0:
            # An empty append or an overwrite of nothing (no rows, and no partition named to
            # replace: it would change nothing), checked like any other (its commit id,
            # partition columns and schema, above): an id recorded for other rows is
            # CommitIdReusedError, not "nothing was committed under it".
            return commit.empty(planned.version)
        if replaced is not None:
            outside = [p for p in _table_partitions(table, columns) if not _covered(p, replaced)]
            if outside:  # checked before writing: bad input writes nothing
                raise InvalidNameError(
                    outside[0],
                    f"rows of partition {outside[0]!r} fall outside the partitions being "
                    f"replaced {list(replaced)}",
                )
        files = self.write(
            dataset,
            table,
            partition_by=columns,
            file_name=file_name,
            progress=progress,
        )
        # A caller-given name may be a file an earlier run of this job wrote (and perhaps
        # committed): the commit checks it is not live already (FORMAT.md rule 14).
        commit.add(files, existing=file_name is not None)
        if operation == "overwrite":
            if replaced is None:
                replaced = tuple(dict.fromkeys(f.partition_path for f in files))
            commit.remove(partitions=replaced)
        return commit.commit()

    def delete(
        self,
        dataset: str,
        *,
        partitions: Iterable[PartitionSpec] | Literal["all"] | None = None,
        where: pc.Expression | None = None,
        commit_id: str | None = None,
        fence: Fence | tuple[str, int] | None = None,
    ) -> CommitResult:
        """Drop partitions in one commit: those named (paths, mappings, leading parts, or
        ``"all"``) and those whose values satisfy ``where``, a pyarrow expression over the
        partition columns (``pc.field("year") < 2020``). Nothing matching commits nothing
        (``result.empty``). Files stay for readers of older snapshots until ``vacuum``."""
        dataset = validate_dataset_name(dataset)
        if partitions is None and where is None:
            raise InvalidArgumentError(
                None, "say which partitions: partitions=... and/or where=...", what="delete"
            )
        specs = None if partitions is None or partitions == "all" else _specs(partitions)
        commit = CommitBuilder(self.registry, dataset, "delete", commit_id=commit_id, fence=fence)
        commit.bind(
            {
                "partitions": "all" if partitions == "all" else _bound(specs),
                "where": None if where is None else str(where),
            }
        )
        snapshot = commit.check(plan=True)
        if isinstance(snapshot, CommitResult):
            return snapshot
        state = _dataset(snapshot, dataset)
        removed: list[str] = []
        if partitions == "all":
            removed.append("")
        elif specs is not None:
            removed += [partition_prefix(state.partition_by, p) for p in specs]
        if where is not None:
            removed += _matching(state, where)
        removed = list(dict.fromkeys(removed))
        if not any(_covered(path, removed) for path in state.partitions):
            return commit.empty(snapshot.version)
        commit.remove(partitions=removed)
        return commit.commit()

    def compact(
        self,
        dataset: str,
        *,
        partitions: Iterable[PartitionSpec] | None = None,
        target_file_size: int = DEFAULT_TARGET_FILE_SIZE,
        commit_id: str | None = None,
        fence: Fence | tuple[str, int] | None = None,
        progress: Progress | None = None,
    ) -> CommitResult:
        """Merge small files (of ``partitions``, default all) into files of about
        ``target_file_size`` bytes, in one commit that removes exactly the files it read:
        appends running meanwhile, to these partitions or others, are kept. Files of at
        least that size are left alone; so is a partition with fewer than two small files.
        Nothing to merge commits nothing (``result.empty``). ``progress(done, total)``
        counts the groups of files merged."""
        dataset = validate_dataset_name(dataset)
        if (
            isinstance(target_file_size, bool)
            or not isinstance(target_file_size, int)
            or target_file_size < 1
        ):
            raise InvalidArgumentError(
                target_file_size, "a positive byte count", what="target_file_size"
            )
        specs = None if partitions is None else _specs(partitions)
        commit = CommitBuilder(self.registry, dataset, "compact", commit_id=commit_id, fence=fence)
        commit.bind({"partitions": _bound(specs), "target_file_size": target_file_size})
        snapshot = commit.check(plan=True)
        if isinstance(snapshot, CommitResult):
            return snapshot
        state = _dataset(snapshot, dataset)
        wanted = None
        if specs is not None:
            prefixes = [partition_prefix(state.partition_by, p) for p in specs]
            wanted = [path for path in state.partitions if _covered(path, prefixes)]
        files = self.registry.files(dataset, snapshot=snapshot, partitions=wanted)
        groups = _groups(files, target_file_size)
        if not groups:
            return commit.empty(snapshot.version)
        for number, group in enumerate(groups, start=1):
            rows = read_files(
                self.store, group, schema=state.schema, partition_by=state.partition_by
            )
            commit.add(self.write(dataset, rows, partition_by=state.partition_by))
            if progress is not None:
                progress(number, len(groups))
        commit.remove(f.key for group in groups for f in group)
        return commit.commit()

    def set_properties(
        self,
        dataset: str,
        properties: Mapping[str, str | None],
        *,
        commit_id: str | None = None,
        fence: Fence | tuple[str, int] | None = None,
    ) -> CommitResult:
        """Set (or, with ``None``, remove) properties of ``dataset`` in one commit: free-form
        string metadata (an owner, a source, a contract version) kept with each version and
        read back as ``lake.registry.read().datasets[name].properties``. Properties can also
        go with the data they describe: ``append``/``overwrite`` take ``properties=``."""
        dataset = validate_dataset_name(dataset)
        checked = _properties(properties)
        if not checked:
            raise InvalidArgumentError(
                properties, "say which properties to set or remove", what="properties"
            )
        commit = CommitBuilder(
            self.registry,
            dataset,
            "properties",
            commit_id=commit_id,
            fence=fence,
            properties=checked,
        )
        commit.bind({"properties": checked})
        snapshot = commit.check(plan=True)
        if isinstance(snapshot, CommitResult):
            return snapshot
        _dataset(snapshot, dataset)  # properties of a dataset that exists
        return commit.commit()


# -- helpers ----------------------------------------------------------------------------------


def _request(**parts: object) -> dict[str, object]:
    """What an operation asks for, as its digest covers it: parts not given are left out, so
    a digest does not change when an operation gains an option nobody used."""
    return {name: value for name, value in parts.items() if value is not None}


def _properties(properties: Mapping[str, str | None] | None) -> dict[str, str | None] | None:
    """Properties as a commit records them: names and values are strings (``None`` removes
    a property)."""
    if properties is None:
        return None
    if not isinstance(properties, Mapping):
        raise InvalidArgumentError(properties, "a mapping of names to strings", what="properties")
    for name, value in properties.items():
        if not isinstance(name, str) or not name or not (value is None or isinstance(value, str)):
            raise InvalidNameError(
                name, "a property is a non-empty name with a string value (None removes it)"
            )
        if not is_utf8(name) or not (value is None or is_utf8(value)):
            # The commit records them as JSON, which holds UTF-8 text only.
            raise InvalidNameError(name, "a property's name and value are UTF-8 encodable")
    return dict(properties)


def _dataset(snapshot: RegistrySnapshot, dataset: str) -> DatasetState:
    state = snapshot.datasets.get(dataset)
    if state is None:
        raise DatasetNotFoundError(dataset)
    return state


def _specs(partitions: Iterable[PartitionSpec]) -> list[PartitionSpec]:
    if isinstance(partitions, str | Mapping):
        raise InvalidArgumentError(partitions, "a list of paths or mappings", what="partitions")
    return list(partitions)


def _bound(specs: list[PartitionSpec] | None) -> list[str] | None:
    """The partitions a commit id is bound to (:mod:`lakelock._digest`): the paths they name,
    as the registry names partitions (a mapping's values spelt as a partition path spells
    them), each once, in order. ``{"year": 2024}``, ``{"year": "2024"}`` and ``"year=2024"``
    are one request, so a retry spelling them another way is a retry; values that name
    other partitions (an aware datetime, and its ISO text in its own offset) are another
    request."""
    if specs is None:
        return None
    return sorted({_path_of(spec) for spec in specs})


def _replaced_set(replaced: tuple[str, ...] | None) -> list[str] | None:
    """The partitions an overwrite replaces as its commit id is bound to them
    (:mod:`lakelock._digest`): each canonical path once, sorted, as :func:`_bound` binds a
    delete's. The order they were named in and a path named twice change nothing the
    overwrite does, so a retry naming them so is that retry."""
    return None if replaced is None else sorted(set(replaced))


def _path_of(spec: PartitionSpec) -> str:
    if isinstance(spec, str):
        return validate_partition_path(spec)
    if not isinstance(spec, Mapping):
        raise InvalidNameError(spec, "a partition is a path or a mapping of columns to values")
    return partition_path(spec.items())


def _table_partitions(table: pa.Table, columns: Sequence[str]) -> list[str]:
    """The partition paths ``table``'s rows fall in."""
    if not columns or table.num_rows == 0:
        return [""] if table.num_rows else []
    keys = table.select(list(columns))
    for i, field in enumerate(keys.schema):  # group on plain values, not dictionary indices
        if pa.types.is_dictionary(field.type):
            keys = keys.set_column(i, field.name, keys.column(i).cast(field.type.value_type))
    groups = keys.group_by(list(columns), use_threads=False).aggregate([])
    return sorted(
        partition_path((column, groups.column(column)[i]) for column in columns)
        for i in range(groups.num_rows)
    )


def _covered(path: str, prefixes: Iterable[str]) -> bool:
    return any(not p or path == p or path.startswith(f"{p}/") for p in prefixes)


def _matching(state: DatasetState, where: pc.Expression) -> list[str]:
    """The partitions of ``state`` whose typed values satisfy ``where``."""
    if not state.partition_by or state.schema is None:
        raise InvalidArgumentError(
            where, f"dataset {state.name!r} has no partition columns to filter", what="where"
        )
    paths = sorted(state.partitions)
    fields = [state.schema.field(column) for column in state.partition_by]
    values = {
        field.name: pa.array(
            [
                parse_partition_value(dict(parse_partition_path(path))[field.name], field.type)
                for path in paths
            ],
            type=field.type,
        )
        for field in fields
    }
    index = pa.array(range(len(paths)), pa.int64())
    table = pa.table({**values, _INDEX: index})
    try:
        kept = table.filter(where)[_INDEX].to_pylist()
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as error:
        # Arrow names the table it evaluated (with an internal column): say it in our terms.
        missing = re.search(r"FieldRef\.Name\((.*?)\)", str(error))
        detail = (
            f"{missing[1]!r} is not one of them"
            if missing
            else str(error).splitlines()[0].replace(_INDEX, "")
        )
        raise InvalidArgumentError(
            str(where),
            f"an expression over the partition columns {list(state.partition_by)}: {detail}",
            what="where",
        ) from error
    return [paths[i] for i in kept]


def _groups(files: Sequence[DataFile], target: int) -> list[list[DataFile]]:
    """Per partition, runs of small files (in key order) adding up to about ``target``
    bytes; only runs of two files or more are worth merging."""
    by_partition: dict[str, list[DataFile]] = {}
    for f in files:
        if f.size < target:
            by_partition.setdefault(f.partition_path, []).append(f)
    groups: list[list[DataFile]] = []
    for small in by_partition.values():
        current: list[DataFile] = []
        size = 0
        for f in sorted(small, key=lambda f: f.key):
            if current and size + f.size > target:
                groups.append(current)
                current, size = [], 0
            current.append(f)
            size += f.size
        groups.append(current)
    return [group for group in groups if len(group) > 1]
