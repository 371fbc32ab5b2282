"""The command line's answer to a newcomer's usual mistakes, through the embedded endpoint: a
bucket that does not exist, credentials the endpoint does not know, a dataset name mistyped,
a view format lakelock does not write. Each is one line saying what went wrong and what to do,
exit 1 (2 for bad usage), no traceback."""

from __future__ import annotations

import errno
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock.errors import NotFoundError
from lakelock.testing import S3Endpoint
from tests._support import CLI_ENV, REPO
from tests._support.processes import InProcess

#: The bound of every length of time ``simulate`` takes but ``--skew`` and ``--intent-ttl``.
CENTURY = "at most 3,153,600,000 (a century)"


def one_error_line(stderr: str) -> str:
    """The single ``lakelock: error:`` line of ``stderr`` (no traceback), without its prefix."""
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("lakelock: error: "), stderr
    return lines[0].removeprefix("lakelock: error: ")


def test_locks_of_a_missing_bucket_names_the_bucket(s3: S3Endpoint, in_process: InProcess) -> None:
    """``lakelock locks`` on a bucket that does not exist says so, as every other command
    does, instead of the raw answer of the S3 request it happened to send first."""
    result = in_process("locks", "s3://no-such-bucket-here", "--endpoint-url", s3.url)
    assert result.returncode == 1
    assert one_error_line(result.stderr) == "bucket 'no-such-bucket-here' does not exist"


