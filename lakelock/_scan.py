"""``lake.scan``: one dataset of one registry snapshot, read by pyarrow, DuckDB, Polars or
pandas.

```python
import polars as pl

lake.append("sales", pa.table({"id": [1, 2], "amount": [9.5, 3.0], "day": [14, 15]}),
            partition_by=["day"])
scan = lake.scan("sales", columns=["id", "amount", "day"], filter=pc.field("day") >= 15)
scan.files()                                   # the snapshot's files that can match
table = scan.to_arrow()                        # fetched in parallel, checksums verified
con = scan.to_duckdb("sales")                  # a DuckDB view over the same files
con.sql("SELECT day, sum(amount) FROM sales GROUP BY day")
frame = scan.to_polars().group_by("day").agg(pl.col("amount").sum()).collect()
```

**Exactly the snapshot's files.** A scan reads the files the snapshot's manifests name —
never a listing — so orphans, files of failed commits and files still being written are
invisible to every engine. The snapshot is resolved once, when the scan is made (by
:meth:`Lake.scan <lakelock.Lake.scan>`); the scan's readers then all see that one version.

**Typed partition columns.** Partition values live in the keys (``day=15/``), not in the
files; every engine gets them typed by the dataset's schema (pyarrow from each fragment's
partition expression, DuckDB through ``hive_types``, Polars through ``hive_schema``).

**Columns.** ``columns=`` names the columns returned, in that order; naming none is refused
(:class:`~lakelock.errors.InvalidArgumentError`): a table of no columns loses its row count in
every engine, so a count taken that way would read 0.

**Pruning before any GET.** ``partitions=`` picks partitions by name; ``filter`` (a
``pyarrow.compute.Expression``) is simplified against each partition's values and partitions
it cannot match are dropped, both before any request for data. A filter that pins every
partition column to a few values (``==``, ``isin``, ``|`` of those) is looked up in the
dataset's index as those partitions, as ``partitions=`` is, instead of reading the whole
index (:mod:`lakelock._pinning`); any other filter reads the whole index but the manifests of
only the partitions it admits. So are files whose column
statistics rule the filter out (a bound, an all-null column: :mod:`lakelock._stats`), which
lakelock records for every file it writes. A filter over partition
columns only is decided that way exactly; a filter that also reads data columns is applied to
the rows as well: by pyarrow in :meth:`Scan.to_arrow` and :meth:`Scan.to_pyarrow_dataset`,
and, for DuckDB and Polars, by handing them the filtered pyarrow dataset (write such
conditions in SQL or Polars instead to have the engine read the files itself).

**Integrity.** :meth:`Scan.to_arrow` fetches each file whole and checks it against the
checksum the registry recorded. The engines read byte ranges of the files directly and
cannot check a whole-file checksum; they rely on S3's own transport checks.

**Credentials.** pyarrow, DuckDB and Polars get the endpoint, region, addressing style and
credentials of the Lake's own boto3 client (:mod:`lakelock._engines`): S3 is configured once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, get_args

import pyarrow as pa
import pyarrow.compute as pc

from lakelock._connection import Connection
from lakelock._datafile import DataFile
from lakelock._datasets import Progress, read_files, recorded_schema
from lakelock._engines import (
    duckdb_connection,
    polars_storage_options,
    pyarrow_filesystem,
    require,
    sql_identifier,
    sql_string,
)
from lakelock._names import PartitionSpec, named_partition, validate_dataset_name
from lakelock._pinning import (
    admitted,
    admitted_partitions,
    partition_expression,
    pinned_partitions,
)
from lakelock._stats import guarantee
from lakelock.errors import DatasetNotFoundError, InvalidArgumentError, InvalidNameError

if TYPE_CHECKING:
    import pyarrow.dataset as ds

    from lakelock._registry import Registry, RegistrySnapshot
    from lakelock._s3 import ObjectStore

__all__ = ["Scan", "plan_scan"]


def plan_scan(
    store: ObjectStore,
    registry: Registry,
    snapshot: RegistrySnapshot,
    dataset: str,
    *,
    partitions: Iterable[PartitionSpec] | None = None,
    columns: Sequence[str] | None = None,
    filter: pc.Expression | None = None,
) -> Scan:
    """The scan of ``dataset`` in ``snapshot``: names checked, files listed from the
    manifests, partitions pruned. Raises :class:`DatasetNotFoundError` for an unknown
    dataset or partition, :class:`InvalidNameError` for an unknown column or a filter that
    does not apply to the dataset's columns."""
    dataset = validate_dataset_name(dataset)
    state = snapshot.datasets.get(dataset)
    if state is None:
        raise DatasetNotFoundError(dataset)
    wanted = None
    if partitions is not None and not state.partition_by:
        raise InvalidArgumentError(
            partitions,
            f"dataset {dataset!r} is not partitioned: read it without partitions= (filter= "
            "picks rows by any column)",
            what="partitions",
        )
    if partitions is not None:
        if isinstance(partitions, str | Mapping):
            # One partition alone would be read as its characters (or its column names).
            raise InvalidArgumentError(partitions, "a list of paths or mappings", what="partitions")
        wanted = [named_partition(state.partition_by, p) for p in partitions]
        for path in wanted:
            if path not in state.partitions:
                raise DatasetNotFoundError(dataset, partition=path)
    if filter is not None and state.schema is not None:
        # A filter that pins every partition column: look those partitions up, not every one.
        pinned = pinned_partitions(
            _checked_filter(dataset, state.schema, filter), state.schema, state.partition_by
        )
        if pinned is not None:
            wanted = pinned if wanted is None else [p for p in wanted if p in frozenset(pinned)]
        elif state.partition_by:
            # Otherwise the whole index is read (a hash trie holds no ranges), but only the
            # partitions the filter can match have their manifests read.
            paths = list(state.partitions) if wanted is None else wanted
            kept = admitted_partitions(filter, state.schema, state.partition_by, paths)
            if len(kept) < len(paths):
                wanted = kept
    files = registry.files(dataset, snapshot=snapshot, partitions=wanted)
    return Scan(
        store,
        snapshot,
        dataset,
        files,
        schema=state.schema,
        partition_by=state.partition_by,
        columns=columns,
        filter=filter,
    )


