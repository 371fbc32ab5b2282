"""The chaos checker (the module docstring of ``tests/test_chaos.py`` lists what it
verifies), the lake every chaos and crash run starts from, and how a run's seeds are chosen
and replayed. Shared by ``tests/test_chaos.py`` and ``tests/test_crash.py``."""

from __future__ import annotations

import hashlib
import itertools
import math
import os
from collections import Counter
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from lakelock import Lake
from lakelock._registry import Registry
from lakelock.testing import S3Endpoint
from tests._chaos_workers import PLACES, WINDOW, places_of, split_place
from tests._support import FAST_RETRY

__all__ = [
    "COMMITTING",
    "MOVES_FILES",
    "MOVES_IDS",
    "SEED_ENV",
    "check_chaos",
    "lease_problems",
    "real_time_problems",
    "registered_file_problems",
    "replay",
    "seeds",
    "setup_lake",
]

SEED_ENV = "LAKELOCK_CHAOS_SEED"
COMMITTING = ("append", "ledger", "rename")
MOVES_IDS = list(range(6))
MOVES_FILES = 2


def seeds(default: Iterable[int]) -> list[int]:
    """The seeds to run: ``LAKELOCK_CHAOS_SEED`` (one replayed seed) or ``default``."""
    chosen = os.environ.get(SEED_ENV)
    return [int(chosen)] if chosen else list(default)


def setup_lake(s3: S3Endpoint, bucket: str) -> Lake:
    """The lake before the run: ``moves`` with one partition of two files at ``slot=a``
    (place ``PLACES[0]``)."""
    lake = Lake(bucket, s3=s3.client(), retry=FAST_RETRY)
    lake.registry = Registry(lake.store, retry=FAST_RETRY, commit_window=WINDOW)
    half = len(MOVES_IDS) // MOVES_FILES
    for n in range(MOVES_FILES):
        ids = MOVES_IDS[n * half : (n + 1) * half]
        table = pa.table({"id": ids, "slot": ["a"] * len(ids)})
        lake.append("moves", table, partition_by=["slot"], commit_id=f"setup-{n}")
    return lake


# -- the checker --------------------------------------------------------------------------------


def check_chaos(
    records: list[dict[str, Any]],
    lake: Lake,
    *,
    setup_ids: Iterable[str] = (),
    time_travel: bool = True,
    vacuum_versions: Iterable[int] = (),
) -> list[str]:
    """Every violation of lakelock's guarantees in this history and final state (module
    docstring); empty: none. ``lake`` reads the final state (no faults)."""
    problems: list[str] = []
    snapshot = lake.registry.read()
    recorded = list(snapshot.commits)
    if len(recorded) >= WINDOW:
        problems.append("history longer than the commit window: cannot check it")
    counts = Counter(r.id for r in recorded)
    versions = {r.id: r.version for r in recorded}
    order = {r.id: n for n, r in enumerate(recorded)}  # the order commits were applied in
    invocations = [r for r in records if r["op"] in COMMITTING]
    problems += [f"untyped error escaped: {r}" for r in records if r.get("untyped")]

    # Each commit: exactly once, never, or at most once.
    landed: list[dict[str, Any]] = []
    for inv in invocations:
        seen = counts[inv["id"]]
        what = f"{inv['outcome']} {inv['op']} {inv['id']}"
        if inv["outcome"] == "ok":
            if seen != 1:
                problems.append(f"acknowledged commit recorded {seen} times: {what}")
            elif versions[inv["id"]] != inv["version"]:
                problems.append(
                    f"{what} acknowledged as v{inv['version']}, recorded at v{versions[inv['id']]}"
                )
        elif inv["outcome"] == "fail" and seen:
            problems.append(f"failed commit is in the registry ({seen}x): {what}: {inv['error']}")
        elif inv["outcome"] == "unknown" and seen > 1:
            problems.append(f"unknown commit recorded {seen} times: {what}")
        if seen == 1:
            landed.append({**inv, "version": versions[inv["id"]], "order": order[inv["id"]]})
    made = {inv["id"] for inv in invocations} | set(setup_ids)
    # A lease's acquisitions record their takeovers, by commits of their own.
    made |= {r.id for r in recorded if r.operation == "takeover" and r.dataset == ""}
    problems += [f"commit {i!r} is recorded but nobody made it" for i in counts if i not in made]
    distinct = sorted({r.version for r in recorded})
    # A version without a commit must be one that only recorded intents' fates (rejected or
    # cancelled commits, so that nobody applies them later), or one a vacuum made to record
    # its cutoff before deleting (``vacuum_versions``: FORMAT.md rule 10).
    fate_only = {f.version for f in lake.registry.internals.intent_fates() if f.state != "applied"}
    if distinct:
        unexplained = (
            set(range(distinct[0], snapshot.version + 1))
            - set(distinct)
            - fate_only
            - set(vacuum_versions)
        )
        if unexplained:
            problems.append(f"versions with neither a commit nor a fate: {sorted(unexplained)}")

    problems += real_time_problems(landed, [r for r in records if r["op"] == "observe"])
    problems += _appends(invocations, lake, snapshot, versions)
    problems += registered_file_problems(lake, snapshot)
    problems += _moves(records, landed, lake, snapshot)
    problems += lease_problems(records, landed, snapshot)
    if time_travel:  # not after a vacuum that deleted the older versions on purpose
        problems += _time_travel(landed, lake, snapshot)
    return problems


