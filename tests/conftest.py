"""Shared fixtures: one embedded S3 endpoint per test session, a fresh bucket per test, and
the store, lake and simulated time built on it. Shared helpers are in ``tests/_support``."""

from __future__ import annotations

import concurrent.futures
import gc
import itertools
import os
import subprocess
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import boto3
import boto3.session
import botocore.endpoint
import botocore.session
import orjson
import pytest
from botocore.retries.standard import ExponentialBackoff

from lakelock import Lake
from lakelock._layout import REGISTRY_KEY
from lakelock._policy import generate_bucket_policy
from lakelock._s3 import ObjectStore
from lakelock.cli import main
from lakelock.testing import DEFAULT_ACCESS_KEY, S3Endpoint
from lakelock.testing._policy_gate import DEFAULT_PRINCIPAL_ACCOUNT
from tests._support import CLI_ENV, FAST_RETRY, StallAndRace, wait_until
from tests._support.processes import InProcess
from tests._support.simtime import SimTime

# LocalStack's S3 for the opt-in `localstack` tests (the `localstack` fixture), Spark for the
# opt-in `spark` tests (the `spark` fixture).
pytest_plugins = ("tests._localstack", "tests._spark")

_bucket_numbers = itertools.count()

# The suite starts a few hundred Python processes (commands run as users run them, writer
# processes): where this machine says not to write bytecode, each would compile lakelock
# anew (~0.1 s of CPU); as on a user's machine, the first writes it and the others reuse it.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


@pytest.fixture(autouse=True, scope="session")
def _sdk_retries_without_waiting() -> Iterator[None]:
    """botocore waits between its own retries of a failed request (at random, up to seconds
    after a 503); tests force outcomes and never wait them out, so in this process its
    retries happen at once, as lakelock's own do with ``FAST_RETRY``. (Worker processes keep
    botocore's waits.)"""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ExponentialBackoff, "delay_amount", lambda self, context: 0.0)
        yield


def pytest_collection_finish(session: pytest.Session) -> None:
    """The modules the tests imported live to the session's end: out of the cyclic garbage
    collector's sight (``gc.freeze``), as what each module leaves alive is after it."""
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True, scope="module")
def _survivors_left_out_of_collections() -> Iterator[None]:
    """After each module, what is still alive (the endpoint's buckets, the caches) is moved
    out of the cyclic garbage collector's sight (``gc.freeze``): it lives to the session's
    end, and every full collection walked all of it again (a tenth of the CPU of the files
    measured). Garbage the module left is collected first; what tests make is collected as
    before."""
    yield
    gc.collect()
    gc.freeze()


@pytest.fixture
def sdk_pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The pauses botocore takes between attempts of a request in this process, recorded
    instead of taken: what a client's retry hooks chose, to compare, not a clock to read."""
    pauses: list[float] = []
    # The one place botocore waits between attempts of a request.
    monkeypatch.setattr(botocore.endpoint, "time", SimpleNamespace(sleep=pauses.append))
    return pauses


@pytest.fixture(scope="session")
def endpoint() -> Iterator[S3Endpoint]:
    """The embedded S3 endpoint, reached over HTTP on 127.0.0.1."""
    with S3Endpoint() as s3:
        yield s3


@pytest.fixture
def s3(endpoint: S3Endpoint) -> Iterator[S3Endpoint]:
    """The endpoint with no faults, no conflicts mode and zeroed counts, before and after."""
    endpoint.clear_faults()
    endpoint.configure(concurrent_conflicts=False)
    endpoint.reset_stats()
    yield endpoint
    endpoint.release_stalls()
    endpoint.clear_faults()
    endpoint.configure(concurrent_conflicts=False)


@pytest.fixture
def stall_and_race(s3: S3Endpoint) -> StallAndRace:
    """``stall_and_race(ours, theirs)``: ``ours()`` runs in a thread until its request
    replacing the registry's root is held at the endpoint; meanwhile ``theirs()`` runs to its
    end; then ours is let go. Returns both results (an error of ours is raised). The request
    held is the first ``operation`` (``PutObject``; ``CompleteMultipartUpload`` for a root
    written by multipart) on a key under ``prefix`` (the root's key; ``""``: any)."""

    def race(
        ours: Callable[[], Any],
        theirs: Callable[[], Any],
        *,
        operation: str = "PutObject",
        prefix: str = REGISTRY_KEY,
    ) -> tuple[Any, Any]:
        s3.inject("stall", operation=operation, prefix=prefix, count=1)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            mine = pool.submit(ours)
            wait_until(lambda: s3.stalled() == 1)
            other = theirs()
            s3.release_stalls()
            return mine.result(timeout=60), other

    return race


#: Who the endpoint's default client is, as bucket policies see it.
WRITER = f"arn:aws:iam::{DEFAULT_PRINCIPAL_ACCOUNT}:user/{DEFAULT_ACCESS_KEY}"