@pytest.mark.parametrize(
    ("key", "secret", "code"),
    [
        ("someone", "lakelock-secret", "InvalidAccessKeyId"),
        ("lakelock", "wrong", "SignatureDoesNotMatch"),
    ],
)
def test_credentials_the_endpoint_refuses_say_which_to_check(
    in_process: InProcess, key: str, secret: str, code: str
) -> None:
    """Credentials the endpoint does not accept (an unknown access key, another secret) are
    reported as that, naming what to check, rather than as a 403 on some metastore key."""
    with S3Endpoint(credentials={"lakelock": "lakelock-secret"}) as s3:
        s3.create_bucket("lake")
        env = {**CLI_ENV, "AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret}
        result = in_process("registry", "show", "s3://lake", "--endpoint-url", s3.url, env=env)
    assert result.returncode == 1
    line = one_error_line(result.stderr)
    assert line.startswith(f"the S3 endpoint refused these credentials ({code})")
    assert "AWS_ACCESS_KEY_ID" in line
    assert "--profile" in line


@pytest.mark.parametrize("command", [("registry", "show"), ("registry", "log"), ("mirror",)])
def test_a_mistyped_dataset_points_at_the_list_of_datasets(
    s3: S3Endpoint, lake: Lake, in_process: InProcess, command: tuple[str, ...]
) -> None:
    """A dataset the registry lacks (here a typo of one it has) is refused with the command
    that lists the lake's datasets, for every command that takes ``--dataset``."""
    lake.append("sales", pa.table({"id": [1]}))
    argv = (*command, f"s3://{lake.bucket}", "--dataset", "sale", "--endpoint-url", s3.url)
    result = in_process(*argv)
    assert result.returncode == 1
    assert one_error_line(result.stderr) == (
        f"dataset 'sale' is not in the registry: "
        f"`lakelock registry show s3://{lake.bucket}/` lists its datasets"
    )


@pytest.mark.parametrize(
    "command",
    [("vacuum", "--delete"), ("locks",), ("mirror", "--dataset", "sales")],
)
def test_a_prefix_with_no_lake_is_named_as_such(
    s3: S3Endpoint, lake: Lake, client: Any, in_process: InProcess, command: tuple[str, ...]
) -> None:
    """A command pointed at a prefix with no lake (here a mistyped one beside a real lake)
    says there is no lake there, exit 1, instead of reporting an empty lake (vacuum: "0
    objects scanned", locks: no holders) or a dataset missing from a registry that does not
    exist. Vacuum deletes nothing there: with no registry, every object would look
    unreferenced."""
    lake.append("sales", pa.table({"id": [1]}))
    stray = "lake2/datasets/sales/part-0.parquet"
    client.put_object(Bucket=lake.bucket, Key=stray, Body=b"rows")
    url = f"s3://{lake.bucket}/lake2"
    result = in_process(command[0], url, *command[1:], "--endpoint-url", s3.url)
    assert result.returncode == 1
    assert one_error_line(result.stderr) == (
        f"no lake at {url}/: nothing was ever committed under this prefix (no registry); "
        "check the bucket and prefix"
    )
    listed = client.list_objects_v2(Bucket=lake.bucket, Prefix="lake2/")["Contents"]
    assert [o["Key"] for o in listed] == [stray]


def test_no_lake_is_said_in_one_wording_by_the_library_and_the_command_line(
    s3: S3Endpoint, lake: Lake, client: Any, in_process: InProcess
) -> None:
    """The library's refusal of a prefix with no lake (``configure``) and the command
    line's (vacuum, locks, mirror, ``registry configure``) are one message, made in one
    place, but for how to go on: they named the prefix two ways (``s3://b/lake2`` and
    ``s3://b/lake2/``)."""
    lake.append("sales", pa.table({"id": [1]}))
    typo = Lake(lake.bucket, prefix="lake2", s3=client)
    with pytest.raises(NotFoundError) as refused:
        typo.configure(retention="30d")
    result = in_process("vacuum", typo.url, "--endpoint-url", s3.url)
    assert result.returncode == 1
    said = one_error_line(result.stderr)
    assert said.startswith(f"no lake at {typo.url}: ")
    assert str(refused.value) == f"{said}, or pass create=True to start a lake there"


def test_an_unknown_view_format_is_a_usage_error_naming_the_formats(
    in_process: InProcess,
) -> None:
    """``mirror --format parquet`` is a usage error that names the formats there are, not
    argparse's word for a failed conversion with an internal function's name."""
    result = in_process("mirror", "s3://lake", "--dataset", "sales", "--format", "parquet")
    assert result.returncode == 2
    last = result.stderr.splitlines()[-1]
    assert last == (
        "lakelock mirror: error: argument --format: unknown view format; "
        "expected one of ['iceberg', 'delta'], got 'parquet'"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["locks", "s3://lake", "--endpoint-url", "127.0.0.1:9000"],
            "argument --endpoint-url: expected http://host[:port] or https://host[:port], "
            "got '127.0.0.1:9000'",
        ),
        (
            ["serve", "--port", "0", "--bucket", "my_bucket"],
            "argument --bucket: a bucket name is 3-63 characters of a-z, 0-9, '.' and '-', "
            "starting and ending with a letter or digit, got 'my_bucket'",
        ),
        (
            ["registry", "log", "s3://lake", "-n", "0"],
            "argument -n/--limit: expected a positive integer, got '0'",
        ),
        (
            ["registry", "configure", "s3://lake", "--commit-window", "100000000"],
            "argument --commit-window: expected an integer from 1 to 10000 (the root keeps "
            "them all), got '100000000'",
        ),
        (
            ["registry", "configure", "s3://lake", "--intent-ttl", "99999d"],
            "argument --intent-ttl: at most 1h (vacuum keeps every intent younger than it), "
            "got '99999d'",
        ),
        (
            ["registry", "configure", "s3://lake", "--retention", "99999999d"],
            "argument --retention: at most a century (36500d), got '99999999d'",
        ),
        (
            ["registry", "configure", "s3://lake", "--vacuum-floor", "36501d"],
            "argument --vacuum-floor: at most a century (36500d), got '36501d'",
        ),
    ],
)
def test_malformed_options_are_usage_errors(
    in_process: InProcess, argv: list[str], message: str
) -> None:
    """An endpoint without its scheme, a bucket name S3 would refuse (``serve`` would
    otherwise create it, and every lakelock command refuse it later), a limit of no
    commits and a lake setting above its bound (the root would grow with it) are usage
    errors naming the option, exit 2, before anything is sent."""
    result = in_process(*argv)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].endswith(f"error: {message}")


