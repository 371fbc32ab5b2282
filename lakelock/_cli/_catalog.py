"""``lakelock catalog``: serve a lake as an Iceberg REST catalog until Ctrl-C (taking
commits, unless ``--read-only``).

The work is :mod:`lakelock._catalog`'s; this command builds the lake from the S3 options,
checks the options that guard the lake's credentials, prints where to point engines, and
logs one line per request (and per mirroring) on stderr unless ``--quiet``.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from typing import TYPE_CHECKING, Any

from lakelock._cli._common import (
    LakeTarget,
    add_command,
    add_listen_options,
    check_bucket,
    client_for,
    namespace_name,
    wait_for_interrupt,
)
from lakelock._lake import Lake

if TYPE_CHECKING:  # the server is imported when a catalog starts, not by every command
    from lakelock._catalog import CatalogServer

__all__ = [
    "TOKEN_ENV",
    "add_catalog_options",
    "add_parser",
    "catalog_banner",
    "catalog_server",
    "run",
]

#: Where the bearer token is read from when ``--token`` is not given.
TOKEN_ENV = "LAKELOCK_CATALOG_TOKEN"

#: The namespace the datasets appear in unless --namespace says otherwise (as
#: ``lakelock._catalog.DEFAULT_NAMESPACE``; a test checks they agree).
DEFAULT_NAMESPACE = "lake"

#: The Iceberg REST catalog's customary port.
DEFAULT_PORT = 8181


def add_parser(commands: Any) -> None:
    add_command(
        commands,
        "catalog",
        run,
        help="serve the lake as an Iceberg REST catalog that takes commits",
        description="Serve the lake as an Iceberg REST catalog for pyiceberg, DuckDB, Spark, "
        "Trino: one namespace, one table per dataset. Loading a table answers the dataset's "
        "current Iceberg view, mirrored first when the registry is ahead of it. Engines "
        "create tables and commit appends, overwrites, copy-on-write deletes and added "
        "columns: each commit is one lakelock commit. --read-only: commits, views and scan "
        f"planning answer 406. Token: --token or ${TOKEN_ENV}; without one, commits are "
        "taken from this machine only and the catalog must listen on a loopback address. "
        "Runs until Ctrl-C.",
        on_lake=True,
        arguments=_arguments,
    )


def _arguments(parser: argparse.ArgumentParser) -> None:
    add_listen_options(parser, port=DEFAULT_PORT)
    add_catalog_options(parser, prefix="")
    parser.add_argument("--quiet", action="store_true", help="no request log on stderr")


def add_catalog_options(parser: argparse._ActionsContainer, *, prefix: str) -> None:
    """The catalog's namespace, token and credential options (``prefix``: ``"catalog-"`` on
    ``lakelock serve``)."""
    parser.add_argument(
        f"--{prefix}namespace",
        type=namespace_name,
        default=DEFAULT_NAMESPACE,
        metavar="NAME",
        help=f"the namespace the datasets appear in: one level, no '.' (default "
        f"{DEFAULT_NAMESPACE!r})",
    )
    parser.add_argument(
        f"--{prefix}token",
        metavar="TOKEN",
        help="require 'Authorization: Bearer TOKEN' on every request (default: "
        f"${TOKEN_ENV} if set, else no token); OAuth2 clients use it as the client secret",
    )
    parser.add_argument(
        f"--{prefix}read-only",
        action="store_true",
        help="take no commits (engines only read; writes answer 406)",
    )
    parser.add_argument(
        f"--{prefix}vend-credentials",
        action="store_true",
        help="hand this command's own S3 credentials to every client that loads a table "
        "(default: never; clients bring their own). Off loopback it needs a token",
    )


def catalog_server(
    lake: Lake, args: argparse.Namespace, *, prefix: str, port: int, quiet: bool
) -> CatalogServer:
    """The catalog server for ``lake`` (not started), on ``--host`` and ``port``, as the
    options :func:`add_catalog_options` added with ``prefix`` ask. No ``--token`` falls back
    to ``$LAKELOCK_CATALOG_TOKEN``. Refuses to hand credentials to an unauthenticated
    network."""
    from lakelock._catalog import CatalogServer, LakeCatalog  # noqa: PLC0415 - see imports

    host: str = args.host
    option = prefix.replace("-", "_")
    namespace: str = getattr(args, f"{option}namespace")
    token: str | None = getattr(args, f"{option}token")
    vend_credentials: bool = getattr(args, f"{option}vend_credentials")
    read_only: bool = getattr(args, f"{option}read_only")
    token = token if token is not None else os.environ.get(TOKEN_ENV) or None
    if vend_credentials and token is None and not _loopback(host):
        raise ValueError(
            f"--vend-credentials on {host} without a token would give the lake's S3 "
            f"credentials to anyone who reaches the port: pass --token (or set ${TOKEN_ENV}), "
            "or listen on 127.0.0.1"
        )
    if not read_only and token is None and not _loopback(host):
        raise ValueError(
            f"a catalog that takes commits on {host} without a token would let anyone who "
            f"reaches the port change the lake: pass --token (or set ${TOKEN_ENV}), "
            "--read-only, or listen on 127.0.0.1"
        )
    log = None if quiet else _log
    catalog = LakeCatalog(
        lake,
        namespace=namespace,
        vend_credentials=vend_credentials,
        read_only=read_only,
        log=log,
    )
    return CatalogServer(catalog, host=host, port=port, token=token, log=log)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _log(line: str) -> None:
    sys.stderr.write(f"catalog: {line}\n")
    sys.stderr.flush()


def catalog_banner(server: CatalogServer) -> list[str]:
    """Where the catalog is and how engines attach to it."""
    catalog = server.catalog
    auth = "bearer token required" if server.token is not None else "no token"
    vend = "vends S3 credentials" if catalog.vend_credentials else "vends no credentials"
    if catalog.read_only:
        writes = "read-only"
    elif server.token is None:
        writes = "commits from this machine only"
    else:
        writes = "takes commits"
    token = ", token='<TOKEN>'" if server.token is not None else ""
    auth_option = "TOKEN '<TOKEN>'" if server.token is not None else "AUTHORIZATION_TYPE 'none'"
    return [
        f"lakelock Iceberg REST catalog: {server.url} ({catalog.lake.url}, namespace "
        f"{catalog.namespace!r}; {auth}; {vend}; {writes})",
        f"  pyiceberg: RestCatalog('lake', uri='{server.url}'{token}, "
        "**{'s3.access-key-id': ..., 's3.secret-access-key': ...})",
        f"  DuckDB:    ATTACH 'lake' AS lake (TYPE iceberg, ENDPOINT '{server.url}', "
        f"{auth_option}) (with an S3 secret for the data)",
        f"  Spark/Trino: an Iceberg REST catalog with uri {server.url}",
    ]


def run(args: argparse.Namespace) -> int:
    target: LakeTarget = args.url
    lake = Lake(target.bucket, prefix=target.prefix, s3=client_for(args))
    check_bucket(lake.client, target.bucket)
    server = catalog_server(lake, args, prefix="", port=args.port, quiet=args.quiet)
    with server:
        try:
            sys.stdout.write("\n".join([*catalog_banner(server), "", "Ctrl-C to stop.", ""]))
            sys.stdout.flush()
            wait_for_interrupt()
        except KeyboardInterrupt:
            pass  # Ctrl-C as the banner went out, before the wait began: stop all the same
    sys.stdout.write("stopped\n")
    return 0
