"""The ``lakelock`` command line against the embedded endpoint: every command, bad arguments,
an unreachable endpoint, missing credentials.

Commands run in this process (``lakelock.cli.main``, the ``in_process`` fixture) with the
environment a new ``lakelock`` process would see; a few run as users run them, a subprocess
(``python -m lakelock.cli``), where the process is the point: the entry point's exit status,
credentials found by a fresh process, ``serve`` stopped by Ctrl-C, a failure's time with
start-up included, and the demo's writer processes."""

from __future__ import annotations

import argparse
import re
import subprocess
import time
from io import StringIO
from pathlib import Path
from typing import Any

import boto3
import orjson
import pyarrow as pa
import pytest
from botocore.exceptions import ClientError
from moto.server import ThreadedMotoServer

from lakelock import Lake, generate_bucket_policy
from lakelock._cli._common import (
    format_duration,
    format_size,
    parse_duration,
    parse_lake_url,
    render_table,
)
from lakelock._cli._progress import ProgressBar, progress_wanted
from lakelock._s3._classify import CONNECT_ATTEMPTS
from lakelock._vacuum import SCANNED_PREFIXES
from lakelock.cli import build_parser, main
from lakelock.testing import S3Endpoint, client_kwargs
from tests._support import CLI_ENV, connect_pauses, free_port
from tests._support.processes import InProcess, interrupt, lakelock, read_until, start_cli

ENV = CLI_ENV


def assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Exit 1, nothing on stdout, exactly one ``lakelock: error:`` line on stderr."""
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("lakelock: error: ")
    for needle in needles:
        assert needle in lines[0]


@pytest.fixture
def lake_prefix() -> str:
    """The lakes of these tests live under a prefix, as the command line's URLs allow."""
    return "warehouse"


@pytest.fixture
def loaded(lake: Lake) -> None:
    """Two datasets and three commits in the lake."""
    table = pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"], "year": [2024, 2024, 2025]})
    lake.append("customer_profiles", table, partition_by=["year"], commit_id="load-1")
    lake.append("customer_profiles", table, partition_by=["year"], commit_id="load-2")
    lake.append("events", pa.table({"x": [1.5]}), commit_id="load-3")


# -- policy -------------------------------------------------------------------------------------


def test_policy_prints_the_generators_policy(in_process: InProcess) -> None:
    """``policy`` prints exactly what generate_bucket_policy returns for the same options."""
    result = in_process(
        "policy",
        "--bucket",
        "my-bucket",
        "--principal",
        "arn:aws:iam::111111111111:role/etl",
        "--principal",
        "222222222222",
        "--prefix",
        "lake",
        "--deny-unconditional-delete",
    )
    assert result.returncode == 0, result.stderr
    expected = generate_bucket_policy(
        "my-bucket",
        principals=["arn:aws:iam::111111111111:role/etl", "222222222222"],
        prefix="lake/",
        deny_unconditional_delete=True,
    )
    assert orjson.loads(result.stdout) == expected


def test_policy_with_a_bad_principal_is_one_error_line(in_process: InProcess) -> None:
    """An invalid principal is reported in one line with exit 1, not a traceback."""
    result = in_process("policy", "--bucket", "my-bucket", "--principal", "arn:aws:sts::1:x")
    assert_one_line_error(result, "invalid name")


