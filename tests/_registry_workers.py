"""Subprocess entry point for the multi-process registry history test.

    python -m tests._registry_workers URL BUCKET WORKER THREADS COMMITS OUT

Each thread commits COMMITS times through one shared Registry (group commit on), one new file
per commit, and records every invocation as a JSON line: commit id, file key, wall-clock start
and end, and the outcome ("ok" with the version, "fail", or "unknown").
"""

from __future__ import annotations

import sys
import threading
import time

import boto3
import orjson

from lakelock._datafile import DataFile
from lakelock._registry import Registry
from lakelock._retry import RetryPolicy
from lakelock._s3 import ObjectStore
from lakelock.errors import CommitConflictError, CommitStateUnknownError, LakelockError
from lakelock.testing import client_kwargs

WINDOW = 5000


def main(argv: list[str]) -> None:
    url, bucket, worker, threads_text, commits_text, out = argv
    threads, commits = int(threads_text), int(commits_text)
    client = boto3.client("s3", **client_kwargs(url))
    retry = RetryPolicy(max_attempts=60, max_elapsed=60, initial_backoff=0.005, max_backoff=0.2)
    registry = Registry(ObjectStore(client, bucket, retry=retry), retry=retry, commit_window=WINDOW)
    lines: list[bytes] = []
    lock = threading.Lock()

    def run(thread: int) -> None:
        for n in range(commits):
            commit_id = f"{worker}-{thread}-{n}"
            key = f"datasets/hist/{commit_id}.parquet"
            # Written now (no object needed: the commit does not look it up, rule 10).
            f = DataFile("hist", key, "", 1, 1, "sha256:00", '"0"', commit_id, None, time.time())
            record: dict[str, object] = {"id": commit_id, "key": key, "start": time.time()}
            try:
                result = registry.commit("hist", add=[f], commit_id=commit_id)
                record.update(outcome="ok", version=result.version)
            except CommitStateUnknownError as error:
                record.update(outcome="unknown", error=str(error))
            except CommitConflictError as error:
                record.update(outcome="fail", error=str(error))
            except LakelockError as error:  # storage errors before anything was sent
                record.update(outcome="unknown", error=f"{type(error).__name__}: {error}")
            record["end"] = time.time()
            with lock:
                lines.append(orjson.dumps(record))

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    with open(out, "wb") as handle:
        handle.write(b"\n".join(lines) + b"\n")


if __name__ == "__main__":
    main(sys.argv[1:7])