def _time_travel(landed: list[dict[str, Any]], lake: Lake, snapshot: Any) -> list[str]:
    """A read at version V returns exactly the rows of the appends landed at or before V
    (every version, or a spread sample of 40 in long runs)."""
    if "events" not in snapshot.datasets:
        return []
    appends = [i for i in landed if i["op"] == "append"]
    history = lake.registry.history("events")
    versions = sorted({h.version for h in history})
    if len(versions) > 40:
        step = len(versions) / 40
        versions = sorted({versions[int(n * step)] for n in range(40)} | {versions[-1]})
    problems = []
    for version in versions:
        table = lake.read("events", version=version)
        problems += travel_problems(version, Counter(table.column("cid").to_pylist()), appends)
    return problems


def travel_problems(version: int, rows: Counter[str], appends: list[dict[str, Any]]) -> list[str]:
    """What is wrong with the rows (per commit id) read at ``version``."""
    expected = {i["id"]: i["rows"] for i in appends if i["version"] <= version}
    problems = [
        f"read at v{version}: {rows.get(cid, 0)} of the {n} rows of {cid} (landed at or before)"
        for cid, n in expected.items()
        if rows.get(cid, 0) != n
    ]
    problems += [
        f"read at v{version}: rows of {cid}, which landed later or never"
        for cid in rows
        if cid not in expected and not cid.startswith("setup")
    ]
    return problems


def real_time_problems(
    landed: list[dict[str, Any]], observations: list[dict[str, Any]]
) -> list[str]:
    """Commits and snapshots respect real time. Only an acknowledged commit is known to have
    landed by the time its invocation ended: one whose writer died (unknown) may still be
    applied later, by another process folding its intent."""
    problems = []
    by_end = sorted((i for i in landed if i.get("outcome", "ok") == "ok"), key=lambda i: i["end"])
    for earlier, later in itertools.product(by_end, landed):
        if later["start"] > earlier["end"] and later["version"] <= earlier["version"]:
            problems.append(
                f"{later['id']} (v{later['version']}) began after {earlier['id']} "
                f"(v{earlier['version']}) ended but is not newer"
            )
    ends = [i["end"] for i in by_end]
    newest = list(itertools.accumulate((i["version"] for i in by_end), max))
    for obs in observations:
        if "version" not in obs:
            continue
        done = _count_before(ends, obs["time"])
        if done and newest[done - 1] > obs["version"]:
            problems.append(
                f"snapshot v{obs['version']} taken at {obs['time']:.3f} misses v"
                f"{newest[done - 1]}, committed before it"
            )
    for worker, group in itertools.groupby(
        sorted(observations, key=lambda o: (o["worker"], o["time"])), key=lambda o: o["worker"]
    ):
        seen = [o["version"] for o in group if "version" in o]
        if seen != sorted(seen):
            problems.append(f"reader of {worker} saw the registry go back in time")
    return problems


