"""``lakelock serve``: the embedded S3 endpoint (:mod:`lakelock.testing`) for local work.

Creates the ``--bucket`` buckets, applies ``--policy`` to them, adds latency and faults, prints
the URL with ready-to-paste settings, and serves until Ctrl-C (or SIGTERM). Requests must be
signed (SigV4) with the printed access key (or a ``--principal``'s) and secret, as S3 checks
them, so a credentials mistake shows here and not first on AWS; ``--no-auth`` accepts any.
With ``--catalog`` the Iceberg REST catalog (``lakelock catalog``) serves a lake on it beside
the S3 endpoint.
"""

from __future__ import annotations

import argparse
import errno
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from lakelock._cli._catalog import add_catalog_options, catalog_banner, catalog_server
from lakelock._cli._common import (
    add_command,
    add_listen_options,
    bucket_name,
    parse_lake_url,
    port_number,
    wait_for_interrupt,
)
from lakelock._client import s3_client
from lakelock._lake import Lake

if TYPE_CHECKING:
    from lakelock._catalog import CatalogServer

__all__ = ["add_parser", "run"]


def _fault(text: str) -> list[Any]:
    """``--fault`` values: one or more comma-separated fault specs, parsed now so a typo is a
    usage error (exit 2), not a server that silently injects nothing."""
    from lakelock.testing import parse_fault_spec  # noqa: PLC0415 - moto: the optional `local` extra

    try:
        return [parse_fault_spec(spec) for spec in text.split(",") if spec.strip()]
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _latency(text: str) -> tuple[float, float]:
    """``SECONDS`` or ``SECONDS+JITTER``."""
    delay, _, jitter = text.partition("+")
    try:
        values = float(delay), float(jitter or 0)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid latency {text!r}: seconds, optionally +jitter (e.g. 0.03+0.02)"
        ) from None
    if values[0] < 0 or values[1] < 0:
        raise argparse.ArgumentTypeError(f"invalid latency {text!r}: must be >= 0")
    return values


def _principal(text: str) -> tuple[str, str]:
    key, sep, arn = text.partition("=")
    if not sep or not key or not arn:
        raise argparse.ArgumentTypeError(f"expected ACCESS_KEY=ARN, got {text!r}")
    return key, arn


def add_parser(commands: Any) -> None:
    add_command(
        commands,
        "serve",
        run,
        help="run the embedded S3 endpoint for local development",
        description="Serve an S3 endpoint on this machine: moto's S3 behind lakelock's "
        "gateway (atomic conditional writes, If-Match on multipart completion, bucket "
        "policies, 409s) with optional latency and seeded faults. Runs until Ctrl-C.",
        arguments=_arguments,
    )


def _arguments(parser: argparse.ArgumentParser) -> None:
    add_listen_options(parser, port=9000)
    parser.add_argument(
        "--bucket",
        action="append",
        type=bucket_name,
        default=[],
        metavar="NAME",
        help="create this bucket at start (repeat for several; default: none, any S3 client "
        "can create one)",
    )
    parser.add_argument(
        "--policy",
        type=Path,
        metavar="FILE",
        help="bucket policy JSON (e.g. from `lakelock policy`) applied to every --bucket "
        "(default: none)",
    )
    parser.add_argument(
        "--principal",
        action="append",
        type=_principal,
        default=[],
        metavar="KEY=ARN",
        help="the principal ARN bucket policies see for an access key id (repeat for "
        "several; default: arn:aws:iam::123456789012:user/KEY)",
    )
    parser.add_argument(
        "--latency",
        type=_latency,
        metavar="S[+J]",
        help="add S seconds (plus up to J random) to every request (default: none)",
    )
    parser.add_argument(
        "--fault",
        "--faults",
        dest="faults",
        action="append",
        type=_fault,
        default=[],
        metavar="SPEC",
        help="inject faults: kind[=delay[+jitter]][:operation[:prefix]][@probability][#count], "
        "e.g. lost_ack:PutObject:metastore/@0.1 (repeat or comma-separate; default: none)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the fault generator (default 0)"
    )
    parser.add_argument(
        "--no-auth",
        dest="auth",
        action="store_false",
        help="accept any access key and secret (by default a request must be signed with the "
        "printed access key, or a --principal's, and the printed secret, as S3 checks: 403 "
        "InvalidAccessKeyId or SignatureDoesNotMatch otherwise)",
    )
    group = parser.add_argument_group("Iceberg REST catalog (lakelock catalog)")
    group.add_argument(
        "--catalog",
        nargs="?",
        const="",
        default=None,
        type=_catalog_url,
        metavar="URL",
        help="also serve this lake (default: the first --bucket) as an Iceberg REST catalog, "
        "on --host",
    )
    group.add_argument(
        "--catalog-port",
        type=port_number,
        default=8181,
        metavar="PORT",
        help="the catalog's port (0: any free port; default 8181)",
    )
    add_catalog_options(group, prefix="catalog-")


def _catalog_url(text: str) -> str:
    """``--catalog``'s lake URL, checked now (empty: the first ``--bucket``)."""
    if text:
        parse_lake_url(text)  # argparse.ArgumentTypeError when malformed
    return text


