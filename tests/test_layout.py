"""The bucket layout: docs/FORMAT.md's key table is :data:`lakelock._layout.LAYOUT`, every
key lakelock builds (and every object it leaves in a bucket) is where the layout says, and a
key that would pass S3's 1024-byte limit with the lake's prefix is refused before any request
is sent."""

from __future__ import annotations

import ast
import re
import uuid
from typing import Any

import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock._layout import (
    LAYOUT,
    MAX_KEY_BYTES,
    MAX_NONCE,
    REGISTRY_KEY,
    VIEW_DIGITS,
    ViewKey,
    data_file_key,
    dataset_prefix,
    delta_checkpoint_key,
    delta_log_key,
    doctor_scratch,
    files_prefix,
    iceberg_engine_prefix,
    iceberg_list_key,
    iceberg_manifest_key,
    iceberg_metadata_key,
    intent_ms,
    intents_from,
    lease_key,
    lock_table_key,
    parse_view_key,
    probe_key,
    validate_prefix_room,
)
from lakelock._lease import Lease
from lakelock._pathlock import DistributedPathLock
from lakelock._registry._changes import Change
from lakelock._registry._intents import intent_document
from lakelock._registry._manifest import manifest_key
from lakelock._registry._snapshot import backup_key, snapshot_key
from lakelock._registry._tree import node_key
from lakelock._s3 import ObjectStore
from lakelock.errors import InvalidNameError
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY, REPO
from tests._support.files import datafile


def doc_block(path: str, heading: str) -> list[list[str]]:
    """The first code block under ``heading`` in ``path``, each line cut into its columns
    (two or more spaces apart)."""
    text = (REPO / path).read_text().split(f"\n## {heading}\n", 1)[1]
    block = re.search(r"```\n(.*?)```", text, re.S)
    assert block is not None, f"{path}: no code block under {heading!r}"
    return [re.split(r" {2,}", line.strip()) for line in block[1].splitlines() if line.strip()]


def area_of(key: str) -> str | None:
    """The pattern of the layout's area ``key`` falls in, if any."""
    for area in LAYOUT:
        regex = re.escape(area.pattern).replace(
            re.escape("<col>=<value>/.../"), "(?:[^/]+=[^/]*/)*"
        )
        regex = re.sub(
            r"<[^>]+>", "[^/]+", regex.replace(re.escape("<"), "<").replace(re.escape(">"), ">")
        )
        if re.fullmatch(regex, key):
            return area.pattern
    return None


def test_format_key_table_is_the_layout() -> None:
    """docs/FORMAT.md's key table lists LAYOUT, row by row: pattern, what, how written."""
    table = doc_block("docs/FORMAT.md", "Key layout")
    assert table == [[a.pattern, a.holds, a.written] for a in LAYOUT]


def test_architecture_lists_the_layout() -> None:
    """docs/ARCHITECTURE.md's short layout names every area of LAYOUT, and nothing else."""
    listed = [row[0] for row in doc_block("docs/ARCHITECTURE.md", "The bucket layout")]
    assert sorted(listed) == sorted(a.pattern for a in LAYOUT)


def test_every_builder_lands_in_its_area() -> None:
    """Each key builder's key falls in the area of the layout that names it."""
    body, nonce = b"{}", uuid.uuid4().hex
    change = Change("sales", "c1", add=(datafile("sales", "day=1", "f.parquet"),))
    built = {
        REGISTRY_KEY: 0,
        snapshot_key("sales", body, nonce): 1,
        node_key("sales", body, nonce): 2,
        manifest_key("sales", body, nonce): 3,
        intent_document(change, now_ms=1_763_712_000_000)[0]: 4,
        backup_key(41, body): 5,
        lease_key("nightly"): 6,
        lock_table_key("sales"): 7,
        probe_key(uuid.uuid4().hex): 8,
        data_file_key("sales", "day=1/region=eu", "f.parquet"): 9,
        data_file_key("sales", "", "f.parquet"): 9,
        doctor_scratch("0123abcd") + "01-create-only": 10,
        delta_log_key("sales", 3): 11,
        delta_checkpoint_key("sales", 10): 12,
        iceberg_metadata_key("sales", 41): 13,
        iceberg_list_key("sales", 41): 14,
        iceberg_manifest_key("sales", 41, 2): 15,
        iceberg_engine_prefix("sales") + "snap-1-0-a.avro": 16,
    }
    assert len(set(built.values())) == len(LAYOUT)
    for key, area in built.items():
        assert area_of(key) == LAYOUT[area].pattern, key
    assert area_of("metastore/elsewhere/x.json") is None


