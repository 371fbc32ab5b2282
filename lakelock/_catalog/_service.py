"""What the catalog answers, read off one :class:`~lakelock.Lake`: its datasets as tables in
one namespace, and each table's current Iceberg view.

The registry stays the one source of truth. Loading a table reads the registry root, and when
the dataset changed after the view this catalog last handed out (``updated_version`` above the
mirrored ``version``) it mirrors first (:meth:`lakelock.Lake.mirror`, idempotent and safe
beside other mirrors), then answers the newest ``metadata.json``. A metadata file is
write-once, so its bytes are cached by location and sent as they are stored.

**Commits** (unless ``read_only``): creating a table creates the dataset (its schema and
identity partition columns) by a lakelock commit without files; a table commit
(:mod:`._commits` reads what it adds and removes from the engine's manifests) becomes one
lakelock commit through the ordinary commit path (``registry.commit_changes``: group commit,
commit ids, fences, retention, every rule of docs/FORMAT.md), with a commit id derived from
the request, so a retried request adding files is recognised as committed and answered, never
applied twice; a schema or property change, while the table still shows it (docs/FORMAT.md,
"Commit ids": one without requirements sent again after another change is a new request).
Requirements are checked against the view of the dataset's current version (the version
they name: each snapshot id is a lakelock version); a failed one is a 409
``CommitFailedException`` and the engine retries on the refreshed table. A request with
requirements commits on that version only (``on_version``, FORMAT.md rule 15): when another
writer's commit lands first, it is planned again on the new version, its requirements
checked again. A request without requirements commits on whatever version is current, and a
commit removing a file another commit removed first is refused by the registry (409). Files
an engine adds are checked not to be live already (rule 14), and the schema they were
planned with is declared, so the commit loop judges it again on the dataset as it is when
the commit applies (a column a restore dropped meanwhile refuses it: 409). A create commits
only while the dataset does not exist. A multi-table transaction is one lakelock commit over
its datasets.

Credentials: the client ``defaults`` name the S3 endpoint, region and addressing, never keys.
Only a catalog made with ``vend_credentials=True`` puts the lake's own S3 credentials (those
of its boto3 client) into each load-table answer, as ``config`` and ``storage-credentials``.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import Any, Protocol
from unicodedata import normalize

import orjson
import pyarrow as pa

from lakelock._catalog._commits import (
    PlannedCommit,
    arrow_schema,
    check_column_names,
    check_properties,
    commit_id_of,
    partition_columns_of,
    plan_commit,
)
from lakelock._catalog._protocol import CatalogError
from lakelock._connection import Connection
from lakelock._datafile import DataFile
from lakelock._engines import require
from lakelock._lake import Lake
from lakelock._layout import DATASETS_PREFIX, VIEWS_PREFIX, iceberg_location
from lakelock._mirror._iceberg import engine_properties, staged_metadata
from lakelock._mirror._run import mirror as mirror_views
from lakelock._names import validate_dataset_name, validate_namespace, validate_partition_type
from lakelock._properties import check_property_count, check_property_limits
from lakelock._registry import CommitResult, DatasetState, RegistrySnapshot
from lakelock._registry._builder import CommitBuilder, fitted_schema
from lakelock._registry._changes import Change
from lakelock._registry._document import LAST_MODIFIED_RESOLUTION
from lakelock.errors import (
    CommitConflictError,
    DatasetNotFoundError,
    FileAlreadyRegisteredError,
    InvalidArgumentError,
    InvalidNameError,
    LakelockError,
    ObjectTooOldError,
    SchemaMismatchError,
    StaleFenceError,
)

__all__ = ["DEFAULT_NAMESPACE", "LakeCatalog", "LoadedTable", "MirroredView"]

#: The namespace a lake's datasets appear in, unless told otherwise.
DEFAULT_NAMESPACE = "lake"

#: Metadata files kept in memory (each is the table's whole metadata: schemas, snapshots).
METADATA_CACHE = 64


class MirroredView(Protocol):
    """What :meth:`lakelock.Lake.mirror` returns, as far as the catalog needs it."""

    @property
    def iceberg(self) -> str | None: ...

    @property
    def version(self) -> int: ...

    @property
    def written(self) -> int: ...


@dataclass(frozen=True)
class LoadedTable:
    """A table's current view: where its ``metadata.json`` is and what it holds (the bytes
    as stored), the lakelock version it mirrors, and the per-table client ``config``."""

    metadata_location: str
    metadata: bytes
    version: int
    config: dict[str, str]
    storage_credentials: tuple[dict[str, Any], ...] = ()

    def commit_body(self) -> bytes:
        """The spec's ``CommitTableResponse`` JSON (the location and the metadata)."""
        return orjson.dumps(
            {
                "metadata-location": self.metadata_location,
                "metadata": orjson.Fragment(self.metadata),
            }
        )

    def body(self) -> bytes:
        """The spec's ``LoadTableResult`` JSON, with the metadata spliced in unparsed."""
        result: dict[str, Any] = {
            "metadata-location": self.metadata_location,
            "metadata": orjson.Fragment(self.metadata),
            "config": self.config,
        }
        if self.storage_credentials:
            result["storage-credentials"] = list(self.storage_credentials)
        return orjson.dumps(result)


