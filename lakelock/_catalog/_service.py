"""What the catalog answers, read off one :class:`~lakelock.Lake`: its datasets as tables in
one namespace, and each table's current Iceberg view.

The registry stays the one source of truth. Loading a table reads the registry root, and when
the dataset changed after the view this catalog last handed out (``updated_version`` above the
mirrored ``version``) it mirrors first (:meth:`lakelock.Lake.mirror`, idempotent and safe
beside other mirrors), then answers the newest ``metadata.json``. A metadata file is
write-once, so its bytes are cached by location and sent as they are stored.

Credentials: the client ``defaults`` name the S3 endpoint, region and addressing, never keys.
Only a catalog made with ``vend_credentials=True`` puts the lake's own S3 credentials (those
of its boto3 client) into each load-table answer, as ``config`` and ``storage-credentials``.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from lakelock._catalog._protocol import CatalogError
from lakelock._connection import Connection
from lakelock._lake import Lake
from lakelock._layout import DATASETS_PREFIX, VIEWS_PREFIX
from lakelock.errors import DatasetNotFoundError

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


@dataclass(frozen=True)
class LoadedTable:
    """A table's current view: where its ``metadata.json`` is and what it holds (the bytes
    as stored), the lakelock version it mirrors, and the per-table client ``config``."""

    metadata_location: str
    metadata: bytes
    version: int
    config: dict[str, str]
    storage_credentials: tuple[dict[str, Any], ...] = ()

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
        mirror: Callable[[str], MirroredView] | None = None,
        log: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not namespace or "\x1f" in namespace:
            raise ValueError(f"invalid namespace {namespace!r}: non-empty, one part")
        self.lake = lake
        self.namespace = namespace
        self.vend_credentials = vend_credentials
        self._mirror = mirror or self._lake_mirror
        self._log = log
        self._clock = clock
        self._views: dict[str, MirroredView] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._metadata: OrderedDict[str, bytes] = OrderedDict()
        self._guard = threading.Lock()

    def _lake_mirror(self, name: str) -> MirroredView:
        result: MirroredView = self.lake.mirror(name, formats=("iceberg",))
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
        if namespace != (self.namespace,):
            raise CatalogError.no_such_namespace(namespace)

    def tables(self, namespace: tuple[str, ...]) -> list[str]:
        """The dataset names, sorted."""
        self.check_namespace(namespace)
        return sorted(self.lake.registry.read().datasets)

    def table_exists(self, namespace: tuple[str, ...], table: str) -> bool:
        self.check_namespace(namespace)
        return table in self.lake.registry.read().datasets

    def load_table(self, namespace: tuple[str, ...], table: str) -> LoadedTable:
        """The dataset's current Iceberg view, mirrored first when the registry is ahead of
        it. A table of a namespace that does not exist does not exist either: Java clients
        (Iceberg's RESTCatalog, so Spark) resolve ``ns.table.snapshots`` by loading the table
        ``snapshots`` of the namespace ``ns.table`` first, and go on to the metadata table
        only when told ``NoSuchTableException``."""
        if namespace != (self.namespace,):
            raise CatalogError.no_such_table(namespace, table)
        datasets = self.lake.registry.read().datasets
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
        return LoadedTable(
            location, self._metadata_bytes(location), view.version, config, storage_credentials
        )

    def _mirror_now(self, namespace: tuple[str, ...], table: str) -> MirroredView:
        if self._log is not None:
            self._log(f"mirroring {table} ...")
        started = self._clock()
        try:
            view = self._mirror(table)
        except DatasetNotFoundError as error:  # dropped between the read and the mirror
            raise CatalogError.no_such_table(namespace, table) from error
        if self._log is not None:
            self._log(
                f"mirrored {table} to lakelock version {view.version} "
                f"({self._clock() - started:.2f} s)"
            )
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

    def _lake_key(self, location: str) -> str:
        """``location`` (``s3://bucket/prefix/...``) as a key inside the lake."""
        base = f"s3://{self.lake.bucket}/{self.lake.prefix}"
        if not location.startswith(base):
            raise CatalogError(
                500, "InternalServerError", f"view metadata {location} is outside the lake {base}"
            )
        return location[len(base) :]