def test_what_a_lake_leaves_is_in_the_layout(lake: Lake) -> None:
    """After appends, a lease, a lock and a conditional delete (its probe), every object in
    the bucket falls in an area of the layout."""
    lake.append("sales", pa.table({"day": [1, 2], "n": [3, 4]}), partition_by=["day"])
    lake.append("sales", pa.table({"day": [1], "n": [5]}), partition_by=["day"])
    with lake.lease("nightly", ttl=30), lake.lock(write=["/sales/day=1"]):
        pass
    (stray,) = lake.write("sales", pa.table({"day": [9], "n": [0]}), partition_by=["day"])
    lake.store.delete_if_unchanged([(stray.key, stray.etag)])
    keys = [o.key for o in lake.store.list("")]
    assert {area_of(k) for k in keys} >= {LAYOUT[0].pattern, LAYOUT[6].pattern}
    assert [k for k in keys if area_of(k) is None] == []


def test_view_keys_are_read_back_as_built() -> None:
    """Each view key says what it is, of which dataset and which version (vacuum keeps a
    view's objects by it); a key the views do not write is none of them."""
    version = 10**VIEW_DIGITS - 1
    assert [
        parse_view_key(k)
        for k in (
            delta_log_key("sales", 3),
            delta_checkpoint_key("sales", 10),
            iceberg_metadata_key("sales", version),
            iceberg_list_key("sales", 41),
            iceberg_manifest_key("sales", 41, 12),
        )
    ] == [
        ViewKey(delta_log_key("sales", 3), "delta log", "sales", 3),
        ViewKey(delta_checkpoint_key("sales", 10), "delta checkpoint", "sales", 10),
        ViewKey(iceberg_metadata_key("sales", version), "iceberg metadata", "sales", version),
        ViewKey(iceberg_list_key("sales", 41), "iceberg list", "sales", 41),
        ViewKey(iceberg_manifest_key("sales", 41, 12), "iceberg manifest", "sales", 41),
    ]
    for key in (
        "views/sales/iceberg/manifests/x.avro",
        "views/sales/iceberg/metadata/3.metadata.json",
        "datasets/sales/_delta_log/00000000000000000003.crc",
        "datasets/sales/day=1/_delta_log/00000000000000000003.json",
        data_file_key("sales", "day=1", "f.parquet"),
    ):
        assert parse_view_key(key) is None, key


def test_intent_keys_sort_by_the_time_they_name() -> None:
    """An intent's key names when it was made; every intent made at a time or later sorts
    after that time's bound, every one made before sorts below it."""
    change = Change("sales", "c1", add=(datafile("sales", "", "f.parquet"),))
    keys = {ms: intent_document(change, now_ms=ms)[0] for ms in (999, 1_000, 1_001)}
    assert {ms: intent_ms(key) for ms, key in keys.items()} == {ms: ms for ms in keys}
    assert keys[999] < intents_from(1_000) < keys[1_000] < keys[1_001]
    assert intents_from(-5) == intents_from(0)


def test_nonce_is_bounded() -> None:
    """A digest-named key's nonce is 1 to 32 ASCII letters or digits (the layout's bound on
    registry keys rests on it)."""
    assert snapshot_key("d", b"", "a" * MAX_NONCE).endswith("-" + "a" * MAX_NONCE + ".json")
    for nonce in ("", "a" * (MAX_NONCE + 1), "a-b", "é"):
        with pytest.raises(ValueError, match="nonce"):
            node_key("d", b"", nonce)