def _count_before(ends: list[float], moment: float) -> int:
    return sum(1 for end in ends if end < moment)


def _appends(
    invocations: list[dict[str, Any]], lake: Lake, snapshot: Any, versions: dict[str, int]
) -> list[str]:
    """Appends are atomic and exactly-once, in the registry's file lists and in the rows."""
    appends = [i for i in invocations if i["op"] == "append"]
    if "events" not in snapshot.datasets:
        registered: set[str] = set()
        table = None
    else:
        registered = {f.key for f in lake.registry.files("events", snapshot=snapshot)}
        table = lake.read("events", snapshot=snapshot)
    problems = []
    rows = Counter(table.column("cid").to_pylist()) if table is not None else Counter()
    if table is not None and table.num_rows != len(set(table.column("row").to_pylist())):
        problems.append("some appended row is in the data more than once")
    for inv in appends:
        present = [k in registered for k in inv["keys"]]
        landed = inv["id"] in versions
        what = f"{inv['outcome']} append {inv['id']}"
        if any(present) and not all(present):
            problems.append(f"{what}: only some of its files are registered")
        if all(present) != landed:
            problems.append(f"{what}: files registered={all(present)} but commit landed={landed}")
        if inv["outcome"] == "ok" and rows[inv["id"]] != inv["rows"]:
            problems.append(f"{what}: {rows[inv['id']]} of its {inv['rows']} rows read back")
        if inv["outcome"] != "ok" and rows[inv["id"]] not in (0, inv["rows"]):
            problems.append(f"{what}: {rows[inv['id']]} of its {inv['rows']} rows read back")
        if inv["outcome"] == "fail" and rows[inv["id"]]:
            problems.append(f"{what}: its rows are in the data")
        if inv.get("error", "").startswith("AlreadyExistsError"):
            # Its file names are unique to this invocation: nobody else can have taken them.
            problems.append(f"{what}: its own file reported as already existing: {inv['error']}")
    return problems


def registered_file_problems(lake: Lake, snapshot: Any) -> list[str]:
    """Every registered file exists, has its checksum, and is parquet of its row count."""
    problems = []
    for name in snapshot.datasets:
        for f in lake.registry.files(name, snapshot=snapshot):
            body = lake.store.get(f.key).body
            if f"sha256:{hashlib.sha256(body).hexdigest()}" != f.checksum or len(body) != f.size:
                problems.append(f"{f.key}: bytes differ from the registered file")
                continue
            rows = pq.ParquetFile(pa.BufferReader(body)).metadata.num_rows
            if rows != f.record_count:
                problems.append(f"{f.key}: {rows} rows, registered with {f.record_count}")
    return problems