@pytest.fixture(scope="session")
def new_bucket(endpoint: S3Endpoint) -> Callable[..., str]:
    """``new_bucket(label, *, guarded=True)``: a new, empty bucket named after ``label``,
    guarded by the policy lakelock generates (every unconditional write to datasets/ and
    metastore/ refused, deletes only with If-Match) unless ``guarded`` is false. One client
    makes every bucket of the session: a boto3 client costs more CPU than the bucket, and
    no test is handed this one, so none changes it."""
    maker = endpoint.client()

    def make(label: str, *, guarded: bool = True) -> str:
        name = f"test-{next(_bucket_numbers)}-{label[:30]}".lower()
        name = "".join(c if c.isalnum() or c == "-" else "-" for c in name).strip("-")[:63]
        maker.create_bucket(Bucket=name)
        if guarded:
            policy = generate_bucket_policy(
                name, principals=[WRITER], deny_unconditional_delete=True
            )
            maker.put_bucket_policy(Bucket=name, Policy=orjson.dumps(policy).decode())
        return name

    return make


@pytest.fixture
def bucket(s3: S3Endpoint, new_bucket: Callable[..., str], request: pytest.FixtureRequest) -> str:
    """A new, empty bucket for this test, guarded by the policy lakelock generates, so every
    protocol test also proves the policy lets lakelock's own requests through. Tests marked
    ``unguarded`` (raw S3 behaviour, other policies) get a bare bucket."""
    guarded = request.node.get_closest_marker("unguarded") is None
    return new_bucket(request.node.name, guarded=guarded)


@pytest.fixture
def aws_env(s3: S3Endpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment a user of the embedded endpoint sets (``lakelock serve`` prints it):
    boto3's default client then talks to it, so documentation examples run exactly as
    written."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", DEFAULT_ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "lakelock-secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


@pytest.fixture
def admin(s3: S3Endpoint) -> Any:
    """A client the bucket policy does not bind: another writer that ignores the rules, to
    plant objects the way a misbehaving tool would."""
    return s3.client(access_key="admin")


@pytest.fixture
def client(s3: S3Endpoint) -> Any:
    """A boto3 client for the endpoint."""
    return s3.client()


@pytest.fixture
def store(client: Any, bucket: str) -> ObjectStore:
    """An ObjectStore on the test bucket; small multipart threshold; retries without waiting."""
    return ObjectStore(client, bucket, multipart_threshold=6 * 1024 * 1024, retry=FAST_RETRY)


@pytest.fixture
def lake_prefix() -> str:
    """Where the ``lake`` fixture lives in the bucket: at its root, unless a module overrides
    this fixture."""
    return ""


@pytest.fixture
def lake(s3: S3Endpoint, client: Any, bucket: str, lake_prefix: str) -> Iterator[Lake]:
    """A lake on the test bucket; retries without waiting. Closed after the test, so that
    nothing it left running (a hedged request's slower copy, a fold for other processes)
    sends a request during the next test's counts; faults and stalls the test left are
    cleared first, so that closing waits for nothing they hold."""
    lake = Lake(bucket, prefix=lake_prefix, s3=client, retry=FAST_RETRY)
    yield lake
    s3.clear_faults()
    s3.release_stalls()
    lake.close()


@pytest.fixture
def sim(store: ObjectStore) -> SimTime:
    """Simulated time, stamped into the test store's responses."""
    sim = SimTime()
    sim.attach(store.client)
    return sim


@pytest.fixture(scope="session")
def _sdk_models() -> Any:
    """botocore's loader of its service models (the JSON that describes S3's API), with what
    it has parsed: static data a new process parses again, a tenth of a second of CPU each
    time, which the sessions ``in_process`` makes share."""
    core = botocore.session.get_session()
    boto3.session.Session(botocore_session=core)  # adds boto3's own data to the search path
    return core.get_component("data_loader")


@pytest.fixture
def in_process(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], _sdk_models: Any
) -> InProcess:
    """``in_process(*args, env=None)``: ``lakelock *args`` in this process (the parser and the
    commands a ``lakelock`` process runs, ``lakelock.cli.main``), with the AWS and lakelock
    environment a command started with :data:`~tests._support.CLI_ENV` (or ``env``) sees, and
    boto3's default session made anew from it, as a new process makes it: its exit status and
    output, as :func:`~tests._support.processes.lakelock` gives them. A subprocess costs a
    second of start-up (pyarrow, boto3, the views imported); tests run a command as a process
    only where that is what they show (the entry point, Ctrl-C, start-up itself)."""

    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        for name in [k for k in os.environ if k.startswith(("AWS_", "LAKELOCK_"))]:
            monkeypatch.delenv(name)
        for name, value in (env or CLI_ENV).items():
            if name.startswith(("AWS_", "LAKELOCK_")):
                monkeypatch.setenv(name, value)
        # A new default session, made from the environment just set, as a new process makes
        # it (through boto3.setup_default_session, which a test may count requests on); only
        # the parsed models are shared (boto3 adds its data path to them once more).
        monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
        core = botocore.session.get_session()
        core.register_component("data_loader", _sdk_models)
        search = list(_sdk_models.search_paths)
        boto3.setup_default_session(botocore_session=core)
        _sdk_models.search_paths[:] = search
        capsys.readouterr()
        status = main(list(args))
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(["lakelock", *args], status, out, err)

    return run
