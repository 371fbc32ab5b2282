"""What every command shares: S3 options and clients, error lines, tables, sizes, durations.

Output rules: results go to stdout (plain aligned tables, or JSON with ``--json``); progress
and errors go to stderr. An error is one line, ``lakelock: error: <what happened>``, and exit
status 1; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import signal
import sys
import time
import unicodedata
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from types import FrameType
from typing import Any, TextIO, TypeVar

import orjson
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
    ProfileNotFound,
    ReadTimeoutError,
    SSLError,
)

from lakelock._client import s3_client
from lakelock._durations import (
    MAX_DURATION,
    duration_seconds,
    format_duration,
    format_instant,
)
from lakelock._lake import Lake
from lakelock._names import parse_lake_url as parse_lake_url_parts
from lakelock._names import validate_bucket_name, validate_dataset_name, validate_namespace
from lakelock._registry import no_lake
from lakelock._registry._settings import MAX_COMMIT_WINDOW
from lakelock.errors import (
    AccessDeniedError,
    DatasetNotFoundError,
    InvalidArgumentError,
    InvalidNameError,
    LakelockError,
    NotFoundError,
    StorageError,
    VersionNotFoundError,
)

__all__ = [
    "Command",
    "LakeTarget",
    "add_command",
    "add_dataset_option",
    "add_debug_option",
    "add_json_option",
    "add_listen_options",
    "add_progress_option",
    "add_s3_options",
    "bucket_name",
    "century_duration",
    "client_for",
    "commit_window",
    "dataset_name",
    "endpoint_url",
    "format_duration",
    "format_size",
    "format_time",
    "join_dash_values",
    "lake_for",
    "namespace_name",
    "natural_key",
    "number_type",
    "parse_duration",
    "parse_lake_url",
    "port_number",
    "print_json",
    "render_table",
    "shown",
    "to_jsonable",
    "wait_for_interrupt",
]

#: A command's entry point: parsed arguments in, exit status out.
Command = Callable[[argparse.Namespace], int]

_Number = TypeVar("_Number", int, float)


# -- options ----------------------------------------------------------------------------------


def add_debug_option(parser: argparse.ArgumentParser, *, suppress: bool = True) -> None:
    """``--debug``, accepted before and after the command name. On a sub-command the default
    is suppressed, so a ``--debug`` given before the command name is not reset."""
    parser.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS if suppress else False,
        help="show full tracebacks instead of one-line errors",
    )


def add_s3_options(parser: argparse.ArgumentParser) -> None:
    """The connection options of every command that talks to S3."""
    group = parser.add_argument_group("S3 connection")
    group.add_argument(
        "--endpoint-url",
        type=endpoint_url,
        metavar="URL",
        help="S3 endpoint (MinIO, R2, Ceph, `lakelock serve`); default: AWS or $AWS_ENDPOINT_URL",
    )
    group.add_argument(
        "--profile",
        metavar="NAME",
        help="AWS profile from ~/.aws/config (default: $AWS_PROFILE, else the default one)",
    )
    group.add_argument(
        "--region",
        metavar="NAME",
        help="AWS region of the bucket (default: $AWS_DEFAULT_REGION, else the profile's)",
    )
    group.add_argument(
        "--addressing-style",
        choices=("auto", "path", "virtual"),
        default=None,
        help="bucket addressing (default: path with --endpoint-url, else auto)",
    )
    add_debug_option(parser)


def add_progress_option(parser: argparse.ArgumentParser, *, shows: str = "live progress") -> None:
    """``--progress``/``--no-progress`` (``shows``: what it shows); by default a command shows
    progress when stderr is a terminal (:func:`~._progress.progress_wanted`)."""
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=f"{shows} (default: when stderr is a terminal)",
    )


def add_listen_options(parser: argparse.ArgumentParser, *, port: int) -> None:
    """``--host`` and ``--port`` of a command that serves (``port``: the default)."""
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only)",
    )
    parser.add_argument(
        "--port",
        type=port_number,
        default=port,
        help=f"port, 0-65535 (0: any free port; default {port})",
    )


def add_dataset_option(
    parser: argparse.ArgumentParser, help: str, *, required: bool = False
) -> None:
    """``--dataset NAME`` (``help``: what the command does with it), checked as a dataset
    name while parsing (:func:`dataset_name`)."""
    parser.add_argument(
        "--dataset", type=dataset_name, required=required, metavar="NAME", help=help
    )


def add_command(
    commands: Any,
    name: str,
    run: Command,
    *,
    help: str,
    description: str | None = None,
    on_lake: bool = False,
    json: bool = False,
    arguments: Callable[[argparse.ArgumentParser], None] | None = None,
    check: Callable[[argparse.Namespace], None] | None = None,
) -> None:
    """Declare a command (or a sub-command) on ``commands``, an argparse sub-parsers object:
    a command ``on_lake`` takes the lake's ``URL`` first and the S3 connection options last;
    then come its own ``arguments``, ``--json`` where it prints JSON, ``--debug``, and the
    function that runs it. ``check`` judges what one option's values say together (an
    option given several times): its :class:`~lakelock.errors.InvalidArgumentError` is a
    usage error (status 2), as a value argparse refuses is."""
    parser: argparse.ArgumentParser = commands.add_parser(name, help=help, description=description)
    if on_lake:
        parser.add_argument("url", type=parse_lake_url, metavar="URL", help="s3://bucket[/prefix]")
    if arguments is not None:
        arguments(parser)
    if json:
        add_json_option(parser)
    if on_lake:
        add_s3_options(parser)
    else:
        add_debug_option(parser)
    parser.set_defaults(run=run, check=check, usage_prog=parser.prog)


def number_type(
    parse: Callable[[str], _Number], accept: Callable[[_Number], bool], expected: str
) -> Callable[[str], _Number]:
    """An argparse type for a number option: ``parse`` (``int`` or ``float``) reads it and
    ``accept`` says whether it is in range. Either failing is one usage error, ``expected
    <expected>, got '<text>'``, so every command words a bad number the same way."""

    def number(text: str) -> _Number:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not accept(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return number


#: ``--commit-window`` (argparse type): as many commit ids as a lake's root may keep.
commit_window = number_type(
    int,
    lambda value: 1 <= value <= MAX_COMMIT_WINDOW,
    f"an integer from 1 to {MAX_COMMIT_WINDOW} (the root keeps them all)",
)


def bucket_name(text: str) -> str:
    """An S3 bucket name (argparse type): one S3 would refuse is a usage error here, not a
    lake that lakelock refuses later."""
    try:
        return validate_bucket_name(text)
    except InvalidNameError as error:
        raise argparse.ArgumentTypeError(f"{error.reason}, got {text!r}") from None


def endpoint_url(text: str) -> str:
    """An endpoint URL (argparse type): ``http://`` or ``https://`` and a host, as boto3
    needs it; a bare ``host:port`` is a usage error saying so."""
    scheme, _, rest = text.partition("://")
    if scheme not in ("http", "https") or not rest.strip("/"):
        raise argparse.ArgumentTypeError(
            f"expected http://host[:port] or https://host[:port], got {text!r}"
        )
    return text


def dataset_name(text: str) -> str:
    """A dataset name (argparse type): an invalid one is a usage error, not "not found"."""
    try:
        return validate_dataset_name(text)
    except InvalidNameError as error:
        raise argparse.ArgumentTypeError(f"invalid dataset name {text!r}: {error.reason}") from None


def namespace_name(text: str) -> str:
    """The catalog's namespace (argparse type): one a REST client would read as another (a
    ``.`` makes two levels) is a usage error before the catalog starts."""
    try:
        return validate_namespace(text)
    except InvalidNameError as error:
        raise argparse.ArgumentTypeError(f"invalid namespace {text!r}: {error.reason}") from None


#: Options whose value may begin with ``-`` (a negative duration is refused by its type with
#: a clear message, instead of argparse taking ``-1h`` for an option).
DASH_VALUE_OPTIONS = frozenset({"--older-than", "--retention"})


def join_dash_values(argv: Sequence[str]) -> list[str]:
    """``["--older-than", "-1h"]`` → ``["--older-than=-1h"]`` for :data:`DASH_VALUE_OPTIONS`."""
    out: list[str] = []
    items = iter(argv)
    for item in items:
        if item in DASH_VALUE_OPTIONS:
            value = next(items, None)
            if value is not None and value.startswith("-") and value[1:2] not in ("", "-"):
                out.append(f"{item}={value}")
                continue
            out.append(item)
            if value is not None:
                out.append(value)
            continue
        out.append(item)
    return out


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key putting ``day=2`` before ``day=10``: runs of digits compare as numbers."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", text) if part
    )


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable JSON on stdout")


# -- clients and lakes --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LakeTarget:
    """``s3://bucket/prefix`` taken apart; ``prefix`` is empty or ends with ``/``."""

    bucket: str
    prefix: str

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def parse_lake_url(text: str) -> LakeTarget:
    """``s3://bucket[/prefix]`` (a bare ``bucket`` is accepted too), checked as
    :meth:`lakelock.Lake.from_url` checks it: an argparse type, so a bad URL is a usage
    error before anything is sent."""
    try:
        bucket, prefix = parse_lake_url_parts(text, bare_bucket=True)
    except InvalidNameError as error:
        raise argparse.ArgumentTypeError(f"{error.reason}, got {text!r}") from None
    return LakeTarget(bucket, prefix)


