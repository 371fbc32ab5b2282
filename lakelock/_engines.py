"""The S3 settings each engine needs, derived from one :class:`~lakelock._connection.Connection`,
and the optional imports behind lakelock's extras.

=============  =============================================================================
engine         what it gets
=============  =============================================================================
pyarrow        ``pyarrow.fs.S3FileSystem`` (keys, region, ``endpoint_override``, scheme)
DuckDB         the httpfs extension loaded, and a temporary S3 secret scoped to the lake's
               ``s3://bucket/prefix`` (``KEY_ID``/``SECRET``/``SESSION_TOKEN``, ``REGION``,
               ``ENDPOINT``, ``URL_STYLE 'path'``, ``USE_SSL`` per the endpoint's scheme)
Polars         ``storage_options`` for its object store (``aws_endpoint_url``,
               ``aws_allow_http``, ``aws_virtual_hosted_style_request``...)
=============  =============================================================================

httpfs comes from DuckDB's own extension directory when it is installed there, else from the
``duckdb-extension-httpfs`` package the ``duckdb`` extra installs (so nothing is downloaded
at run time); a missing engine is :class:`~lakelock.errors.MissingExtraError`.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
from pathlib import Path
from typing import Any

from lakelock._connection import Connection
from lakelock.errors import MissingExtraError

__all__ = [
    "DUCKDB_MIN_THREADS",
    "duckdb_connection",
    "load_httpfs",
    "polars_storage_options",
    "pyarrow_filesystem",
    "require",
    "s3_secret_sql",
    "sql_identifier",
    "sql_string",
]


#: Threads of a DuckDB connection lakelock opens (at least; more if DuckDB's default is more).
DUCKDB_MIN_THREADS = 8


def require(module: str, *, extra: str, package: str | None = None) -> Any:
    """``import module``, or :class:`MissingExtraError` naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise MissingExtraError(extra, package=package or module) from error


def pyarrow_filesystem(connection: Connection) -> Any:
    """A ``pyarrow.fs.S3FileSystem`` for ``connection``."""
    from pyarrow import fs  # noqa: PLC0415 - pyarrow's S3 support is loaded only when used

    options: dict[str, Any] = {"region": connection.region or "us-east-1"}
    if connection.access_key is None:
        options["anonymous"] = True
    else:
        options.update(
            access_key=connection.access_key,
            secret_key=connection.secret_key,
            session_token=connection.session_token,
        )
    if connection.host is not None:
        options.update(endpoint_override=connection.host, scheme=connection.scheme)
    if connection.addressing_style == "virtual":
        options["force_virtual_addressing"] = True
    return fs.S3FileSystem(**options)


def polars_storage_options(connection: Connection) -> dict[str, str]:
    """Polars' (object_store's) ``storage_options`` for ``connection``."""
    options = {"aws_region": connection.region or "us-east-1"}
    if connection.access_key is None:
        options["aws_skip_signature"] = "true"
    else:
        options["aws_access_key_id"] = connection.access_key
        options["aws_secret_access_key"] = connection.secret_key or ""
        if connection.session_token:
            options["aws_session_token"] = connection.session_token
    if connection.endpoint_url is not None:
        options["aws_endpoint_url"] = connection.endpoint_url
        options["aws_allow_http"] = "true" if connection.scheme == "http" else "false"
    options["aws_virtual_hosted_style_request"] = "false" if connection.path_style else "true"
    return options


def duckdb_connection(connection: Connection, scope: str, con: Any = None) -> Any:
    """``con`` (default: a new in-memory DuckDB connection with at least
    :data:`DUCKDB_MIN_THREADS` threads) with httpfs loaded and a secret for ``connection``
    scoped to the URL prefix ``scope``."""
    duckdb = require("duckdb", extra="duckdb")
    if con is None:
        con = duckdb.connect()
        # DuckDB reads remote files with blocking requests on its worker threads: with one
        # thread per core, S3 latency idles the cores. A connection of the caller's keeps
        # the caller's settings.
        threads = con.execute("SELECT current_setting('threads')").fetchone()[0]
        con.execute(f"SET threads = {max(int(threads), DUCKDB_MIN_THREADS)}")
    load_httpfs(duckdb, con)
    con.execute(s3_secret_sql(connection, scope))
    return con


def load_httpfs(duckdb: Any, con: Any) -> None:
    """Load DuckDB's httpfs extension without downloading it: from DuckDB's extension
    directory, else from the ``duckdb-extension-httpfs`` package."""
    try:
        con.execute("LOAD httpfs")
        return
    except duckdb.Error:
        pass
    spec = importlib.util.find_spec("duckdb_extension_httpfs")
    if spec is None or spec.origin is None:
        raise MissingExtraError("duckdb", package="duckdb-extension-httpfs")
    version = duckdb.__version__
    binary = Path(spec.origin).parent / "extensions" / f"v{version}" / "httpfs.duckdb_extension"
    if not binary.is_file():
        raise MissingExtraError(
            "duckdb",
            package="duckdb-extension-httpfs",
            reason=f"has no httpfs build for duckdb {version}",
        )
    con.execute(f"LOAD {sql_string(str(binary))}")


def s3_secret_sql(connection: Connection, scope: str) -> str:
    """``CREATE OR REPLACE TEMPORARY SECRET`` for ``connection``, scoped to ``scope``; its
    name is derived from the scope, so re-creating it replaces it."""
    name = "lakelock_" + hashlib.sha256(scope.encode()).hexdigest()[:16]
    options = [
        "TYPE s3",
        f"REGION {sql_string(connection.region or 'us-east-1')}",
        f"SCOPE {sql_string(scope)}",
    ]
    if connection.access_key is not None:
        options.append(f"KEY_ID {sql_string(connection.access_key)}")
        options.append(f"SECRET {sql_string(connection.secret_key or '')}")
        if connection.session_token:
            options.append(f"SESSION_TOKEN {sql_string(connection.session_token)}")
    if connection.host is not None:
        options.append(f"ENDPOINT {sql_string(connection.host)}")
        options.append(f"USE_SSL {'true' if connection.scheme == 'https' else 'false'}")
    options.append(f"URL_STYLE {sql_string('path' if connection.path_style else 'vhost')}")
    return f"CREATE OR REPLACE TEMPORARY SECRET {name} ({', '.join(options)})"


def sql_string(text: str) -> str:
    """A SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def sql_identifier(name: str) -> str:
    """A quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'