def test_usage_errors_exit_2_through_the_real_entry_point() -> None:
    """Bad arguments are argparse usage errors: exit 2 and a usage message."""
    result = lakelock("registry", "show", "http://not-s3/x")
    assert result.returncode == 2
    assert "expected s3://bucket[/prefix]" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["policy", "--bucket", "b"], "--principal"),
        (["registry"], "ACTION"),
        (["registry", "show"], "URL"),
        (["vacuum", "s3://lake", "--older-than", "soon"], "invalid duration"),
        (["serve", "--fault", "meteor:PutObject"], "unknown kind"),
        (["serve", "--latency", "fast"], "invalid latency"),
        (["demo", "--writers", "0"], "positive integer"),
        (["serve", "--port", "99999"], "invalid port '99999': 0 to 65535"),
        (["serve", "--port", "70000"], "invalid port '70000'"),
        (["serve", "--port", "-5"], "invalid port '-5'"),
        (["serve", "--port=-5"], "invalid port '-5'"),
        (["serve", "--port", "http"], "invalid port 'http'"),
        (["registry", "show", "s3://lake", "--dataset", "bad name!"], "invalid dataset name"),
        (["registry", "log", "s3://lake", "--dataset", "bad/name"], "invalid dataset name"),
        (["vacuum", "s3://lake", "--older-than", "-1h"], "invalid duration '-1h': a duration"),
        (["vacuum", "s3://lake", "--older-than=-1h"], "not negative"),
        (["vacuum", "s3://lake", "--older-than", "1h", "--retention", "-2d"], "not negative"),
        (["registry", "show", "s3:/lake"], "expected s3://bucket[/prefix]"),
        (["locks", "s3://Bad_Bucket!"], "bucket name"),
        (["doctor", "s3://lake", "--addressing-style", "sideways"], "invalid choice"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_arguments_are_usage_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each malformed command line exits 2 with argparse's message naming the problem, before
    anything touches S3."""
    assert main(argv) == 2
    assert message in capsys.readouterr().err


# -- registry -----------------------------------------------------------------------------------


@pytest.mark.usefixtures("loaded")
def test_registry_show_lists_datasets(s3: S3Endpoint, lake: Lake, in_process: InProcess) -> None:
    """``registry show`` prints the version and one aligned row per dataset with its totals."""
    result = in_process("registry", "show", lake.url, "--endpoint-url", s3.url)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == lake.url
    assert lines[1].startswith("registry version 3, updated ")
    assert lines[1].endswith(", 2 datasets")
    header = next(i for i, line in enumerate(lines) if line.startswith("DATASET"))
    rows = {line.split()[0]: line.split() for line in lines[header + 1 :]}
    assert rows["customer_profiles"][1:5] == ["year", "2", "4", "6"]
    assert rows["events"][1:5] == ["-", "1", "1", "1"]
    version_end = lines[header].index("VERSION") + len("VERSION")
    for row in lines[header + 1 :]:  # numbers right-aligned under their header
        assert row[version_end - 1].isdigit()
        assert row[version_end] == " "


@pytest.mark.usefixtures("loaded")
def test_registry_show_json_matches_the_snapshot(
    s3: S3Endpoint, lake: Lake, in_process: InProcess
) -> None:
    """``registry show --json`` carries the snapshot's version, ETag, totals and schema."""
    result = in_process("registry", "show", lake.url, "--json", "--endpoint-url", s3.url)
    assert result.returncode == 0, result.stderr
    data = orjson.loads(result.stdout)
    snap = lake.registry.read()
    assert (data["version"], data["etag"]) == (snap.version, snap.etag)
    profiles = data["datasets"]["customer_profiles"]
    state = snap.datasets["customer_profiles"]
    assert (profiles["file_count"], profiles["record_count"], profiles["size"]) == (
        state.file_count,
        state.record_count,
        state.size,
    )
    assert [f["name"] for f in profiles["schema"]] == ["id", "name", "year"]
    assert set(profiles["partitions"]) == {"year=2024", "year=2025"}


@pytest.mark.usefixtures("loaded")
def test_registry_show_one_dataset_with_files(
    s3: S3Endpoint, lake: Lake, in_process: InProcess
) -> None:
    """``--dataset D --files`` shows the schema, each partition and every committed file."""
    result = in_process(
        "registry",
        "show",
        lake.url,
        "--dataset",
        "customer_profiles",
        "--files",
        "--endpoint-url",
        s3.url,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "schema v1:" in out
    assert "partitioned by: year" in out
    assert any(line.split()[:3] == ["year=2024", "2", "4"] for line in out.splitlines())
    for data_file in lake.registry.files("customer_profiles"):
        assert data_file.key in out


@pytest.mark.usefixtures("loaded")
def test_registry_log_lists_commits_newest_first(
    s3: S3Endpoint, lake: Lake, in_process: InProcess
) -> None:
    """``registry log`` lists recent commits newest first; ``--dataset`` and ``--limit``
    filter them."""
    result = in_process("registry", "log", lake.url, "--endpoint-url", s3.url)
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()[1:]]
    assert result.stdout.splitlines()[0].split() == [
        "VERSION",
        "AT",
        "OPERATION",
        "DATASETS",
        "ADDED",
        "REMOVED",
        "COMMIT",
    ]
    assert [(r[0], r[2], r[3], r[-1]) for r in rows] == [
        ("3", "append", "events", "load-3"),
        ("2", "append", "customer_profiles", "load-2"),
        ("1", "append", "customer_profiles", "load-1"),
    ]
    filtered = in_process(
        "registry", "log", lake.url, "--dataset", "customer_profiles", "-n", "1", "--json",
        "--endpoint-url", s3.url,
    )  # fmt: skip
    assert [c["id"] for c in orjson.loads(filtered.stdout)] == ["load-2"]


def test_partitions_are_listed_in_natural_order(
    s3: S3Endpoint, lake: Lake, in_process: InProcess
) -> None:
    """``day=2`` comes before ``day=10`` in the table and in the JSON."""
    days = pa.table({"v": [1, 2, 3, 4], "day": [10, 2, 1, 33]})
    lake.append("daily", days, partition_by=["day"])
    text = in_process("registry", "show", lake.url, "--dataset", "daily", "--endpoint-url", s3.url)
    assert text.returncode == 0, text.stderr
    shown = [line.split()[0] for line in text.stdout.splitlines() if line.startswith("day=")]
    assert shown == ["day=1", "day=2", "day=10", "day=33"]
    data = in_process(
        "registry", "show", lake.url, "--dataset", "daily", "--json", "--endpoint-url", s3.url
    )
    assert list(orjson.loads(data.stdout)["partitions"]) == shown


@pytest.mark.usefixtures("loaded")
def test_registry_log_json_lists_datasets_and_operations(
    s3: S3Endpoint, lake: Lake, in_process: InProcess
) -> None:
    """Each JSON entry has ``datasets`` as a list (a rename across datasets names both) and
    the ``operation``; ``--dataset`` matches any dataset of a commit."""
    lake.rename_partition("customer_profiles", "year=2025", to_dataset="archive", commit_id="mv")
    result = in_process("registry", "log", lake.url, "--json", "--endpoint-url", s3.url)
    assert result.returncode == 0, result.stderr
    entries = orjson.loads(result.stdout)
    # The rename's write lock is taken and released by commits of their own around it.
    assert [e["operation"] for e in entries[:3]] == ["unlock", "rename", "lock"]
    assert entries[0]["datasets"] == entries[2]["datasets"] == ["archive", "customer_profiles"]
    entries = [e for e in entries if e["operation"] not in ("lock", "unlock")]
    assert [(e["id"], e["operation"], e["datasets"]) for e in entries] == [
        ("mv", "rename", ["archive", "customer_profiles"]),
        ("load-3", "append", ["events"]),
        ("load-2", "append", ["customer_profiles"]),
        ("load-1", "append", ["customer_profiles"]),
    ]

    archive = in_process(
        "registry", "log", lake.url, "--dataset", "archive", "--json", "--endpoint-url", s3.url
    )
    assert [e["id"] for e in orjson.loads(archive.stdout)] == ["mv"]
    table = in_process("registry", "log", lake.url, "-n", "2", "--endpoint-url", s3.url).stdout
    assert table.splitlines()[2].split()[2:4] == ["rename", "archive,customer_profiles"]


def test_registry_of_an_empty_lake_and_of_a_missing_bucket(
    s3: S3Endpoint, bucket: str, in_process: InProcess
) -> None:
    """A bucket without a registry is an empty lake (exit 0); a missing bucket is an error,
    not an empty lake."""
    empty = in_process("registry", "show", f"s3://{bucket}", "--endpoint-url", s3.url)
    assert empty.returncode == 0, empty.stderr
    assert "no registry yet" in empty.stdout
    missing = in_process("registry", "show", "s3://no-such-bucket-here", "--endpoint-url", s3.url)
    assert_one_line_error(missing, "bucket 'no-such-bucket-here' does not exist")


@pytest.mark.usefixtures("loaded")
def test_unknown_dataset_is_one_error_line(
    s3: S3Endpoint, lake: Lake, in_process: InProcess
) -> None:
    """Asking for a dataset the registry lacks: exit 1, one line naming it."""
    result = in_process("registry", "show", lake.url, "--dataset", "nope", "--endpoint-url", s3.url)
    assert_one_line_error(result, "dataset 'nope' is not in the registry")


# -- connection failures ------------------------------------------------------------------------


def test_unreachable_endpoint_is_one_error_line(in_process: InProcess) -> None:
    """Nothing listening at the endpoint: one line saying so (no traceback), exit 1; with
    ``--debug`` the exception leaves the command and the interpreter prints its traceback (as
    users run it: a process)."""
    url = f"http://127.0.0.1:{free_port()}"
    env = {**ENV, "AWS_MAX_ATTEMPTS": "1"}
    result = in_process("registry", "show", "s3://lake", "--endpoint-url", url, env=env)
    assert_one_line_error(result, f"cannot connect to {url}")
    debug = lakelock("--debug", "locks", "s3://lake", "--endpoint-url", url, env=env)
    assert debug.returncode == 1
    assert "Traceback" in debug.stderr
    assert "EndpointConnectionError" in debug.stderr


def test_missing_credentials_and_profile_are_one_error_line(s3: S3Endpoint) -> None:
    """No credentials anywhere, or an unknown ``--profile``: one clear line each, exit 1."""
    env = {k: v for k, v in ENV.items() if k not in {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}}
    result = lakelock("doctor", "s3://lake", "--endpoint-url", s3.url, env=env)
    assert_one_line_error(result, "no AWS credentials found")
    profile = lakelock("vacuum", "s3://lake", "--profile", "ghost")
    assert_one_line_error(profile, "AWS profile not found: 'ghost'")


#: A bound on a failing command's wall-clock time, start-up included: a safety net only (the
#: counts of attempts below say how fast it failed), below the 60 s retry budget a command
#: that retried the failure would spend, and far above interpreter start-up under load.
SAFETY_NET = 45.0


def one_line_within(seconds: float, *args: str, env: dict[str, str] | None = None) -> str:
    """Run ``lakelock *args``; it must fail with one error line within ``seconds``."""
    started = time.monotonic()
    result = lakelock(*args, env=env)
    elapsed = time.monotonic() - started
    assert_one_line_error(result)
    assert elapsed < seconds, (elapsed, args)
    return result.stderr


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every attempt at a request (by S3 operation) that clients built on boto3's default
    session send in this process, connection failures included: the default session is made
    anew for the test, with a counter on it."""
    attempts: list[str] = []

    def count(event_name: str, **_: object) -> None:
        attempts.append(event_name.rsplit(".", 1)[-1])

    def setup_default_session(**kwargs: Any) -> None:
        session = boto3.Session(**kwargs)
        session.events.register("before-send.s3", count)
        monkeypatch.setattr(boto3, "DEFAULT_SESSION", session)

    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    monkeypatch.setattr(boto3, "setup_default_session", setup_default_session)
    return attempts


#: Commands, and the attempts each makes at its first request when nothing listens: doctor's
#: client makes one attempt per request (it reports what the store does, retries hide that).
FAIL_FAST_COMMANDS = [
    (["registry", "show"], CONNECT_ATTEMPTS),
    (["registry", "log"], CONNECT_ATTEMPTS),
    (["locks"], CONNECT_ATTEMPTS),
    (["vacuum"], CONNECT_ATTEMPTS),
    (["vacuum", "--older-than", "7d", "--delete"], CONNECT_ATTEMPTS),
    (["doctor"], 1),
]


def with_lake(command: list[str], lake: str) -> list[str]:
    """``command`` with the lake URL where it goes (after ``registry``'s subcommand)."""
    at = 2 if command[0] == "registry" else 1
    return [*command[:at], lake, *command[at:]]


@pytest.mark.parametrize(("command", "tries"), FAIL_FAST_COMMANDS)
def test_every_command_fails_fast_on_a_closed_port(
    command: list[str],
    tries: int,
    in_process: InProcess,
    sent: list[str],
    sdk_pauses: list[float],
) -> None:
    """Nothing listening: every command answers with one line naming the endpoint, after
    at most CONNECT_ATTEMPTS attempts at its first request (the SDK's retries as configured
    by default, no AWS_MAX_ATTEMPTS) with CONNECT_BACKOFF's short pauses between them, not
    the SDK's backoff nor a retry budget of lakelock's. (In this process, where the pauses
    are recorded, not taken; the next test runs one command as users do.)"""
    url = f"http://127.0.0.1:{free_port()}"
    argv = [*with_lake(command, "s3://lake"), "--endpoint-url", url]
    assert_one_line_error(in_process(*argv), f"cannot connect to {url}")
    assert len(sent) == tries, sent
    assert len(set(sent)) == 1, sent  # one request, attempted that many times
    assert sdk_pauses == connect_pauses(tries)


def test_a_command_fails_fast_on_a_closed_port_as_users_run_it() -> None:
    """The same, run as users run it: one line naming the endpoint, well within the retry
    budget a command that retried the failure would spend."""
    url = f"http://127.0.0.1:{free_port()}"
    argv = ["vacuum", "s3://lake", "--older-than", "7d", "--delete", "--endpoint-url", url]
    assert f"cannot connect to {url}" in one_line_within(SAFETY_NET, *argv)


def test_https_on_an_http_port_fails_fast(
    s3: S3Endpoint, in_process: InProcess, sent: list[str], sdk_pauses: list[float]
) -> None:
    """An https:// URL for a plain-http endpoint: one line saying the handshake failed, after
    CONNECT_ATTEMPTS quick attempts."""
    url = s3.url.replace("http://", "https://")
    argv = ["registry", "show", "s3://lake", "--endpoint-url", url]
    result = in_process(*argv)
    assert_one_line_error(result, "TLS handshake failed")
    assert sent == ["GetObject"] * CONNECT_ATTEMPTS
    assert sdk_pauses == connect_pauses(CONNECT_ATTEMPTS)


def test_missing_credentials_fail_fast_for_every_reading_command(
    s3: S3Endpoint, in_process: InProcess
) -> None:
    """No credentials: ``registry show``, ``registry log`` and ``locks`` answer at once,
    nothing sent (in this process; the test above runs ``doctor`` so as users run it)."""
    env = {k: v for k, v in ENV.items() if k not in {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}}
    s3.reset_stats()
    for command in (["registry", "show"], ["registry", "log"], ["locks"]):
        result = in_process(*command, "s3://lake", "--endpoint-url", s3.url, env=env)
        assert_one_line_error(result, "no AWS credentials found")
    assert s3.stats() == {}


# -- locks --------------------------------------------------------------------------------------


@pytest.mark.usefixtures("loaded")
def test_locks_shows_holders_and_leases(s3: S3Endpoint, lake: Lake, in_process: InProcess) -> None:
    """``locks`` lists a held path lock (paths, modes, token) and a held lease (owner label,
    token), both live, in text and JSON; released ones only with ``--all``."""
    lease = lake.lease("nightly-compaction", ttl=60, owner_label="compactor")
    lease.acquire(timeout=10)
    old = lake.lease("retired", ttl=60)
    old.acquire(timeout=10)
    old.release()
    held = lake.lock(write=["/customer_profiles/year=2024"], read=["/events"], ttl=60).acquire()
    try:
        text = in_process("locks", lake.url, "--endpoint-url", s3.url)
        data = in_process("locks", lake.url, "--json", "--all", "--endpoint-url", s3.url)
    finally:
        held.release()
        lease.release()
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    lock_row = next(line for line in lines if line.startswith("customer_profiles "))
    assert "write /customer_profiles/year=2024" in lock_row
    assert " live " in lock_row
    lease_row = next(line for line in lines if line.startswith("nightly-compaction "))
    assert lease_row.split()[1] == str(lease.token)
    assert "'compactor'" in lease_row
    assert "retired" not in text.stdout
    found = orjson.loads(data.stdout)
    assert {(x["dataset"], x["state"]) for x in found["locks"]} == {
        ("customer_profiles", "live"),
        ("events", "live"),
    }
    states = {x["name"]: (x["state"], x["token"]) for x in found["leases"]}
    assert states == {"nightly-compaction": ("live", lease.token), "retired": ("released", 1)}


@pytest.mark.usefixtures("loaded")
def test_locks_lists_the_rest_beside_an_unreadable_lease(
    s3: S3Endpoint, lake: Lake, in_process: InProcess, admin: Any
) -> None:
    """One lease document that does not parse (written by hand, truncated, another tool's),
    or a lock table naming a path no lock takes, must not cost the whole listing: every other
    lease and lock is still shown, those as unreadable with their keys, and the exit status
    says the picture is incomplete."""
    lease = lake.lease("nightly-compaction", ttl=60)
    lease.acquire(timeout=10)
    bucket, prefix = lake.store.bucket, lake.store.prefix
    admin.put_object(Bucket=bucket, Key=f"{prefix}metastore/leases/broken.json", Body=b"{not")
    table = {  # parses as JSON, but its holder's path has an empty segment
        "format_version": 1,
        "kind": "lakelock.lock-table",
        "dataset": "events",
        "next_token": 2,
        "holders": [{"id": "h", "token": 1, "read": [], "write": ["/events//day=1"]}],
    }
    admin.put_object(
        Bucket=bucket, Key=f"{prefix}metastore/locks/events.json", Body=orjson.dumps(table)
    )
    held = lake.lock(write=["/customer_profiles/year=2024"], ttl=60).acquire()
    try:
        text = in_process("locks", lake.url, "--endpoint-url", s3.url)
        data = in_process("locks", lake.url, "--json", "--endpoint-url", s3.url)
    finally:
        held.release()
        lease.release()
    assert text.returncode == 1, text.stderr
    assert any(line.startswith("nightly-compaction ") for line in text.stdout.splitlines())
    assert any(line.startswith("customer_profiles ") for line in text.stdout.splitlines())
    assert "metastore/leases/broken.json" in text.stdout
    assert data.returncode == 1, data.stderr
    found = orjson.loads(data.stdout)
    assert [x["name"] for x in found["leases"]] == ["nightly-compaction"]
    assert [x["dataset"] for x in found["locks"]] == ["customer_profiles"]
    assert [u["key"] for u in found["unreadable"]] == [
        "metastore/locks/events.json",
        "metastore/leases/broken.json",
    ]


# -- doctor -------------------------------------------------------------------------------------


def test_doctor_passes_on_the_embedded_endpoint(
    s3: S3Endpoint, bucket: str, in_process: InProcess
) -> None:
    """``doctor`` against the embedded endpoint: every required probe passes, exit 0, and the
    scratch prefix is removed."""
    result = in_process("doctor", f"s3://{bucket}/lake", "--endpoint-url", s3.url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "lakelock can run safely on this store." in result.stdout
    rows = [line for line in result.stdout.splitlines() if " required " in line]
    assert len(rows) >= 8
    assert all(" PASS " in row or " SKIP " in row for row in rows)
    assert s3.client().list_objects_v2(Bucket=bucket).get("KeyCount") == 0


def test_doctor_fails_on_plain_moto(bucket: str, in_process: InProcess) -> None:
    """``doctor`` against moto without the gateway: the If-Match multipart completion and
    CopyObject destination probes FAIL, the verdict is NOT SAFE, exit 1 (JSON says which)."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        url = f"http://{host}:{port}"
        # Plain moto is a store of its own (an S3Endpoint's buckets are not in it).
        boto3.client("s3", **client_kwargs(url)).create_bucket(Bucket=bucket)
        result = in_process("doctor", f"s3://{bucket}", "--endpoint-url", url)
        as_json = in_process("doctor", f"s3://{bucket}", "--json", "--endpoint-url", url)
    finally:
        server.stop()
    assert result.returncode == 1, result.stderr
    rows = {re.split(r"\s{2,}", line)[0]: line for line in result.stdout.splitlines()}
    assert " FAIL " in rows["If-Match on CompleteMultipartUpload"]
    assert " FAIL " in rows["conditional CopyObject (destination)"]
    assert " PASS " in rows["create-only PutObject (If-None-Match: *)"]
    assert "NOT SAFE" in result.stdout
    data = orjson.loads(as_json.stdout)
    assert as_json.returncode == 1
    assert data["ok"] is False
    failed = {p["name"] for p in data["probes"] if p["status"] == "fail" and p["required"]}
    assert "If-Match on CompleteMultipartUpload" in failed
    assert data["cleanup"]["left"] == []


# -- vacuum -------------------------------------------------------------------------------------


@pytest.mark.usefixtures("loaded")
def test_vacuum_reports_then_deletes_orphans(
    s3: S3Endpoint, lake: Lake, in_process: InProcess
) -> None:
    """``vacuum`` finds an uncommitted file (dry run: kept), and with ``--delete --progress``
    deletes it, drawing the bar on stderr; committed files are untouched."""
    orphan = lake.write("events", pa.table({"x": [9.0]}))[0]
    committed = {f.key for f in lake.registry.files("customer_profiles")}
    lake.configure(vacuum_floor=0)
    client = s3.client()
    dry = in_process(
        "vacuum", lake.url, "--older-than", "0s", "--no-enforce-retention", "--endpoint-url", s3.url
    )
    assert dry.returncode == 0, dry.stderr
    assert orphan.key in dry.stdout
    assert "dry run: nothing deleted" in dry.stdout
    client.head_object(Bucket=lake.bucket, Key=lake.prefix + orphan.key)
    wet = in_process(
        "vacuum",
        lake.url,
        "--older-than",
        "0s",
        "--no-enforce-retention",
        "--delete",
        "--progress",
        "--endpoint-url",
        s3.url,
    )
    assert wet.returncode == 0, wet.stderr
    # The orphan, and the dataset versions the fixture's later commits replaced (a window
    # of 0 s keeps only the current ones).
    deleted = int(re.search(r"deleted (\d+)", wet.stdout).group(1))  # type: ignore[union-attr]
    replaced = dry.stdout.count("metastore/snapshots/") + dry.stdout.count("metastore/intents/")
    assert deleted == 1 + replaced + dry.stdout.count("metastore/nodes/") + dry.stdout.count(
        "metastore/manifests/"
    )
    assert f"] {deleted}/{deleted} 100%" in wet.stderr
    with pytest.raises(ClientError):
        client.head_object(Bucket=lake.bucket, Key=lake.prefix + orphan.key)
    assert {f.key for f in lake.registry.files("customer_profiles")} == committed
    assert lake.read("customer_profiles").num_rows == 6


@pytest.mark.usefixtures("loaded")
def test_vacuum_shows_progress_while_listing_even_when_piped(
    s3: S3Endpoint, lake: Lake, in_process: InProcess
) -> None:
    """``--progress`` draws on stderr (stdout and stderr are pipes here) while listing, with
    the final count, before any deleting; the report on stdout is unchanged."""
    lake.configure(vacuum_floor=0)
    result = in_process(
        "vacuum",
        lake.url,
        "--older-than",
        "0s",
        "--no-enforce-retention",
        "--progress",
        "--endpoint-url",
        s3.url,
    )
    assert result.returncode == 0, result.stderr
    listed = sum(len(list(lake.store.list(prefix))) for prefix in SCANNED_PREFIXES)
    assert result.stderr.endswith(f"listing {listed} objects\n")
    assert f"{listed} objects scanned" in result.stdout
    quiet = in_process(
        "vacuum", lake.url, "--older-than", "0s", "--no-enforce-retention", "--endpoint-url", s3.url
    )
    assert quiet.stderr == ""


@pytest.mark.usefixtures("loaded")
def test_vacuum_beyond_the_retention_names_the_flag(
    s3: S3Endpoint, lake: Lake, in_process: InProcess
) -> None:
    """``--older-than`` past the lake's retention (7 days by default): one line telling the
    user how to raise it; ``--retention`` other than the lake's is refused, naming both;
    once the lake's retention is raised (``registry configure --retention``) it runs."""
    refused = in_process("vacuum", lake.url, "--older-than", "30d", "--endpoint-url", s3.url)
    assert_one_line_error(refused, "configure --retention", "30d", "7d")
    other = in_process(
        "vacuum", lake.url, "--older-than", "30d", "--retention", "30d", "--endpoint-url", s3.url
    )
    assert_one_line_error(other, "retention=2592000 s was given", "604800 s")
    raised = in_process(
        "registry", "configure", lake.url, "--retention", "30d", "--endpoint-url", s3.url
    )
    assert raised.returncode == 0, raised.stderr
    allowed = in_process("vacuum", lake.url, "--older-than", "30d", "--endpoint-url", s3.url)
    assert allowed.returncode == 0, allowed.stderr
    assert "unreferenced and older than 30d" in allowed.stdout


# -- serve --------------------------------------------------------------------------------------


@pytest.mark.timeout(300)  # start-up and shutdown of a server process, on a loaded machine
def test_serve_runs_the_endpoint_until_interrupted(tmp_path: Path) -> None:
    """``serve`` creates the buckets, applies the policy file, prints the URL and ready-made
    settings, answers S3 (policy enforced), and exits 0 on Ctrl-C."""
    bucket = "served-lake"
    policy = generate_bucket_policy(bucket, principals=["arn:aws:iam::123456789012:user/etl"])
    policy_file = tmp_path / "policy.json"
    policy_file.write_bytes(orjson.dumps(policy))
    process = start_cli(
        *("serve", "--port", "0", "--bucket", bucket, "--policy", str(policy_file)),
        *("--principal", "etl=arn:aws:iam::123456789012:user/etl", "--latency", "0.001"),
    )
    try:
        banner = read_until(process, "Ctrl-C to stop.")
        url = next(line.split()[-1] for line in banner if line.startswith("lakelock S3 endpoint"))
        assert f"  export AWS_ENDPOINT_URL={url}" in banner
        assert any(
            f"lakelock registry show s3://{bucket} --endpoint-url {url}" in b for b in banner
        )
        etl = boto3.client("s3", **client_kwargs(url, access_key="etl"))
        etl.put_object(Bucket=bucket, Key="datasets/d/a.parquet", Body=b"x", IfNoneMatch="*")
        with pytest.raises(ClientError) as refused:
            etl.put_object(Bucket=bucket, Key="datasets/d/b.parquet", Body=b"x")
        assert refused.value.response["Error"]["Code"] == "AccessDenied"
    finally:
        out, _ = interrupt(process)
    assert "stopped" in out


def exported_credentials(banner: list[str]) -> tuple[str, str]:
    """The access key and secret ``serve`` tells the user to export."""
    line = next(b for b in banner if "AWS_SECRET_ACCESS_KEY=" in b)
    values = dict(word.split("=", 1) for word in line.split() if "=" in word)
    return values["AWS_ACCESS_KEY_ID"], values["AWS_SECRET_ACCESS_KEY"]


def served_url(banner: list[str]) -> str:
    return next(line.split()[-1] for line in banner if line.startswith("lakelock S3 endpoint"))


@pytest.mark.timeout(300)  # start-up and shutdown of server processes, on a loaded machine
def test_serve_checks_signatures_against_the_credentials_it_prints() -> None:
    """``serve`` answers a request signed with the access key and secret it prints (or a
    ``--principal``'s key), and refuses one signed otherwise as S3 does: another secret 403
    SignatureDoesNotMatch, an unknown access key 403 InvalidAccessKeyId, so a credentials
    mistake shows locally, not first on AWS. ``--no-auth`` accepts any."""
    process = start_cli(
        "serve", "--port", "0", "--bucket", "signed", "--principal", "etl=arn:aws:iam::1:user/etl"
    )
    try:
        banner = read_until(process, "Ctrl-C to stop.")
        url = served_url(banner)
        key, secret = exported_credentials(banner)
        for access_key in (key, "etl"):
            client = boto3.client("s3", **{**client_kwargs(url, access_key=access_key)})
            client.put_object(Bucket="signed", Key="k", Body=b"x")
        wrong = {**client_kwargs(url, access_key=key), "aws_secret_access_key": secret + "x"}
        for kwargs, code in [
            (wrong, "SignatureDoesNotMatch"),
            (client_kwargs(url, access_key="someone"), "InvalidAccessKeyId"),
        ]:
            with pytest.raises(ClientError) as refused:
                boto3.client("s3", **kwargs).get_object(Bucket="signed", Key="k")
            assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
            assert refused.value.response["Error"]["Code"] == code
    finally:
        interrupt(process)
    process = start_cli("serve", "--port", "0", "--bucket", "signed", "--no-auth")
    try:
        banner = read_until(process, "Ctrl-C to stop.")
        assert "signatures not checked (--no-auth): any access key and secret" in banner
        anyone = {**client_kwargs(served_url(banner), access_key="a"), "aws_secret_access_key": "b"}
        boto3.client("s3", **anyone).put_object(Bucket="signed", Key="k", Body=b"x")
    finally:
        interrupt(process)


def test_serve_refuses_a_bad_policy_file(tmp_path: Path, in_process: InProcess) -> None:
    """A policy file that is not JSON is one error line and exit 1 (the server does not
    start half-configured)."""
    bad = tmp_path / "policy.json"
    bad.write_text("{not json")
    result = in_process("serve", "--port", "0", "--bucket", "lake1", "--policy", str(bad))
    assert_one_line_error(result, "not valid JSON")


# -- demo ---------------------------------------------------------------------------------------


@pytest.mark.timeout(400)  # writer processes and their own endpoint, on a loaded machine
def test_demo_runs_and_passes() -> None:
    """``demo`` runs the demo job (writer processes, a rename, a leader's compaction) on its
    own embedded endpoint and exits 0 when every one of its checks passes; ``--progress``
    draws on stderr although both streams are pipes, and never mixes into stdout. Its summary
    says why the commits outnumber the registry's versions (group commit), in its numbers."""
    result = lakelock("demo", "--writers", "2", "--latency", "0", "--progress", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "demo passed" in result.stdout
    assert "[FAILED]" not in result.stdout
    assert "was elected leader" in result.stdout
    assert result.stdout.count("[ok]") == 7
    # The summary says why its commits outnumber the registry's versions, in numbers that add up.
    commits = int(re.search(r"commits +(\d+) \(", result.stdout)[1])  # type: ignore[index]
    version = int(re.search(r"registry version +(\d+)", result.stdout)[1])  # type: ignore[index]
    why = re.search(
        r"one version = one compare-and-swap of the registry's root;\n +group commit applied "
        r"these (\d+) commits and 1 to staging_profiles, 2 taking and releasing write locks, "
        r"1 recording the leader's lease in (\d+) versions?, ([\d.]+) each",
        result.stdout,
    )
    assert why is not None, result.stdout
    assert int(why[1]) == commits
    assert 1 <= int(why[2]) <= version
    assert why[3] == f"{(commits + 4) / int(why[2]):.1f}"  # as the summary rounds it
    status = re.compile(r"appends \d+/\d+  renames \d+")
    assert status.search(result.stderr)
    assert not status.search(result.stdout)


# -- helpers, in process ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("24h", 86400), ("90m", 5400), ("1d12h", 129600), ("30s", 30), ("3600", 3600), ("1.5h", 5400)],
)
def test_durations_parse(text: str, seconds: float) -> None:
    """``--older-than`` accepts numbers with s/m/h/d/w units, combined or bare."""
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "24x", "1h-", "-5m", "24 hours"])
def test_bad_durations_are_refused(text: str) -> None:
    """Anything else is refused rather than half-parsed."""
    with pytest.raises(Exception, match="invalid duration"):
        parse_duration(text)


def test_lake_urls_parse() -> None:
    """``s3://bucket/prefix`` gains a trailing slash; a bare bucket name is accepted; other
    schemes, malformed URLs and invalid bucket names are refused (usage errors)."""
    assert parse_lake_url("s3://lake/p/q").prefix == "p/q/"
    assert parse_lake_url("lake").bucket == "lake"
    assert parse_lake_url("lake/p").prefix == "p/"
    assert parse_lake_url("s3://lake").prefix == ""
    for bad in ("gs://lake/p", "s3:/lake", "s3:lake", "s3://lake?x=1", "s3:///lake"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected s3://"):
            parse_lake_url(bad)
    for bad in ("s3://Bad_Bucket!", "s3://b", "s3://a..b", "s3://192.168.0.1", "-lake"):
        with pytest.raises(argparse.ArgumentTypeError, match="bucket name"):
            parse_lake_url(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="empty segment"):
        parse_lake_url("s3://lake/a//b")


def test_tables_align_and_sizes_read_well() -> None:
    """Columns are padded to the widest cell, numbers right-aligned; sizes use binary units;
    durations use the two largest units."""
    lines = render_table(("NAME", "N", "NOTE"), [("a", 5, "x"), ("long", 123, "")], right=("N",))
    assert lines == ["NAME    N  NOTE", "a       5  x", "long  123"]
    assert [format_size(n) for n in (0, 1023, 1536, 5 * 1024**3)] == [
        "0 B",
        "1023 B",
        "1.5 KiB",
        "5.0 GiB",
    ]
    assert [format_duration(s) for s in (0.4, 90, 3 * 86400 + 7200 + 5)] == [
        "0.4s",
        "1m30s",
        "3d2h",
    ]


def test_progress_bar_only_on_a_terminal() -> None:
    """The bar is drawn only on a TTY unless forced; it throttles redraws but always draws the
    final state, and ends its line on close."""

    class Tty(StringIO):
        def isatty(self) -> bool:
            return True

    assert progress_wanted(None, StringIO()) is False
    assert progress_wanted(None, Tty()) is True
    assert progress_wanted(True, StringIO()) is True
    assert progress_wanted(False, Tty()) is False
    out = StringIO()
    bar = ProgressBar("deleting", stream=out, width=10, interval=60)
    bar(1, 4)
    bar(2, 4)  # throttled
    bar(4, 4)
    bar.close()
    assert out.getvalue() == ("\rdeleting [##........] 1/4  25%\rdeleting [##########] 4/4 100%\n")


def test_every_option_of_every_command_is_explained() -> None:
    """``--help`` of every command (and sub-command) explains each of its options."""
    parsers = [build_parser()]
    unexplained = []
    while parsers:
        parser = parsers.pop()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers.extend(action.choices.values())
            elif action.option_strings and not action.help:
                unexplained.append(f"{parser.prog} {action.option_strings[0]}")
    assert unexplained == []


def test_simulate_help_shows_every_default() -> None:
    """``simulate --help`` says the default of every option that takes a value (and of the
    store switch): a user sizing a lake sees what a run without the option simulates."""
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    simulate = commands["simulate"]
    silent = [
        action.option_strings[0]
        for action in simulate._actions
        if action.option_strings
        and action.option_strings[0] not in ("-h", "--json", "--debug")
        and "default" not in (action.help or "").lower()
    ]
    assert silent == []


def test_main_returns_status_instead_of_exiting(capsys: pytest.CaptureFixture[str]) -> None:
    """``main(argv)`` returns the exit status (0 for --version) so it can be embedded."""
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("lakelock ")


# -- mirror -------------------------------------------------------------------------------------


@pytest.mark.usefixtures("loaded")
def test_mirror_writes_the_views_and_prints_where_they_are(
    s3: S3Endpoint, lake: Lake, in_process: InProcess
) -> None:
    """``mirror`` writes both views (progress per format on stderr) and prints their URIs
    and how many versions it wrote (each version once: it said "mirrored 2N versions" for N
    versions written to two views); ``--json`` reports the same, by format (it summed them:
    1 for one view behind the other by one version); a second run says the views
    were "already current" (it used to say it mirrored them); one view behind the other says
    what each was given; an unknown format is a usage error."""
    pytest.importorskip("pyiceberg")
    pytest.importorskip("deltalake")
    url = lake.url
    result = in_process(
        "mirror", url, "--dataset", "customer_profiles", "--progress", "--endpoint-url", s3.url
    )
    assert result.returncode == 0, result.stderr
    version = lake.registry.read().datasets["customer_profiles"].updated_version
    metadata = f"{url}views/customer_profiles/iceberg/metadata/{version:020d}.metadata.json"
    assert result.stdout.splitlines()[1:] == [
        f"  iceberg  {metadata}",
        f"  delta    {url}datasets/customer_profiles",
    ]
    versions = len(lake.history("customer_profiles"))
    assert result.stdout.splitlines()[0] == (
        f"customer_profiles: views at version {version} (mirrored {versions} versions)"
    )
    assert "mirroring iceberg" in result.stderr
    assert "mirroring delta" in result.stderr
    again = in_process(
        "mirror",
        url,
        "--dataset",
        "customer_profiles",
        "--format",
        "delta",
        "--json",
        "--endpoint-url",
        s3.url,
    )
    assert again.returncode == 0, again.stderr
    assert orjson.loads(again.stdout) == {
        "dataset": "customer_profiles",
        "version": version,
        "written": {"delta": 0},
        "iceberg": None,
        "delta": f"{url}datasets/customer_profiles",
    }
    current = in_process("mirror", url, "--dataset", "customer_profiles", "--endpoint-url", s3.url)
    assert current.stdout.splitlines()[0] == (
        f"customer_profiles: views at version {version} (already current)"
    )
    one = pa.table({"id": [4], "name": ["d"], "year": [2025]})
    newer = lake.append("customer_profiles", one, partition_by=["year"]).version
    lake.mirror("customer_profiles", formats=("delta",))
    behind = in_process(
        "mirror", url, "--dataset", "customer_profiles", "--json", "--endpoint-url", s3.url
    )
    assert orjson.loads(behind.stdout)["written"] == {"iceberg": 1, "delta": 0}
    lake.append("customer_profiles", one, partition_by=["year"])
    lake.mirror("customer_profiles", formats=("delta",))
    behind = in_process("mirror", url, "--dataset", "customer_profiles", "--endpoint-url", s3.url)
    assert behind.stdout.splitlines()[0] == (
        f"customer_profiles: views at version {newer + 1} (mirrored 1 to iceberg, 0 to delta)"
    )
    bad = in_process(
        "mirror", url, "--dataset", "events", "--format", "hudi", "--endpoint-url", s3.url
    )
    assert bad.returncode == 2
    assert "hudi" in bad.stderr