def client_for(args: argparse.Namespace, *, max_attempts: int | None = None) -> Any:
    """A boto3 S3 client from the connection options (profile, region, endpoint).

    The SDK retries 5xx and connection errors (standard mode; ``$AWS_MAX_ATTEMPTS`` or the
    profile's ``max_attempts`` when set, else ``max_attempts``, else botocore's default);
    lakelock itself decides 409 and 412.
    """
    retries: dict[str, Any] = {"mode": "standard"}
    if max_attempts is not None:
        retries["total_max_attempts"] = max_attempts
    style = args.addressing_style or ("path" if args.endpoint_url else "auto")
    config = Config(
        retries=retries,
        s3={"addressing_style": style},
        connect_timeout=10,
        read_timeout=60,
        max_pool_connections=32,
    )
    return s3_client(
        profile_name=args.profile,
        region_name=args.region,
        endpoint_url=args.endpoint_url,
        config=config,
    )


def lake_for(args: argparse.Namespace, target: LakeTarget) -> Lake:
    """A :class:`~lakelock.Lake` for ``target`` through :func:`client_for`."""
    return Lake(target.bucket, prefix=target.prefix, s3=client_for(args))


def check_bucket(client: Any, bucket: str) -> None:
    """Raise a clear error if ``bucket`` does not exist or cannot be reached.

    Reading a missing registry is not an error (a new lake has none), and S3 answers a missing
    *bucket* with the same 404 family: commands that found nothing check the bucket itself.
    """
    try:
        client.head_bucket(Bucket=bucket)
    except ClientError as error:
        status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
        if status == 404:
            raise NotFoundError(
                f"bucket {bucket!r} does not exist", bucket=bucket, operation="HeadBucket"
            ) from error
        if status == 403:
            raise AccessDeniedError(
                f"access to bucket {bucket!r} denied (HeadBucket answered 403)",
                bucket=bucket,
                operation="HeadBucket",
            ) from error
        raise