def _listen(make_server: Any, args: argparse.Namespace, **options: Any) -> Any:
    """``make_server`` on ``--host`` and ``--port``; a port in use says which option to
    change."""
    try:
        return make_server(args.host, args.port, **options)
    except OSError as error:
        if error.errno != errno.EADDRINUSE:
            raise
        message = (
            f"port {args.port} of {args.host} is in use: stop what listens there, or pass "
            "another --port (0: any free port)"
        )
        raise OSError(error.errno, message) from error


def run(args: argparse.Namespace) -> int:
    try:
        from lakelock.testing import (  # noqa: PLC0415 - moto: the optional `local` extra
            DEFAULT_ACCESS_KEY,
            DEFAULT_SECRET_KEY,
            FaultRule,
            client_kwargs,
            make_server,
        )
    except ImportError as error:
        raise OSError(str(error)) from error

    policy = None
    if args.policy is not None:
        if not args.bucket:
            raise ValueError("--policy needs at least one --bucket to apply it to")
        try:
            policy = orjson.loads(args.policy.read_bytes())
        except orjson.JSONDecodeError as error:
            raise ValueError(f"{args.policy}: not valid JSON ({error})") from None
    principals = dict(args.principal)
    credentials = None
    if args.auth:
        credentials = dict.fromkeys([DEFAULT_ACCESS_KEY, *principals], DEFAULT_SECRET_KEY)
    server, gateway = _listen(make_server, args, principals=principals, credentials=credentials)
    thread = threading.Thread(target=server.serve_forever, name="lakelock-serve", daemon=True)
    thread.start()
    try:
        gateway.faults.reseed(args.seed)
        host = "127.0.0.1" if args.host in {"0.0.0.0", "::", ""} else args.host
        url = f"http://{host}:{server.server_port}"
        client = s3_client(**client_kwargs(url))
        for bucket in args.bucket:
            client.create_bucket(Bucket=bucket)
            if policy is not None:
                gateway.policies.put(bucket, policy)  # ValueError if malformed
        # Faults last: setting up must not meet them.
        if args.latency is not None:
            delay, jitter = args.latency
            gateway.faults.add(FaultRule(kind="latency", delay=delay, jitter=jitter))
        for rules in args.faults:
            for rule in rules:
                gateway.faults.add(rule)
        catalog = _start_catalog(args, client) if args.catalog is not None else None
        try:
            extra = [*catalog_banner(catalog), ""] if catalog is not None else []
            faults = len(gateway.faults.rules())
            sys.stdout.write(
                _banner(url, args, (DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY), faults, extra=extra)
            )
            sys.stdout.flush()
            wait_for_interrupt()
        finally:
            if catalog is not None:
                catalog.close()
        sys.stdout.write("stopped\n")
        return 0
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _start_catalog(args: argparse.Namespace, client: Any) -> CatalogServer:
    """The catalog over ``--catalog`` (or the first ``--bucket``), started."""
    if args.catalog:
        target = parse_lake_url(args.catalog)
    elif args.bucket:
        target = parse_lake_url(args.bucket[0])
    else:
        raise ValueError("--catalog needs a lake URL or a --bucket to serve")
    lake = Lake(target.bucket, prefix=target.prefix, s3=client)
    return catalog_server(lake, args, prefix="catalog-", port=args.catalog_port, quiet=True).start()


def _banner(
    url: str,
    args: argparse.Namespace,
    credentials: tuple[str, str],
    faults: int,
    *,
    extra: list[str],
) -> str:
    bucket = args.bucket[0] if args.bucket else "BUCKET"
    buckets = ", ".join(args.bucket) or "none yet (create with `aws s3 mb` or boto3)"
    policy = f" (bucket policy from {args.policy})" if args.policy is not None else ""
    lines = [
        f"lakelock S3 endpoint: {url}",
        f"buckets: {buckets}{policy}",
    ]
    if faults:
        lines.append(f"faults: {faults} rule(s), seed {args.seed}")
    access_key, secret = credentials
    if args.auth:
        keys = ", ".join([access_key, *(key for key, _ in args.principal)])
        lines.append(f"signatures checked: access keys {keys}, secret {secret} (--no-auth: any)")
    else:
        lines.append("signatures not checked (--no-auth): any access key and secret")
    flags = f"--endpoint-url {url}"
    lines += [
        "",
        "Point AWS tools, boto3 and lakelock at it:",
        f"  export AWS_ENDPOINT_URL={url}",
        f"  export AWS_ACCESS_KEY_ID={access_key} AWS_SECRET_ACCESS_KEY={secret} "
        "AWS_DEFAULT_REGION=us-east-1",
        "",
        f"  lakelock registry show s3://{bucket} {flags}",
        f"  lakelock doctor s3://{bucket} {flags}",
        f'  lakelock.Lake.from_url("s3://{bucket}", endpoint_url="{url}")',
        "",
        *extra,
        "Ctrl-C to stop.",
        "",
    ]
    return "\n".join(lines)