@pytest.mark.parametrize("flag", ["--older-than", "--retention"])
def test_vacuum_past_a_century_is_a_usage_error(
    s3: S3Endpoint, lake: Lake, in_process: InProcess, flag: str
) -> None:
    """``vacuum --older-than`` (and ``--retention``, the lake's as the caller expects it) is
    bounded as every other duration is, a century: past it, a usage error naming the
    bound, exit 2, before anything is sent, nothing deleted. It was taken whatever it was,
    and refused only once the lake's retention was read."""
    lake.append("sales", pa.table({"id": [1]}))
    s3.reset_stats()
    result = in_process("vacuum", lake.url, flag, "36501d", "--delete", "--endpoint-url", s3.url)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].endswith(
        f"error: argument {flag}: at most a century (36500d), got '36501d'"
    )
    assert s3.stats() == {}
    assert lake.read("sales")["id"].to_pylist() == [1]


def test_serve_on_a_port_in_use_names_the_option(in_process: InProcess) -> None:
    """``serve`` on a port something else listens on is one ``lakelock: error:`` line naming
    ``--port`` (exit 1), not the web server's own two lines and an exit from inside it."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = in_process("serve", "--port", str(port), "--bucket", "lake")
    assert result.returncode == 1
    assert one_error_line(result.stderr) == (
        f"port {port} of 127.0.0.1 is in use: stop what listens there, or pass another "
        "--port (0: any free port)"
    )


def test_an_endpoint_on_a_port_in_use_raises_oserror() -> None:
    """``S3Endpoint(port=...)`` on a port in use raises ``OSError`` that a test can catch,
    instead of the web server ending the process."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port}") as refused:
            S3Endpoint(port=port).start()
    assert refused.value.errno == errno.EADDRINUSE


def test_a_missing_policy_file_is_named_plainly(tmp_path: Path, in_process: InProcess) -> None:
    """``serve --policy`` with a file that does not exist names the file and the reason,
    without Python's ``[Errno 2]``."""
    missing = tmp_path / "policy.json"
    result = in_process("serve", "--port", "0", "--bucket", "lake", "--policy", str(missing))
    assert result.returncode == 1
    assert one_error_line(result.stderr) == f"No such file or directory: {missing}"


def test_demo_without_the_local_extra_says_what_to_install() -> None:
    """``lakelock demo`` where moto (the ``local`` extra) is not installed says, once, what
    to install: one line, exit 1."""
    code = (
        "import sys; sys.modules['moto'] = None\n"
        "from lakelock.cli import main\n"
        "sys.exit(main(['demo']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert result.returncode == 1
    assert one_error_line(result.stderr) == (
        "lakelock demo runs on the embedded S3 endpoint, which needs the `local` extra: "
        "pip install 'lakelock[local]'"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--writers", "10000000"],
            "argument --writers: expected an integer from 1 to 10,000, got '10000000'",
        ),
        (
            ["--seconds", "86400"],
            "argument --seconds: expected seconds > 0, at most 3,600, got '86400'",
        ),
    ],
)
def test_simulate_beyond_its_bounds_is_a_usage_error(
    in_process: InProcess, argv: list[str], message: str
) -> None:
    """``simulate --writers 10000000`` (a typo of 10,000) would allocate ten million writers
    and take the machine; it is a usage error naming the bound, exit 2, before any run, and
    ``--help`` says the bounds."""
    result = in_process("simulate", *argv)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].endswith(f"error: {message}")
    shown = " ".join(in_process("simulate", "--help").stdout.split())
    assert "writer processes, at most 10,000" in shown
    assert "at most 3,600" in shown