def check_lake(lake: Lake, target: LakeTarget, *, otherwise: str = "") -> None:
    """Raise a clear error if no lake lives at ``target``: no bucket (:func:`check_bucket`), or
    no registry root under its prefix. Commands that work around the registry (vacuum, locks,
    mirror) would otherwise report an empty lake where the bucket or prefix was mistyped, and
    vacuum would judge every object there unreferenced; ``configure`` would start a new lake
    there. ``otherwise``: what the error adds (how to go on if the prefix was meant)."""
    if lake.registry.read().version != 0:
        return
    check_bucket(lake.client, target.bucket)
    raise no_lake(lake.registry.store, otherwise=otherwise)


# -- output -------------------------------------------------------------------------------------


def render_table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], *, right: Sequence[str] = ()
) -> list[str]:
    """Aligned plain-text lines: a header row, then ``rows``. Columns named in ``right`` are
    right-aligned (numbers); the last column is not padded."""
    cells = [[shown(str(h)) for h in headers]] + [
        ["" if c is None else shown(str(c)) for c in r] for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        out = []
        for i, cell in enumerate(row):
            last = i == len(headers) - 1
            if headers[i] in right:
                out.append(cell.rjust(widths[i]))
            else:
                out.append(cell if last else cell.ljust(widths[i]))
        lines.append("  ".join(out).rstrip())
    return lines


def print_lines(lines: Sequence[str], out: TextIO | None = None) -> None:
    """Write ``lines``, each :func:`shown`."""
    stream = out or sys.stdout
    for line in lines:
        stream.write(shown(line) + "\n")


#: The bidirectional classes of the characters that reorder what follows them on a line
#: (embeddings, overrides, isolates and their ends): a terminal drawing them shows text
#: other than the text printed (U+202E hides a file name's extension).
_BIDI_CONTROLS = frozenset({"LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI"})


def shown(text: str) -> str:
    """``text`` with each control character (category Cc: C0, DEL, C1) and each
    bidirectional override, embedding or isolate written as its Python escape (``\\x1b``,
    ``\\n``, ``\\u202e``): what a lake holds (a property, a column name) reaches a terminal
    as text, never as a sequence the terminal executes, a line it breaks, or a line it
    draws in another order."""
    if text.isprintable():
        return text
    return "".join(
        char.encode("unicode_escape").decode("ascii") if _hidden(char) else char for char in text
    )


def _hidden(char: str) -> bool:
    return unicodedata.category(char) == "Cc" or unicodedata.bidirectional(char) in _BIDI_CONTROLS


def to_jsonable(value: Any) -> Any:
    """Plain JSON data from dataclasses, mappings, sequences, datetimes and Arrow schemas."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: to_jsonable(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if not f.name.startswith("_")
        }
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if value is None or isinstance(value, str | int | float | bool):
        return value
    fields = getattr(value, "names", None)
    if fields is not None and hasattr(value, "field"):  # a pyarrow.Schema
        return [
            {"name": f.name, "type": str(f.type), "nullable": f.nullable}
            for f in (value.field(i) for i in range(len(value.names)))
        ]
    return str(value)


def print_json(value: Any, out: TextIO | None = None, *, sort_keys: bool = True) -> None:
    """``value`` as indented JSON, every control character escaped (:data:`_JSON_ESCAPES`);
    ``sort_keys=False`` keeps the order mappings were built in (partitions in natural
    order)."""
    option = orjson.OPT_INDENT_2 | (orjson.OPT_SORT_KEYS if sort_keys else 0)
    text = orjson.dumps(to_jsonable(value), option=option)
    (out or sys.stdout).write(text.decode().translate(_JSON_ESCAPES) + "\n")


#: What JSON lets a string hold raw but a terminal acts on, as ``\uXXXX`` escapes (the same
#: JSON, parsed): DEL, the C1 controls (U+009B starts a control sequence, as ESC ``[`` does)
#: and the bidirectional controls :func:`shown` escapes. JSON escapes C0 itself. Only strings
#: can hold them, so the escape is always inside one.
_JSON_ESCAPES = {
    code: f"\\u{code:04x}"
    for code in (0x7F, *range(0x80, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A))
}


_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_size(size: int) -> str:
    """``1536`` → ``1.5 KiB``."""
    if size < 1024:
        return f"{size} B"
    exponent = min(int(math.log(size, 1024)), len(_UNITS) - 1)
    return f"{size / 1024**exponent:.1f} {_UNITS[exponent]}"


def format_time(epoch: float) -> str:
    """Seconds since the epoch as UTC ISO 8601, to the second (as seconds past the year
    9999, where no date holds it)."""
    return format_instant(epoch, "%Y-%m-%dT%H:%M:%SZ")


def parse_duration(text: str) -> float:
    """``"24h"``, ``"90m"``, ``"1d12h"``, ``"30s"``, ``"3600"`` → seconds (argparse type)."""
    try:
        return duration_seconds(text)
    except InvalidArgumentError as error:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: {error.reason}") from None


def century_duration(text: str) -> float:
    """A duration of at most a century (argparse type), as the library bounds every
    duration a lake keeps or waits (``MAX_DURATION``), refused above it as a usage error."""
    seconds = parse_duration(text)
    if seconds > MAX_DURATION:
        raise argparse.ArgumentTypeError(f"at most a century (36500d), got {text!r}")
    return seconds


def iter_causes(error: BaseException) -> Iterator[BaseException]:
    """``error`` and every exception it was raised from or during, innermost last."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def describe_error(error: BaseException, args: argparse.Namespace | None = None) -> str:
    """One line saying what went wrong, for ``lakelock: error: ...``."""
    endpoint = getattr(args, "endpoint_url", None) if args is not None else None
    for cause in iter_causes(error):
        if isinstance(cause, EndpointConnectionError | ConnectTimeoutError):
            url = endpoint or cause.kwargs.get("endpoint_url") or "the S3 endpoint"
            return f"cannot connect to {url}: is the endpoint running and reachable?"
        if isinstance(cause, SSLError):
            url = endpoint or "the S3 endpoint"
            return (
                f"cannot connect to {url}: the TLS handshake failed (an https:// URL for a "
                "plain-http endpoint?)"
            )
        if isinstance(cause, ReadTimeoutError):
            return f"the S3 endpoint did not answer in time ({cause})"
        if isinstance(cause, NoCredentialsError | PartialCredentialsError):
            return (
                "no AWS credentials found: pass --profile, or set AWS_PROFILE or "
                "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
            )
        if isinstance(cause, ProfileNotFound):
            return f"AWS profile not found: {cause.kwargs.get('profile')!r}"
        if isinstance(cause, NoRegionError):
            return "no AWS region configured: pass --region or set AWS_DEFAULT_REGION"
    code, bucket = _s3_code(error)
    if code == "NoSuchBucket":
        return f"bucket {bucket!r} does not exist" if bucket else "the bucket does not exist"
    if code in _REFUSED_CREDENTIALS:
        return (
            f"the S3 endpoint refused these credentials ({code}): check AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, or --profile, for this endpoint"
        )
    if isinstance(error, DatasetNotFoundError) and not isinstance(error, VersionNotFoundError):
        url = getattr(getattr(args, "url", None), "url", None)
        if url is not None:
            return f"{error}: `lakelock registry show {url}` lists its datasets"
    if isinstance(error, ClientError):
        info = error.response.get("Error", {})
        return f"{info.get('Code', 'error')}: {info.get('Message', str(error))}"
    if isinstance(error, InvalidArgumentError):
        return str(error)
    if isinstance(error, OSError) and type(error) in _OS_ERRORS and error.strerror:
        where = f": {error.filename}" if error.filename is not None else ""
        return f"{error.strerror}{where}"
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


#: The operating system's errors, as Python raises them for a file or a socket (subclasses of
#: OSError that lakelock raises, such as its storage errors, say more in their own words).
_OS_ERRORS = (OSError, FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)

#: The S3 error codes of a request signed with credentials the endpoint does not accept.
_REFUSED_CREDENTIALS = frozenset({"InvalidAccessKeyId", "SignatureDoesNotMatch"})


def _s3_code(error: BaseException) -> tuple[str | None, str | None]:
    """The S3 error code of ``error`` (a lakelock storage error, or boto3's own) and the
    bucket it was about, when known."""
    if isinstance(error, StorageError):
        return error.code, error.bucket
    if isinstance(error, ClientError):
        bucket = error.response.get("Error", {}).get("BucketName")
        return error.response.get("Error", {}).get("Code"), bucket
    return None, None


def is_expected(error: BaseException) -> bool:
    """Whether ``error`` is an outcome a user can act on (S3, lakelock, files, bad values),
    as opposed to a bug worth a traceback."""
    return isinstance(error, LakelockError | BotoCoreError | ClientError | OSError | ValueError)


# -- servers (serve, catalog) ---------------------------------------------------------------


def port_number(text: str) -> int:
    """A TCP port, 0 (any free port) to 65535."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}: a whole number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}: 0 to 65535 (0: any free port)")
    return port


def wait_for_interrupt() -> None:
    """Block until Ctrl-C or SIGTERM."""

    def stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