class Scan:
    """A planned read of one dataset in one registry snapshot (see the module docstring).

    ``schema`` is the schema of what the scan returns (the ``columns`` asked for, in that
    order, partition columns typed). Make one with :meth:`Lake.scan <lakelock.Lake.scan>`.
    """

    def __init__(
        self,
        store: ObjectStore,
        snapshot: RegistrySnapshot,
        dataset: str,
        files: Sequence[DataFile],
        *,
        schema: pa.Schema | None,
        partition_by: Sequence[str],
        columns: Sequence[str] | None = None,
        filter: pc.Expression | None = None,
    ) -> None:
        self.store = store
        self.snapshot = snapshot
        self.dataset = dataset
        self.partition_by = tuple(partition_by)
        self._recorded_schema = schema
        self._all_files = tuple(files)
        # Checked against the schema only when given: a dataset committed without a schema
        # learns its schema from a file, which costs a GET.
        self.columns = (
            None if columns is None else _checked_columns(dataset, self.full_schema, columns)
        )
        self.filter = None if filter is None else _checked_filter(dataset, self.full_schema, filter)

    def __repr__(self) -> str:
        return (
            f"Scan({self.dataset!r}, version={self.snapshot.version}, "
            f"files={len(self._files)}/{len(self._all_files)})"
        )

    # -- what is read -------------------------------------------------------------------------

    @cached_property
    def full_schema(self) -> pa.Schema:
        """The dataset's whole schema (all columns, partition columns included)."""
        if self._recorded_schema is not None:
            return self._recorded_schema
        # A dataset committed without a schema: the schema its first file records, partition
        # columns as strings when the file does not say.
        if not self._all_files:
            return pa.schema([(c, pa.string()) for c in self.partition_by])
        return recorded_schema(self.store, self._all_files[0])

    @property
    def schema(self) -> pa.Schema:
        """The schema of what the scan returns."""
        if self.columns is None:
            return self.full_schema
        return pa.schema([self.full_schema.field(c) for c in self.columns])

    def files(self) -> list[DataFile]:
        """The files the scan reads: the snapshot's files of the partitions asked for, less
        those whose partition values or statistics the filter rules out."""
        return list(self._files)

    @cached_property
    def _files(self) -> tuple[DataFile, ...]:
        if self.filter is None:
            return self._all_files
        with_stats = any(f.stats is not None for f in self._all_files)
        if not self.partition_by and not with_stats:
            return self._all_files
        # One candidate per file: its partition values and what its statistics guarantee
        # (lakelock._stats); pyarrow simplifies the filter against each.
        kept = admitted(
            self.filter, self.full_schema, [self._file_expression(f) for f in self._all_files]
        )
        return tuple(f for i, f in enumerate(self._all_files) if i in kept)

    def _file_expression(self, file: DataFile) -> pc.Expression:
        expression = self._partition_expression(file.partition_path)
        if file.stats is not None:
            expression = expression & guarantee(file.stats, self.full_schema, file.record_count)
        return expression

    @cached_property
    def _exact(self) -> bool:
        """Whether pruning alone applies the filter (it names partition columns only)."""
        if self.filter is None:
            return True
        partition_schema = pa.schema([self.full_schema.field(c) for c in self.partition_by])
        return _binds(self.filter, partition_schema)

    def _partition_expression(self, path: str) -> pc.Expression:
        return partition_expression(path, self.full_schema)

    @cached_property
    def _connection(self) -> Connection:
        return Connection.of(self.store.client)

    def _url(self, file: DataFile) -> str:
        return f"s3://{self.store.bucket}/{self.store.full_key(file.key)}"

    # -- readers ------------------------------------------------------------------------------

    def to_arrow(self, *, progress: Progress | None = None) -> pa.Table:
        """The rows as one ``pyarrow.Table``: files fetched whole and in parallel through the
        Lake's client, each checked against its recorded checksum. ``progress(done,
        total)`` counts bytes fetched."""
        return read_files(
            self.store,
            self._files,
            # Without a recorded schema, the files' own schemas, unified.
            schema=self._recorded_schema,
            partition_by=self.partition_by,
            columns=self.columns,
            filter=None if self._exact else self.filter,
            progress=progress,
        )

    def to_pandas(self) -> Any:
        """The rows as a ``pandas.DataFrame`` (extra ``pandas``)."""
        require("pandas", extra="pandas")
        return self.to_arrow().to_pandas()

    def to_pyarrow_dataset(self) -> ds.Dataset:
        """A ``pyarrow.dataset.Dataset`` over exactly the scan's files, read straight from
        S3 by pyarrow with the Lake's credentials. Each fragment carries its partition
        expression and size (no listing, no HEAD). It has the scan's columns (plus, when a
        filter names others, those it needs) and applies the scan's filter."""
        schema = self.schema
        if self.filter is not None and not _binds(self.filter, schema):
            schema = self.full_schema
        import pyarrow.dataset as ds  # noqa: PLC0415 - it imports pandas: loaded only when used

        filesystem = pyarrow_filesystem(self._connection)
        parquet = ds.ParquetFileFormat()
        fragments = [
            parquet.make_fragment(
                f"{self.store.bucket}/{self.store.full_key(f.key)}",
                filesystem=filesystem,
                partition_expression=self._partition_expression(f.partition_path),
                file_size=f.size,
            )
            for f in self._files
        ]
        dataset = ds.FileSystemDataset(fragments, schema, parquet, filesystem)
        return dataset if self._exact else dataset.filter(self.filter)

    def to_duckdb(self, table_name: str, connection: Any = None) -> Any:
        """A DuckDB view ``table_name`` over the scan (extra ``duckdb``), in ``connection``
        (default: a new in-memory database with threads for remote reads,
        :data:`~lakelock._engines.DUCKDB_MIN_THREADS`), which is returned. DuckDB reads the files
        itself (``read_parquet`` over the exact file list, partition columns typed through
        ``hive_types``) with a temporary S3 secret scoped to this lake; each query re-reads
        them, so DuckDB's projection and filter pushdown apply."""
        con = duckdb_connection(self._connection, self._scope, connection)
        name = sql_identifier(table_name)
        selected = ", ".join(sql_identifier(c) for c in self.schema.names)
        if not self._exact:
            # DuckDB scans the filtered pyarrow dataset (module docstring).
            hidden = f"__lakelock_{table_name}"
            con.register(hidden, self.to_pyarrow_dataset())
            con.execute(
                f"CREATE OR REPLACE VIEW {name} AS SELECT {selected} FROM {sql_identifier(hidden)}"
            )
            return con
        types = _duckdb_types(con, self.full_schema)
        if not self._files:
            nulls = ", ".join(
                f"CAST(NULL AS {types[c]}) AS {sql_identifier(c)}" for c in self.schema.names
            )
            con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT {nulls} WHERE false")
            return con
        source = self._duckdb_source(types)
        try:
            con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT {selected} FROM {source}")
        except require("duckdb", extra="duckdb").BinderException:
            # A column of the dataset that no file of the scan has (added by a later commit):
            # null, as in every other reader.
            present = {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
            selected = ", ".join(
                sql_identifier(c)
                if c in present
                else f"CAST(NULL AS {types[c]}) AS {sql_identifier(c)}"
                for c in self.schema.names
            )
            con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT {selected} FROM {source}")
        return con

    @property
    def _scope(self) -> str:
        return f"s3://{self.store.bucket}/{self.store.prefix}"

    def _duckdb_source(self, types: Mapping[str, str]) -> str:
        urls = "[" + ", ".join(sql_string(self._url(f)) for f in self._files) + "]"
        options = ["union_by_name = true"]
        if self.partition_by:
            hive = ", ".join(f"{sql_string(c)}: {sql_string(types[c])}" for c in self.partition_by)
            options += ["hive_partitioning = true", f"hive_types = {{{hive}}}"]
        else:
            options.append("hive_partitioning = false")
        return f"read_parquet({urls}, {', '.join(options)})"

    def to_polars(self) -> Any:
        """A ``polars.LazyFrame`` over the scan (extra ``polars``): Polars reads the exact
        file list itself (partition columns typed through ``hive_schema``, columns a file
        lacks as nulls, an integer or float column a file stores narrower widened to the
        dataset's type, a timestamp of a coarser unit too where Polars can: see
        :func:`_polars_cast_options`) with storage options derived from the Lake's client.
        A file Polars cannot widen at a scan (a ``date32`` in a ``date64`` column; held by
        pyarrow's and DuckDB's reads) fails the collect; read such a dataset with
        ``pl.scan_pyarrow_dataset(scan.to_pyarrow_dataset())``."""
        pl = require("polars", extra="polars")
        if not self._exact:
            return pl.scan_pyarrow_dataset(self.to_pyarrow_dataset()).select(self.schema.names)
        types = pl.from_arrow(self.full_schema.empty_table()).schema
        if not self._files:
            return pl.from_arrow(self.schema.empty_table()).lazy()
        data = {c: t for c, t in types.items() if c not in self.partition_by}
        frame = pl.scan_parquet(
            [self._url(f) for f in self._files],
            glob=False,
            hive_partitioning=bool(self.partition_by),
            hive_schema={c: types[c] for c in self.partition_by} or None,
            schema=data,
            missing_columns="insert",
            cast_options=_polars_cast_options(pl),
            storage_options=polars_storage_options(self._connection),
        )
        return frame.select(self.schema.names)


def _polars_cast_options(pl: Any) -> Any:
    """How ``scan.to_polars()`` widens a file's column stored narrower than the dataset's,
    which a commit accepts (a worker's pandas ``int32``, ``float32``, a timestamp in
    milliseconds) and every other reader widens: an integer (a decimal of a smaller
    precision, its scale the same, included) or a float; a timestamp of a coarser unit where
    this Polars knows how (``datetime_cast="upcast"``, in the releases from 2026 on; before,
    such a file fails the collect)."""
    try:
        from polars.io.scan_options.cast_options import (  # noqa: PLC0415 - extra
            DatetimeCastOption,
        )
    except ImportError:
        datetimes = "forbid"
    else:
        datetimes = "upcast" if "upcast" in get_args(DatetimeCastOption) else "forbid"
    return pl.ScanCastOptions(integer_cast="upcast", float_cast="upcast", datetime_cast=datetimes)


def _checked_columns(dataset: str, schema: pa.Schema, columns: Sequence[str]) -> tuple[str, ...]:
    if isinstance(columns, str):
        columns = [columns]
    chosen = tuple(columns)
    if not chosen:
        # An empty projection would be a table of no columns, and no rows either: the
        # engines lose the row count with the columns (pyarrow's readers here, Polars, and
        # DuckDB cannot select nothing), so a count taken that way would read 0.
        raise InvalidArgumentError(
            columns,
            "name at least one column (to count rows, read one column, or sum "
            "record_count over scan.files() when no filter reads data columns)",
            what="columns",
        )
    for column in chosen:
        if column not in schema.names:
            raise InvalidNameError(column, f"not a column of dataset {dataset!r}")
        if chosen.count(column) > 1:
            raise InvalidNameError(column, "column asked for twice")
    return chosen


def _checked_filter(dataset: str, schema: pa.Schema, filter: pc.Expression) -> pc.Expression:
    if not isinstance(filter, pc.Expression):
        raise TypeError(f"filter must be a pyarrow.compute.Expression, not {type(filter).__name__}")
    problem = _bind_problem(filter, schema)
    if problem is not None:
        missing = re.search(r"No match for FieldRef\.Name\((.*?)\)", problem)
        if missing:
            problem = f"dataset {dataset!r} has no column {missing[1]!r} (it has {schema.names})"
        else:
            problem = f"it does not apply to the columns of dataset {dataset!r}: {problem}"
        raise InvalidArgumentError(str(filter), problem, what="filter")
    return filter


def _binds(filter: pc.Expression, schema: pa.Schema) -> bool:
    return _bind_problem(filter, schema) is None


def _bind_problem(filter: pc.Expression, schema: pa.Schema) -> str | None:
    """Why ``filter`` cannot be evaluated over ``schema`` (``None`` if it can)."""
    try:
        result = schema.empty_table().filter(filter)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as error:
        return str(error).splitlines()[0]
    del result
    return None


def _duckdb_types(con: Any, schema: pa.Schema) -> dict[str, str]:
    """DuckDB's SQL type for each column of ``schema``."""
    relation = con.from_arrow(schema.empty_table())
    return {name: str(type_) for name, type_ in zip(schema.names, relation.types, strict=True)}