class LakeCatalog:
    """The lake's datasets as one Iceberg namespace (``namespace``, default ``"lake"``).

    ``read_only``: answer no commits (406, as for any operation not served).
    ``mirror(name)`` brings a dataset's Iceberg view up to the registry (default:
    ``lake.mirror(name, formats=("iceberg",))``); ``log`` receives one line per mirroring
    (how long it took), for a server's console.
    """

    def __init__(
        self,
        lake: Lake,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        vend_credentials: bool = False,
        read_only: bool = False,
        mirror: Callable[[str], MirroredView] | None = None,
        log: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lake = lake
        # In NFC, as every namespace a request names is read (lakelock._catalog._protocol).
        self.namespace = normalize("NFC", validate_namespace(namespace))
        self.vend_credentials = vend_credentials
        self.read_only = read_only
        self._mirror = mirror or self._lake_mirror
        self._log = log
        self._clock = clock
        self._views: dict[str, MirroredView] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._metadata: OrderedDict[str, bytes] = OrderedDict()
        self._guard = threading.Lock()

    def _lake_mirror(self, name: str) -> MirroredView:
        # The view this catalog last answered is where the newest metadata is looked for
        # from (a few LISTs fewer on every commit's answer).
        known = self._views.get(name)
        result: MirroredView = mirror_views(
            self.lake.registry,
            name,
            ("iceberg",),
            iceberg_since=known.version if known is not None else None,
        )
        return result

    # -- configuration --------------------------------------------------------------------------

    def client_defaults(self) -> dict[str, str]:
        """How a client reaches the lake's S3 (pyiceberg's and Java's FileIO property names):
        endpoint, region, addressing. Never credentials: clients bring their own."""
        connection = Connection.of(self.lake.client)
        defaults: dict[str, str] = {}
        if connection.region:
            defaults["s3.region"] = connection.region
            defaults["client.region"] = connection.region
        if connection.endpoint_url is not None:
            defaults["s3.endpoint"] = connection.endpoint_url
        if connection.path_style:
            defaults["s3.path-style-access"] = "true"
        return defaults

    def _credentials(self) -> tuple[dict[str, str], tuple[dict[str, Any], ...]]:
        """Per-table ``config`` and ``storage-credentials``: the lake client's own S3
        credentials (and the endpoint, region and addressing they are for) when vending is
        on, else nothing."""
        if not self.vend_credentials:
            return {}, ()
        connection = Connection.of(self.lake.client)
        if connection.access_key is None:
            return {}, ()
        keys = {
            "s3.access-key-id": connection.access_key,
            "s3.secret-access-key": connection.secret_key or "",
        }
        if connection.session_token:
            keys["s3.session-token"] = connection.session_token
        # With the keys, where they work: clients that take vended credentials (DuckDB) build
        # their S3 settings from this config alone.
        config = {**self.client_defaults(), **keys}
        # One credential per area of the lake a reader touches (the data files, the view's
        # metadata): a client that scopes a single credential to the table's location
        # (DuckDB) would not find it for data files, which lie outside that location.
        return config, tuple(
            {"prefix": self.lake.url + area, "config": dict(config)}
            for area in (DATASETS_PREFIX, VIEWS_PREFIX)
        )

    # -- namespaces and tables ----------------------------------------------------------------

    def check_namespace(self, namespace: tuple[str, ...]) -> None:
        if _nfc(namespace) != (self.namespace,):
            raise CatalogError.no_such_namespace(namespace)

    def tables(self, namespace: tuple[str, ...]) -> list[str]:
        """The dataset names, sorted."""
        self.check_namespace(namespace)
        return sorted(self.lake.registry.read().datasets)

    def table_exists(self, namespace: tuple[str, ...], table: str) -> bool:
        self.check_namespace(namespace)
        return table in self.lake.registry.read().datasets

    def load_table(
        self, namespace: tuple[str, ...], table: str, *, snapshot: RegistrySnapshot | None = None
    ) -> LoadedTable:
        """The dataset's current Iceberg view (current as of ``snapshot``, default a fresh
        read of the registry), mirrored first when the registry is ahead of it. A table of a
        namespace that does not exist does not exist either: Java clients (Iceberg's
        RESTCatalog, so Spark) resolve ``ns.table.snapshots`` by loading the table
        ``snapshots`` of the namespace ``ns.table`` first, and go on to the metadata table
        only when told ``NoSuchTableException``."""
        if _nfc(namespace) != (self.namespace,):
            raise CatalogError.no_such_table(namespace, table)
        root = snapshot or self.lake.registry.read()
        datasets = root.datasets
        if table not in datasets:
            raise CatalogError.no_such_table(namespace, table)
        current = datasets[table].updated_version
        with self._lock_for(table):
            view = self._views.get(table)
            if view is None or view.version < current:
                view = self._mirror_now(namespace, table)
                self._views[table] = view
        location = view.iceberg
        if location is None:
            raise CatalogError(500, "InternalServerError", f"no Iceberg view of {table!r} was made")
        config, storage_credentials = self._credentials()
        metadata = self._metadata_bytes(location)
        if not self.read_only and b'"write.data.path"' not in metadata:
            metadata = _steering(metadata, self.steered(table))
        horizon = _vacuumed_before(root)
        if horizon is not None:
            metadata = self._unvacuumed(location, metadata, horizon)
        return LoadedTable(location, metadata, view.version, config, storage_credentials)

    def _mirror_now(self, namespace: tuple[str, ...], table: str) -> MirroredView:
        if self._log is not None:
            self._log(f"mirroring {table} ...")
        started = self._clock()
        try:
            view = self._mirror(table)
        except DatasetNotFoundError as error:  # dropped between the read and the mirror
            raise CatalogError.no_such_table(namespace, table) from error
        except SchemaMismatchError as error:  # a column no Iceberg type holds: never a view
            raise CatalogError.bad_request(f"{table!r} has no Iceberg view: {error}") from error
        if self._log is not None:
            done = (
                f"mirrored {table} to lakelock version {view.version}"
                if view.written
                else f"view of {table} already current at lakelock version {view.version}"
            )
            self._log(f"{done} ({self._clock() - started:.2f} s)")
        return view

    def _lock_for(self, table: str) -> threading.Lock:
        """One lock per table: concurrent loads of a table that is behind mirror it once."""
        with self._guard:
            return self._locks.setdefault(table, threading.Lock())

    def _metadata_bytes(self, location: str) -> bytes:
        with self._guard:
            cached = self._metadata.get(location)
            if cached is not None:
                self._metadata.move_to_end(location)
                return cached
        body = self.lake.store.get(self._lake_key(location)).body
        with self._guard:
            self._metadata[location] = body
            while len(self._metadata) > METADATA_CACHE:
                self._metadata.popitem(last=False)
        return body

    def _unvacuumed(self, location: str, metadata: bytes, horizon: float) -> bytes:
        """The view's ``metadata`` without the snapshots the lake's last vacuum may have
        emptied (:func:`_vacuum_dropped`), kept once made for the view and the horizon."""
        key = f"{location}#{horizon!r}"
        with self._guard:
            cached = self._metadata.get(key)
            if cached is not None:
                self._metadata.move_to_end(key)
                return cached
        kept = _vacuum_dropped(metadata, horizon)
        with self._guard:
            self._metadata[key] = kept
            while len(self._metadata) > METADATA_CACHE:
                self._metadata.popitem(last=False)
        return kept

    def _lake_key(self, location: str) -> str:
        """``location`` (``s3://bucket/prefix/...``) as a key inside the lake."""
        base = f"s3://{self.lake.bucket}/{self.lake.prefix}"
        if not location.startswith(base):
            raise CatalogError(
                500, "InternalServerError", f"view metadata {location} is outside the lake {base}"
            )
        return location[len(base) :]

    # -- commits --------------------------------------------------------------------------------

    def steered(self, table: str) -> dict[str, str]:
        """The properties every table has (:func:`~lakelock._mirror._iceberg.engine_properties`)."""
        return engine_properties(self._root, table)

    def create_namespace(self, body: bytes) -> None:
        """The one namespace exists already (409, as the spec answers); no other can be made."""
        request = _json_object(body)
        namespace = request.get("namespace")
        if (
            isinstance(namespace, list)
            and all(isinstance(p, str) for p in namespace)
            and _nfc(namespace) == (self.namespace,)
        ):
            raise CatalogError.already_exists(f"Namespace already exists: {self.namespace}")
        raise CatalogError.bad_request(
            f"this catalog serves one namespace, {self.namespace!r}: {namespace!r} cannot be "
            "created"
        )

    def create_table(self, namespace: tuple[str, ...], body: bytes) -> bytes:
        """Create the dataset a ``CreateTableRequest`` describes (schema, identity partition
        columns, properties) by a lakelock commit without files, and answer its view (the
        spec's ``LoadTableResult``). A staged create (``stage-create``: CREATE TABLE AS
        SELECT) commits nothing: it answers the metadata the table will have, and the
        engine's commit with ``assert-create`` creates the dataset with its first files."""
        self.check_namespace(namespace)
        rest = require("pyiceberg.catalog.rest", extra="iceberg", package="pyiceberg")
        # The spec's optional fields, which pyiceberg's model requires (it always sends them).
        optional = {"location": None, "partition-spec": None, "write-order": None}
        request = _model(rest.CreateTableRequest, body, defaults=optional)
        try:
            name = validate_dataset_name(normalize("NFC", request.name))
        except InvalidNameError as error:
            raise CatalogError.bad_request(str(error)) from error
        location = f"{self._root}{iceberg_location(name)}"
        if request.location is not None and request.location.rstrip("/") != location:
            raise CatalogError.bad_request(
                f"location {request.location}: a table's location is {location} (its data "
                "goes under the dataset's folder, write.data.path)"
            )
        if request.write_order is not None and request.write_order.fields:
            raise CatalogError.bad_request("sort orders are not supported (tables are unsorted)")
        properties = dict(request.properties)
        if properties.pop("format-version", "2") != "2":
            raise CatalogError.bad_request("this catalog's tables are Iceberg format version 2")
        arrow, partition_by = self._layout(request.table_schema, request.partition_spec)
        kept = self._kept(name, properties)
        registry = self.lake.registry
        if request.stage_create:
            if name in registry.read().datasets:
                raise CatalogError.already_exists(f"Table already exists: {namespace[0]}.{name}")
            staged = staged_metadata(self._root, name, arrow, partition_by)
            config, credentials = self._credentials()
            result: dict[str, Any] = {
                "metadata": orjson.Fragment(staged.model_dump_json().encode()),
                "config": config,
            }
            if credentials:
                result["storage-credentials"] = list(credentials)
            return orjson.dumps(result)
        exists = CatalogError.already_exists(f"Table already exists: {namespace[0]}.{name}")
        if name in registry.read().datasets:
            raise exists
        # Created only while no dataset of that name exists when the commit applies (rule
        # 15), under a commit id of its own: two engines creating one table at once send
        # the same request, and the second must hear that the table exists.
        commit = CommitBuilder(
            registry,
            name,
            "create",
            schema=arrow,
            partition_by=partition_by,
            properties=kept or None,
        )
        commit.planned_on(0)
        try:
            created = self._commit([commit.change])
        except CatalogError as error:
            if error.status == 409 and name in registry.read().datasets:
                raise exists from error
            raise
        # Sent again, a create hears 409 (it is not idempotent): a failure from here on must
        # tell the engine the table exists, never "retry".
        with _landed(created.version, landed="the table was created", again="create it again"):
            return self.load_table(namespace, name).body()

    @property
    def _root(self) -> str:
        return f"s3://{self.lake.bucket}/{self.lake.prefix}"

    def _layout(self, schema: Any, spec: Any) -> tuple[pa.Schema, tuple[str, ...]]:
        """A new table's dataset schema and partition columns (400 for what cannot be)."""
        partition_by: tuple[str, ...] = ()
        if spec is not None:
            partition_by = partition_columns_of(spec, schema)
        try:
            arrow = arrow_schema(schema)
            for column in partition_by:
                validate_partition_type(column, arrow.field(column).type)
        except (TypeError, ValueError) as error:
            raise CatalogError.bad_request(f"the schema cannot be a dataset's: {error}") from error
        check_column_names(arrow.names)
        return arrow, partition_by

    def _kept(self, table: str, properties: dict[str, str]) -> dict[str, str]:
        """The properties of a create that lakelock records (those the view derives are not)."""
        steered = self.steered(table)
        check_properties(properties, steered)
        kept = {
            k: v
            for k, v in properties.items()
            if k not in steered and not k.startswith("lakelock.") and k != _NAME_MAPPING
        }
        _within_limits(kept, {})
        return kept

    def update_table(self, namespace: tuple[str, ...], table: str, body: bytes) -> LoadedTable:
        """One table's ``CommitTableRequest`` as one lakelock commit; the view of the version
        it made (or, for a request already committed, of the current one)."""
        self.check_namespace(namespace)
        table_module = require("pyiceberg.table", extra="iceberg", package="pyiceberg")
        # The path names the table; the spec makes the body's identifier optional.
        named = {"identifier": {"namespace": list(namespace), "name": table}}
        request = _model(table_module.CommitTableRequest, body, defaults=named)

        def plan() -> list[Change]:
            change = self._plan(namespace, table, request, None)
            return [change] if isinstance(change, Change) else []

        snapshot = self._commit_planned(plan)
        with _landed(snapshot.version if snapshot is not None else None):
            return self.load_table(namespace, table, snapshot=snapshot)

    def commit_transaction(self, body: bytes) -> None:
        """A ``CommitTransactionRequest``: every table's changes in one lakelock commit (all
        or nothing), under one commit id derived from the whole request."""
        table_module = require("pyiceberg.table", extra="iceberg", package="pyiceberg")
        document = _json_object(body)
        changes_raw = document.get("table-changes")
        if not isinstance(changes_raw, list) or not changes_raw:
            raise CatalogError.bad_request("table-changes must be a non-empty list")
        requests = [
            _model(table_module.CommitTableRequest, orjson.dumps(raw)) for raw in changes_raw
        ]
        commit_id = commit_id_of(["transaction", document])
        tables = []
        for request in requests:
            identifier = request.identifier
            namespace = _parts(identifier.namespace)
            self.check_namespace(namespace)
            tables.append((namespace, normalize("NFC", identifier.name)))
        if len(set(tables)) != len(tables):
            raise CatalogError.bad_request("a transaction names each table once")

        def plan() -> list[Change]:
            planned = [
                self._plan(namespace, name, request, commit_id)
                for (namespace, name), request in zip(tables, requests, strict=True)
            ]
            if any(c is _RECORDED for c in planned):
                # One table's part is recorded under the transaction's commit id: the whole
                # transaction was committed (all or nothing) and is answered as such.
                return []
            return [c for c in planned if isinstance(c, Change)]

        snapshot = self._commit_planned(plan)
        with _landed(snapshot.version if snapshot is not None else None):
            for namespace, name in tables:
                # Mirrored before the answer, as one table's commit is.
                self.load_table(namespace, name, snapshot=snapshot)

    def _commit_planned(self, plan: Callable[[], list[Change]]) -> RegistrySnapshot | None:
        """Commit what ``plan`` plans (None: nothing to commit). A change planned on a
        version of its dataset (its requirements were checked against that version's view)
        applies only on that version (FORMAT.md rule 15, ``on_version``): when another
        commit moved the dataset first, the request is planned again on the new version,
        which checks its requirements again (a 409 when they no longer hold)."""
        for _ in range(REPLANS):
            changes = plan()
            if not changes:
                return None
            try:
                return self._committed(changes)
            except CatalogError as error:
                if error.status != 409 or not self._moved(changes):
                    raise
        raise CatalogError.commit_failed(
            f"the table moved under the commit {REPLANS} times as it was planned: refresh "
            "the table and retry"
        )

    def _moved(self, changes: Sequence[Change]) -> bool:
        """Whether a dataset one of ``changes`` was planned on is at another version now."""
        datasets = self.lake.registry.read().datasets
        for change in changes:
            if change.on_version is None:
                continue
            state = datasets.get(change.dataset)
            current = state.updated_version if state is not None else 0
            if current != change.on_version:
                return True
        return False

    def _plan(
        self, namespace: tuple[str, ...], table: str, request: Any, commit_id: str | None
    ) -> Change | _Recorded | None:
        """The lakelock change ``request`` stands for (None: nothing to commit;
        :data:`_RECORDED`: committed already, under ``commit_id``), after its requirements
        are checked against the current view. A change of a request with requirements
        is planned on that view's version (``on_version``), and a create on the dataset not
        existing."""
        identifier = request.identifier
        if identifier is not None and (
            _parts(identifier.namespace) != namespace or normalize("NFC", identifier.name) != table
        ):
            raise CatalogError.bad_request(
                f"the request names {identifier}, the path {'.'.join([*namespace, table])}"
            )
        from pyiceberg.table.update import (  # noqa: PLC0415 - extra
            AddSnapshotUpdate,
            AssertCreate,
            AssertTableUUID,
        )

        registry = self.lake.registry
        snapshot = registry.read()
        creating = any(isinstance(r, AssertCreate) for r in request.requirements)
        loaded = None if creating else self.load_table(namespace, table, snapshot=snapshot)
        snapshots = [u.snapshot for u in request.updates if isinstance(u, AddSnapshotUpdate)]
        if commit_id is None:
            # A snapshot names itself (its id, its manifest list); anything else is the
            # request as sent against the version it was made on.
            parts: list[object] = [table]
            if snapshots:
                parts += [[s.snapshot_id, s.manifest_list] for s in snapshots]
            else:
                parts += [request.model_dump(mode="json"), loaded and loaded.version]
            commit_id = commit_id_of(parts)
        commit_failed = require("pyiceberg.exceptions", extra="iceberg", package="pyiceberg")
        try:
            base, requirements, arrow, partition_by = self._base(
                namespace, table, request, loaded, snapshot
            )
            for requirement in requirements:
                try:
                    requirement.validate(base)
                except commit_failed.CommitFailedException as error:
                    raise CatalogError.commit_failed(str(error)) from error
            # A snapshot whose parent is no longer main is stale too, with or without
            # requirements: a request sent without any is recognised as a retry here.
            plan = self._planned(
                table,
                request=request,
                snapshot=snapshot,
                loaded=loaded,
                base=base,
                arrow=arrow,
                partition_by=partition_by,
            )
        except CatalogError as error:
            # A request that no longer applies (its requirements, or its snapshot's parent)
            # may be one that was committed and is sent again (its answer lost): then it is
            # answered as committed — found by its commit id, or (a schema or property
            # change, whose id names the version it was first planned on) by the table
            # already being what it asks for.
            if error.status == 409:
                if registry.internals.recorded_commit(commit_id, table) is not None:
                    return _RECORDED
                if (
                    loaded is not None
                    and request.updates
                    and not snapshots
                    and self._in_effect(table, request, snapshot, loaded)
                ):
                    return None
            raise
        conditional = [r for r in requirements if not isinstance(r, AssertTableUUID)]
        if plan.add and loaded is not None:
            self._check_not_live(table, plan.add, snapshot)
        if loaded is None:
            on_version: int | None = 0
        else:
            on_version = loaded.version if conditional else None
        if loaded is None:
            commit = CommitBuilder(
                self.lake.registry,
                table,
                "create",
                commit_id=commit_id,
                schema=plan.schema if plan.schema is not None else arrow,
                partition_by=partition_by,
                properties=plan.properties or None,
            )
        elif not (plan.add or plan.remove or plan.schema is not None or plan.properties):
            return None
        else:
            commit = CommitBuilder(
                self.lake.registry,
                table,
                plan.operation,
                commit_id=commit_id,
                schema=plan.schema,
                schema_mode="merge" if plan.schema is not None else None,
                properties=plan.properties or None,
            )
        commit.bind(plan.request, files=plan.add)
        # Files an engine adds may be live already (add_files of a registered file, a
        # snapshot re-pointing at the view's own manifests): rule 14 refuses them.
        commit.add(plan.add, existing=True)
        commit.remove(plan.remove)
        commit.planned_on(on_version)
        if plan.add:
            _judged(commit, arrow, snapshot.datasets.get(table))
        return commit.change

    def _check_not_live(
        self, table: str, files: Sequence[DataFile], snapshot: RegistrySnapshot
    ) -> None:
        """400 when a file the engine adds is live in the dataset already (add_files of a
        registered file, a snapshot re-pointing at the view's own manifests), before
        anything is written: the commit itself refuses it too (FORMAT.md rule 14), for
        a file another commit registers meanwhile."""
        wanted = {f.key for f in files}
        partitions = {f.partition_path for f in files}
        live = sorted(
            f.key
            for f in self.lake.registry.files(table, snapshot=snapshot, partitions=partitions)
            if f.key in wanted
        )
        if live:
            shown = ", ".join(repr(k) for k in live[:3]) + (" ..." if len(live) > 3 else "")
            raise CatalogError.bad_request(
                f"{len(live)} of the files this commit adds "
                f"{'is' if len(live) == 1 else 'are'} registered in table {table!r} already "
                f"({shown}): a file is registered once; nothing was committed"
            )

    def _planned(
        self,
        table: str,
        *,
        request: Any,
        snapshot: RegistrySnapshot,
        loaded: LoadedTable | None,
        base: Any,
        arrow: pa.Schema,
        partition_by: tuple[str, ...],
    ) -> PlannedCommit:
        """What ``request`` commits on ``base``, without the properties the dataset has
        already (set to the same value, or removed while absent): setting them changes
        nothing, so a request sent again commits nothing. Properties past a limit
        (:mod:`lakelock._properties`) are a 400 naming it."""
        dataset = snapshot.datasets.get(table)
        plan = plan_commit(
            self.lake.store,
            table,
            base=base,
            arrow=arrow,
            partition_by=partition_by,
            updates=request.updates,
            steered=self.steered(table),
            partitions=dataset.partitions if dataset is not None else frozenset(),
        )
        state = dataset if loaded is not None else None
        if state is None or not plan.properties:
            _within_limits(plan.properties, {})
            return plan
        held = state.properties
        changed = {k: v for k, v in plan.properties.items() if held.get(k) != v}
        _within_limits(changed, held)
        return replace(plan, properties=changed)

    def _in_effect(
        self, table: str, request: Any, snapshot: RegistrySnapshot, loaded: LoadedTable
    ) -> bool:
        """Whether ``request`` (no snapshots), whose requirements no longer hold, would
        change nothing on the current view: a schema or property change sent again after
        its first send landed."""
        from pyiceberg.table.metadata import TableMetadataUtil  # noqa: PLC0415 - extra

        state = snapshot.datasets.get(table)
        if state is None or state.schema is None:
            return False
        base = TableMetadataUtil.parse_raw(loaded.metadata.decode())
        try:
            plan = self._planned(
                table,
                request=request,
                snapshot=snapshot,
                loaded=loaded,
                base=base,
                arrow=state.schema,
                partition_by=state.partition_by,
            )
        except CatalogError:
            return False
        return not (plan.add or plan.remove or plan.schema is not None or plan.properties)

    def _base(
        self,
        namespace: tuple[str, ...],
        table: str,
        request: Any,
        loaded: LoadedTable | None,
        snapshot: RegistrySnapshot,
    ) -> tuple[Any, list[Any], pa.Schema, tuple[str, ...]]:
        """What a commit is checked against: the table's metadata (for a staged create's
        commit, the metadata it will have), the requirements to check, the dataset's schema
        and partition columns."""
        from pyiceberg.table.metadata import TableMetadataUtil  # noqa: PLC0415 - extra
        from pyiceberg.table.update import (  # noqa: PLC0415 - extra
            AddPartitionSpecUpdate,
            AddSchemaUpdate,
            AssertCreate,
        )

        if loaded is None:  # a staged create's commit: the dataset is made by it
            if table in snapshot.datasets:
                raise CatalogError.commit_failed(f"Table already exists: {table}")
            try:
                validate_dataset_name(table)
            except InvalidNameError as error:
                raise CatalogError.bad_request(str(error)) from error
            schemas = [u.schema_ for u in request.updates if isinstance(u, AddSchemaUpdate)]
            specs = [u.spec for u in request.updates if isinstance(u, AddPartitionSpecUpdate)]
            if not schemas:
                raise CatalogError.bad_request("a create (assert-create) needs add-schema")
            arrow, partition_by = self._layout(schemas[-1], specs[-1] if specs else None)
            base = staged_metadata(self._root, table, arrow, partition_by)
            requirements = [r for r in request.requirements if not isinstance(r, AssertCreate)]
            return base, requirements, arrow, partition_by
        state = snapshot.datasets.get(table)
        if state is None:
            raise CatalogError.no_such_table(namespace, table)
        if state.schema is None:
            raise CatalogError.bad_request(
                f"dataset {table!r} records no schema (committed without one): write to it "
                "with lakelock first"
            )
        base = TableMetadataUtil.parse_raw(loaded.metadata.decode())
        return base, list(request.requirements), state.schema, state.partition_by

    def _committed(self, changes: Sequence[Change]) -> RegistrySnapshot:
        """Commit ``changes``; the registry as this process knows it after the commit (no
        request), or read again if that does not hold the commit yet."""
        result = self._commit(changes)
        registry = self.lake.registry
        known = registry.internals.known()
        for change in changes:
            state = known.datasets.get(change.dataset)
            if state is None or state.updated_version < result.version:
                return registry.read()
        return known

    def _commit(self, changes: Sequence[Change]) -> CommitResult:
        """The ordinary commit; a conflict (a file already removed, a stale fence, a schema
        another commit changed) is the spec's 409, so the engine refreshes and retries."""
        try:
            result: CommitResult = self.lake.registry.commit_changes(changes)
        except (FileAlreadyRegisteredError, ObjectTooOldError) as error:
            # Not stale: the same files sent again can never commit (a file registered
            # already; one older than half the vacuum floor, which must be written again).
            raise CatalogError.bad_request(str(error)) from error
        except (CommitConflictError, SchemaMismatchError, StaleFenceError) as error:
            raise CatalogError.commit_failed(str(error)) from error
        return result


def _within_limits(changes: Mapping[str, str | None], held: Mapping[str, str]) -> None:
    """A 400 naming the limit when ``changes`` to the properties ``held`` break one
    (:func:`~lakelock._properties.check_property_limits`, as every lakelock writer's)."""
    try:
        check_property_limits(changes, held)
    except InvalidArgumentError as error:
        raise CatalogError.bad_request(str(error)) from error


def _judged(commit: CommitBuilder, planned: pa.Schema, dataset: DatasetState | None) -> None:
    """Declare the schema ``commit``'s files were planned with (the table's columns as read,
    with those the request adds), as lakelock's commit of files written elsewhere does
    (:func:`~lakelock._registry._builder.fitted_schema`): the commit loop judges it again on
    the dataset as it is when the commit applies, so a restore (or another commit) dropping
    or changing a column the files hold after they were planned refuses the commit instead
    of landing values no read returns. What would be refused on ``dataset`` (as read) is a
    400 now."""
    if commit.change.schema is None:
        commit.declare(schema=planned)
    try:
        commit.declare(schema=fitted_schema(commit.change, dataset))
        commit.fits(dataset)
    except SchemaMismatchError as error:
        raise CatalogError.bad_request(str(error)) from error


_NAME_MAPPING = "schema.name-mapping.default"

#: How many times a commit is planned again when the dataset it was planned on moved before
#: it applied (each time its requirements are checked again on the new version).
REPLANS = 5


class _Recorded:
    """A request found committed already (its commit id is recorded)."""


_RECORDED = _Recorded()


@contextmanager
def _landed(
    version: int | None,
    *,
    landed: str = "the commit landed",
    again: str = "commit it again",
) -> Iterator[None]:
    """Answering a commit that landed (``version``: the registry's version holding it; None:
    nothing was committed by this request). The answer needs the new version's view; a
    store that fails while it is mirrored must not be a 503, which tells the engine the
    service was not ready and to send its request again (pyiceberg:
    ``ServiceUnavailableError``; Iceberg's Java client resends by itself): a job that then
    re-runs its append adds the rows a second time, and a create sent again hears that the
    table exists. It is the spec's answer to a commit whose outcome the engine cannot be
    told: 500, ``CommitStateUnknownException``, naming the registry's version that holds it
    (the next load of the table mirrors it); a create, whose answers the spec lists without
    one of its own, hears the same 500 (a server error: pyiceberg's ``ServerError``)."""
    if version is None:
        yield
        return
    try:
        yield
    except LakelockError as error:
        raise CatalogError(
            500,
            "CommitStateUnknownException",
            f"{landed} (the registry's version {version} holds it) but its Iceberg view "
            f"could not be written ({type(error).__name__}: {error}): load the table to see "
            f"it; do not {again}",
        ) from error


def _steering(metadata: bytes, steered: dict[str, str]) -> bytes:
    """A view's metadata written before views carried the properties that steer engines
    (its newest version mirrored by an older lakelock), with them: an engine committing to
    it writes where, and how, a lakelock commit can take its files."""
    document = orjson.loads(metadata)
    document["properties"] = {**document.get("properties", {}), **steered}
    return orjson.dumps(document)


def _vacuumed_before(root: RegistrySnapshot) -> float | None:
    """Where the lake's last vacuum's window began (seconds since the epoch): a version
    replaced before it may have lost its objects, and lakelock reads it no more (FORMAT.md
    rule 9). A root whose vacuum recorded only its cutoff stands that less the resolution
    of ``LastModified`` in, as the registry does; ``None``: no vacuum recorded either."""
    if root.vacuum_horizon is not None:
        return root.vacuum_horizon
    if root.vacuum_cutoff is None:
        return None
    return root.vacuum_cutoff - LAST_MODIFIED_RESOLUTION


def _vacuum_dropped(metadata: bytes, horizon: float) -> bytes:
    """A view's ``metadata`` without each snapshot whose successor was committed before
    ``horizon`` (seconds; vacuum's own comparison), nor its snapshot-log entries, as
    Iceberg's ``expire_snapshots`` would: a view's metadata is written once, when its
    version is mirrored, so one written before a vacuum lists versions that vacuum emptied,
    which an engine would read as missing files rather than as gone. The same bytes when
    nothing is dropped."""
    document = orjson.loads(metadata)
    snapshots = sorted(document.get("snapshots") or [], key=lambda s: s.get("sequence-number", 0))
    limit = horizon * 1000
    gone = {
        s["snapshot-id"]
        for s, successor in pairwise(snapshots)
        if successor.get("timestamp-ms", limit) < limit
    }
    if not gone:
        return metadata
    document["snapshots"] = [s for s in snapshots if s["snapshot-id"] not in gone]
    log = document.get("snapshot-log") or []
    document["snapshot-log"] = [e for e in log if e["snapshot-id"] not in gone]
    return orjson.dumps(document)


def _parts(namespace: Any) -> tuple[str, ...]:
    """A parsed ``Namespace`` (pyiceberg's root model of a list of parts) as a tuple, each
    part in NFC."""
    return _nfc(getattr(namespace, "root", namespace))


def _nfc(parts: Iterable[str]) -> tuple[str, ...]:
    """A namespace's parts in Unicode NFC, as every name a request gives is read."""
    return tuple(normalize("NFC", part) for part in parts)


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise CatalogError.bad_request(f"the request body is not JSON: {error}") from error
    if not isinstance(document, dict):
        raise CatalogError.bad_request("the request body is not a JSON object")
    return document


def _few_properties(document: dict[str, Any]) -> None:
    """A 400 for a request (a create's ``properties``, a commit's ``set-properties`` and
    ``remove-properties``) naming more properties than a commit takes, before it is parsed:
    parsing 300,000 of them alone takes seconds."""
    named: list[Any] = [document.get("properties")]
    updates = document.get("updates")
    if isinstance(updates, list):
        for update in updates:
            if isinstance(update, dict):
                named += [update.get("updates"), update.get("removals")]
    for group in named:
        if isinstance(group, dict | list):
            try:
                check_property_count(len(group))
            except InvalidArgumentError as error:
                raise CatalogError.bad_request(str(error)) from error


def _model(model: Any, body: bytes, *, defaults: dict[str, Any] | None = None) -> Any:
    """``body`` parsed as one of pyiceberg's request models (its validation: 400), with
    ``defaults`` for the fields it lacks. A type nested deeper than pyiceberg's parser
    recurses (a struct some 68 levels down) is a 400 too: the request's fault, never a 500
    a client sends again."""
    pydantic = require("pydantic", extra="iceberg", package="pyiceberg")
    document = {**(defaults or {}), **_json_object(body)}
    _few_properties(document)
    try:
        return model.model_validate(document)
    except RecursionError:
        raise CatalogError.bad_request(
            "malformed request: its types are nested too deeply to be read"
        ) from None
    except pydantic.ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()[:5]
        )
        raise CatalogError.bad_request(f"malformed request: {problems}") from error