def test_prefix_without_room_for_the_registry_is_refused(client: Any, bucket: str) -> None:
    """A lake prefix that leaves no room for the longest registry key is refused when the
    store is made; one of exactly the room left holds a dataset with the longest name, whose
    longest keys are then exactly 1024 bytes."""
    room = MAX_KEY_BYTES - len(snapshot_key("d" * 255, b"", "n" * MAX_NONCE).encode())
    with pytest.raises(InvalidNameError, match="prefix"):
        Lake(bucket, prefix="p" * room + "/", s3=client)
    with pytest.raises(InvalidNameError):
        validate_prefix_room("é" * (room // 2 + 1))
    prefix = "p" * (room - 1) + "/"
    lake = Lake(bucket, prefix=prefix, s3=client, retry=FAST_RETRY)
    name = "d" * 255
    lake.append(name, pa.table({"n": [1]}))
    assert lake.read(name).column("n").to_pylist() == [1]
    longest = max(len(lake.store.full_key(o.key).encode()) for o in lake.store.list("metastore/"))
    assert longest <= MAX_KEY_BYTES


def test_store_refuses_a_key_over_the_limit(s3: S3Endpoint, store: ObjectStore) -> None:
    """Whatever builds a key, the store sends none over S3's limit: InvalidNameError, and no
    request."""
    s3.reset_stats()
    with pytest.raises(InvalidNameError):
        store.put("x" * (MAX_KEY_BYTES + 1), b"", mode="create")
    with pytest.raises(InvalidNameError):
        store.get("y" * (MAX_KEY_BYTES + 1))
    assert s3.stats() == {}


def test_keys_follow_the_layout() -> None:
    """Data files under datasets/, leases and lock tables under metastore/."""
    assert dataset_prefix("sales") == "datasets/sales/"
    assert data_file_key("sales", "year=2024", "f.parquet") == "datasets/sales/year=2024/f.parquet"
    assert lease_key("nightly") == "metastore/leases/nightly.json"
    assert lock_table_key("sales") == "metastore/locks/sales.json"


@pytest.mark.parametrize(
    "build",
    [
        lambda prefix, n: data_file_key("d", "c=" + "v" * n, "f.parquet", prefix=prefix),
        lambda prefix, n: lease_key("l" * n, prefix=prefix),
        lambda prefix, n: lock_table_key("t" * n, prefix=prefix),
    ],
    ids=["data file", "lease", "lock table"],
)
def test_every_key_builder_checks_the_limit_with_the_prefix(build: Any) -> None:
    """A key of exactly 1024 bytes with the prefix is built; one byte more is refused."""
    prefix = "lake/" + "é" * 300 + "/"  # 606 bytes
    fitting = build(prefix, 100)
    room = MAX_KEY_BYTES - len((prefix + fitting).encode())
    assert len((prefix + build(prefix, 100 + room)).encode()) == MAX_KEY_BYTES
    with pytest.raises(InvalidNameError):
        build(prefix, 101 + room)


def test_lease_and_lock_refuse_long_keys_before_sending(
    s3: S3Endpoint, client: Any, bucket: str
) -> None:
    """A lease name or a locked dataset whose key passes the limit with the lake's prefix is
    an InvalidNameError, and nothing reaches S3."""
    store = ObjectStore(client, bucket, prefix="p" * 600 + "/")
    locks = DistributedPathLock(store)
    s3.reset_stats()
    with pytest.raises(InvalidNameError):
        Lease(store, "x" * 420)
    with pytest.raises(InvalidNameError):
        locks.lock(write=["/" + "d" * 420])
    assert s3.stats() == {}
    assert locks.lock(write=["/d"]).request.write == frozenset({"/d"})


def test_files_prefix_is_where_a_files_key_lies() -> None:
    """A data file's key lies under its dataset's and its partition's prefix, and no other
    partition's."""
    key = data_file_key("sales", "day=1/region=eu", "f.parquet")
    assert key.startswith(files_prefix("sales"))
    assert key.startswith(files_prefix("sales", "day=1/region=eu"))
    assert not key.startswith(files_prefix("sales", "day=1/region=e"))
    assert files_prefix("sales") == dataset_prefix("sales")


#: Strings that are a layout folder's name but build no key: the area labels of request
#: counts (the test endpoint's and the simulator's, ``metastore/<kind>``).
NOT_KEYS = {("testing/_gateway.py", "metastore/"), ("_sim/_loop.py", "metastore/")}


def test_only_the_layout_spells_its_folders() -> None:
    """No module but lakelock/_layout.py has a string (docstrings aside) starting with a
    folder of the layout: every key is built there."""
    folders = ("datasets/", "metastore/", "views/", ".lakelock-doctor/")
    package = REPO / "lakelock"
    found = set()
    for path in sorted(package.rglob("*.py")):
        name = path.relative_to(package).as_posix()
        if name == "_layout.py":
            continue
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and node.value.startswith(folders)
            ):
                found.add((name, node.value))
    assert {(name, value) for name, value in found if (name, value) not in NOT_KEYS} == set()