def _moves(
    records: list[dict[str, Any]], landed: list[dict[str, Any]], lake: Lake, snapshot: Any
) -> list[str]:
    """The moving partition is whole at exactly one place, in every snapshot and at the end;
    the landed renames chain; every append is all or nothing in every snapshot read."""
    problems = []
    expected = [MOVES_FILES, len(MOVES_IDS)]
    rows = {r["id"]: r["rows"] for r in records if r["op"] == "append"}
    for obs in records:
        if obs["op"] != "observe":
            continue
        if "violation" in obs:
            problems.append(
                f"reader of {obs['worker']} at v{obs.get('version')}: {obs['violation']}"
            )
        places = obs.get("places")
        if places is not None and list(places.values()) != [expected]:
            problems.append(f"half-renamed partition seen at v{obs['version']}: {places}")
        if "ids" in obs and (obs["ids"] != MOVES_IDS or len(obs["slots"]) != 1):
            problems.append(
                f"partition read back at v{obs['version']} as {obs['ids']} in {obs['slots']}"
            )
        for cid, count in obs.get("events", {}).items():
            if count != rows.get(cid):
                problems.append(
                    f"{count} of the {rows.get(cid)} rows of {cid} seen at v{obs['version']}"
                )
    final = places_of(snapshot)
    if list(final.values()) != [expected]:
        problems.append(f"the partition ends as {final}")
    else:
        dataset, partition = split_place(next(iter(final)))
        table = lake.read(dataset, partitions=[partition], snapshot=snapshot)
        if sorted(table.column("id").to_pylist()) != MOVES_IDS:
            problems.append("the partition's rows are not all there at the end")
    place = PLACES[0]
    for rename in sorted((i for i in landed if i["op"] == "rename"), key=lambda i: i["version"]):
        if rename["src"] != place:
            problems.append(f"rename {rename['id']} moved from {rename['src']}, it was at {place}")
        place = rename["dst"]
    if final and list(final) != [place]:
        problems.append(f"renames end at {place}, the partition is at {list(final)}")
    return problems


def expiry(holding: dict[str, Any]) -> float:
    """When a holding's holder last believed its lease would expire (none noted: never)."""
    return float(holding.get("expires_at", math.inf))


def lease_problems(
    records: list[dict[str, Any]], landed: list[dict[str, Any]], snapshot: Any
) -> list[str]:
    """Lease holdings never overlap; abandoned ones keep their two margins; fences order."""
    problems = []
    holdings = sorted((r for r in records if r["op"] == "lease"), key=lambda r: r["start"])
    # A holding began and was last known held no later than its expiry (a check that passes
    # moves both on): a holder paused between its acquisition and noting the time notes a
    # start, and a last check, past its expiry (seen on a loaded machine: token 27 noted after
    # token 28, which took over once 27 had expired). Ordered and compared by what it held.
    held = sorted(
        (
            {**r, "start": min(r["start"], expiry(r)), "end": min(r["end"], expiry(r))}
            for r in holdings
        ),
        key=lambda r: r["start"],
    )
    tokens = [h["token"] for h in held]
    if len(set(tokens)) != len(tokens):
        problems.append(f"two holdings share a token: {sorted(tokens)}")
    if tokens != sorted(tokens):
        problems.append(f"lease tokens do not rise with time: {tokens}")
    for a, b in itertools.pairwise(held):
        if not a["end"] < b["start"]:
            problems.append(f"lease holdings overlap: {a} and {b}")
    by_token = sorted(holdings, key=lambda h: h["token"])
    for a, b in itertools.pairwise(by_token):
        if a["kind"] != "abandoned":
            continue
        gap = 2 * a["margin"]
        if not b["start"] - a["end"] > gap:
            problems.append(f"taken over within two margins (wall clock): {a} then {b}")
        if not b["start_earliest"] - a["end_latest"] > gap:
            problems.append(f"taken over within two margins (server time): {a} then {b}")
    # Within one version (a swap folding several processes' commits) the root lists commits
    # in the order they were applied.
    fenced = sorted(
        (i for i in landed if i.get("fence") is not None),
        key=lambda i: (i["version"], i.get("order", 0)),
    )
    fenced_tokens = [i["fence"] for i in fenced]
    if fenced_tokens != sorted(fenced_tokens):
        problems.append(f"fenced commits landed out of token order: {fenced_tokens}")
    for commit in fenced:
        if snapshot.fences.get(commit["fence_name"], -1) < commit["fence"]:
            problems.append(f"the registry's fence is below that of landed commit {commit['id']}")
    return problems


def replay(seed: int, test: str, path: str = "tests/test_chaos.py") -> str:
    """The command that replays ``seed`` in ``test``."""
    marker = " -m slow" if test.endswith(("_large", "_heavy")) else ""
    return f"{SEED_ENV}={seed} python -m pytest{marker} {path} -k {test}"