@pytest.mark.parametrize(
    ("flag", "value", "expected", "bound"),
    [
        *(
            (flag, "10001", "an integer from 0 to 10,000", "10,000")
            for flag in (
                "--kills",
                "--stalls",
                "--swap-stalls",
                "--rerun-stalls",
                "--pauses",
                "--clock-steps",
                "--readers",
                "--vacuums",
            )
        ),
        ("--commits", "100001", "an integer from 0 to 100,000", "100,000"),
        ("--cores", "1025", "an integer from 0 to 1,024", "1,024"),
        (
            "--commit-window",
            "10001",
            "an integer from 1 to 10000 (the root keeps them all)",
            "10000",
        ),
        *(
            ("--skew", value, "seconds >= 0, at most 86,400", "86,400")
            for value in ("1e300", "nan", "-1")
        ),
        ("--cpu-ms", "nan", f"milliseconds >= 0, {CENTURY}", None),
        ("--first-cpu-ms", "inf", f"milliseconds >= 0, {CENTURY}", None),
        ("--cpu-ms", "1e300", f"milliseconds >= 0, {CENTURY}", None),
        ("--endpoint-cpu-ms", "nan", f"milliseconds >= 0, {CENTURY}", None),
        ("--endpoint-crowding", "2", "a fraction in [0, 1]", None),
        *(
            (
                "--intent-ttl",
                value,
                "seconds > 0, at most 3,600 (a lake's longest intent TTL)",
                "3,600",
            )
            for value in ("1e300", "3601", "0")
        ),
        *(
            (flag, "1e300", f"seconds > 0, {CENTURY}", None)
            for flag in ("--max-seconds", "--vacuum-every", "--vacuum-older-than")
        ),
        *(
            (flag, "1e300", f"seconds >= 0, {CENTURY}", None)
            for flag in ("--think", "--start-over", "--opened", "--quiet-before")
        ),
        (
            "--pause",
            "1:1e300",
            "0 <= SHORTEST <= LONGEST <= 3,153,600,000 (seconds: a century)",
            None,
        ),
    ],
)
def test_simulate_values_beyond_their_bounds_are_usage_errors(
    in_process: InProcess, flag: str, value: str, expected: str, bound: str | None
) -> None:
    """Every count ``simulate`` takes is bounded as ``--writers`` is: ``--kills 10000000``
    scheduled ten million faults before the run began, ``--commits 10000000`` ran until
    each writer made them whatever ``--seconds`` said, ``--cores 10000000000`` allocated a
    clock for each core. ``--skew 1e300`` (or ``nan``) ran, every writer crashed on a time
    no date holds, and the run reported the crashes as violations of lakelock's
    guarantees, with a command to replay them; ``--skew -1`` was an error line, not a usage
    error. Each is a usage error saying what the option takes, exit 2, before any run (of
    one writer for half a second, were it run), and ``--help`` says the bound. So is a
    length of time past a century (``--quiet-before 1e300`` was an internal error,
    OverflowError; ``--intent-ttl 1e300`` an error line, exit 1, after the parse; ``--max-
    seconds 1e300`` ran), and an intent TTL past the longest a lake's setting takes."""
    result = in_process("simulate", flag, value, "--writers", "1", "--seconds", "0.5")
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].endswith(
        f"error: argument {flag}: expected {expected}, got '{value}'"
    )
    if bound is not None:
        shown = " ".join(in_process("simulate", "--help").stdout.split())
        metavar = flag.removeprefix("--").upper().replace("-", "_")
        assert f"at most {bound}" in shown.split(f" {flag} {metavar} ")[1].split("(default")[0]


def test_simulate_with_an_unknown_knob_lists_the_knobs(in_process: InProcess) -> None:
    """``simulate --policy`` with a knob that does not exist is a usage error listing the
    knobs there are, not the constructor's complaint about a keyword argument."""
    result = in_process("simulate", "--policy", "max_folds=4")
    assert result.returncode == 2
    last = result.stderr.splitlines()[-1]
    assert last.startswith("lakelock simulate: error: argument --policy: unknown field 'max_folds'")
    assert "max_fold," in last


@pytest.mark.parametrize(
    ("argv", "listed"),
    [((), ("registry", "doctor", "serve", "simulate")), (("registry",), ("show", "configure"))],
)
def test_a_command_left_out_lists_the_commands(
    in_process: InProcess, argv: tuple[str, ...], listed: tuple[str, ...]
) -> None:
    """``lakelock`` alone, or ``lakelock registry`` without an action, shows the commands
    there are (exit 2, the error last), where a usage line named none of them."""
    result = in_process(*argv)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert lines[-1].endswith(
        "error: the following arguments are required: " + ("ACTION" if argv else "COMMAND")
    )
    commands = {line.split()[0] for line in lines if line.startswith("    ")}
    assert set(listed) <= commands
