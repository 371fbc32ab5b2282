"""The bad-input run (issue 8): Hypothesis-generated hostile inputs against the embedded
endpoint. Each must end in a typed lakelock error or a faithful success; nothing is
overwritten, nothing lost, never wrong data.

- hostile dataset names, partition values and file names through ``lake.append``: an
  :class:`InvalidNameError` with nothing written, or a success that reads back exactly; a
  bystander dataset is untouched either way;
- registry bodies planted by another writer (random bytes, JSON of wrong shapes, valid
  documents with one field broken, future versions, huge or deeply nested documents):
  :class:`RegistryCorruptError` on read and on commit, the planted body unchanged by the
  commit attempt; a body that does parse is one the parser reads faithfully (no coercion);
- manifests replaced or truncated, data files truncated or corrupted, objects missing:
  typed errors on read (``StorageError`` with code ``ChecksumMismatch`` for data files);
- lease documents and lock tables planted: :class:`LeaseError`, the body unchanged.

Each example runs in a fresh lake prefix of the test's bucket. The default run keeps example
counts small; ``python -m pytest -m slow tests/test_hostile_inputs.py`` runs many more.
"""

from __future__ import annotations

import contextlib
import itertools
import unicodedata
from typing import Any

import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakelock import Lake
from lakelock._layout import lease_key
from lakelock._lease import Lease
from lakelock._registry import REGISTRY_KEY, parse_registry, serialize_registry
from lakelock._registry._document import FORMAT_VERSION
from lakelock.errors import (
    DatasetNotFoundError,
    InvalidNameError,
    LakelockError,
    LeaseError,
    RegistryCorruptError,
    StorageError,
)
from tests._support import FAST_RETRY

_prefixes = itertools.count()

#: Derandomized (the same examples every run) and without the example database, so that a
#: run is reproducible; the slow variants draw many more.
DEFAULT = settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
SLOW = settings(DEFAULT, max_examples=300)

EDGE_NAMES = [
    "",
    ".",
    "..",
    "...",
    "a/b",
    "/",
    "a\x00b",
    "a\x7fb",
    "a\x85b",  # C1 control
    "a\u200bb",  # zero-width space (format character)
    "e\u0301",  # NFD: the same name as "é"
    "\u00e9",
    "_hidden",
    "-dash",
    ".dot",
    "x" * 255,
    "x" * 256,
    "\u00e9" * 128,  # 256 UTF-8 bytes
    "\ud800",  # a lone surrogate: not UTF-8
    "__HIVE_DEFAULT_PARTITION__",
    "%",
    "%2F",
    "%zz",
    "a=b",
    " ",
    "\t",
    "x y",
    "日本語",
    "\U0001f600",
    "a\\b",
    "a:b",
    "NUL",
]
hostile_text = st.one_of(st.sampled_from(EDGE_NAMES), st.text(max_size=24))
hostile_values = st.lists(
    st.one_of(st.none(), hostile_text, st.text(min_size=600, max_size=900)), min_size=1, max_size=4
)


def fresh_lake(client: Any, bucket: str) -> Lake:
    """A lake in a prefix of its own, so examples do not see each other."""
    return Lake(bucket, prefix=f"ex-{next(_prefixes)}", s3=client, retry=FAST_RETRY)


def everything(lake: Lake) -> dict[str, str]:
    """Every object of the lake (key -> ETag)."""
    return {o.key: o.etag for o in lake.store.list()}


def bystander(lake: Lake) -> pa.Table:
    """A dataset written before the hostile input, which must survive it intact."""
    table = pa.table({"id": [1, 2, 3], "k": ["a", "b", "a"]})
    lake.append("bystander", table, partition_by=["k"])
    return table


def sorted_rows(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda row: row["id"])


# -- names ----------------------------------------------------------------------------------


_row_ids = itertools.count()


def check_hostile_append(
    lake: Lake, kept: pa.Table, dataset: str, values: list[str | None], file_name: str | None
) -> None:
    """Append hostile input to ``lake`` (which holds the ``bystander`` dataset ``kept``):
    refused with nothing written, or read back exactly; the bystander intact either way."""
    try:
        column = pa.array(values, pa.string())
    except UnicodeEncodeError:
        return  # Arrow itself cannot hold a lone surrogate: no table, nothing for lakelock
    ids = pa.array([next(_row_ids) for _ in values], pa.int64())
    table = pa.table({"id": ids, "p": column})
    before = everything(lake)
    version = lake.registry.read().version
    try:
        lake.append(dataset, table, partition_by=["p"], file_name=file_name)
    except InvalidNameError:
        assert everything(lake) == before, "a refused append wrote something"
        assert lake.registry.read().version == version
    else:
        # Names are stored in NFC; reading by another spelling is pinned separately below.
        canonical = unicodedata.normalize("NFC", dataset)
        mine = set(ids.to_pylist())
        wanted = [{"p": value} for value in dict.fromkeys(values)]
        read = lake.read(canonical, partitions=wanted)
        back = [row for row in sorted_rows(read) if row["id"] in mine]
        assert back == sorted_rows(table)
        after = everything(lake)
        for key, etag in before.items():  # no write-once object overwritten or lost
            if key != REGISTRY_KEY:
                assert after.get(key) == etag, key
    assert sorted_rows(lake.read("bystander")) == sorted_rows(kept)


@DEFAULT
@given(dataset=hostile_text, values=hostile_values, file_name=st.none() | hostile_text)
def test_hostile_names_are_refused_or_round_trip(
    client: Any, bucket: str, dataset: str, values: list[str | None], file_name: str | None
) -> None:
    """Hostile dataset names, partition values and file names: InvalidNameError with nothing
    written, or an append that reads back exactly; the bystander dataset is untouched."""
    lake = fresh_lake(client, bucket)
    check_hostile_append(lake, bystander(lake), dataset, values, file_name)


@pytest.mark.slow
@pytest.mark.timeout(900)  # 300 examples: minutes on a busy machine
@SLOW
@given(dataset=hostile_text, values=hostile_values, file_name=st.none() | hostile_text)
def test_hostile_names_many(
    client: Any, bucket: str, dataset: str, values: list[str | None], file_name: str | None
) -> None:
    """The same property, many more examples."""
    lake = fresh_lake(client, bucket)
    check_hostile_append(lake, bystander(lake), dataset, values, file_name)


def test_edge_names_each_refused_or_round_trip(client: Any, bucket: str) -> None:
    """Every listed edge case, as a dataset name, a partition value and a file name (one lake
    per role, shared by the cases): refused with nothing written, or read back exactly."""
    for role in ("dataset", "value", "file"):
        lake = fresh_lake(client, bucket)
        kept = bystander(lake)
        for n, name in enumerate(EDGE_NAMES):
            dataset = name if role == "dataset" else "ds"
            value = name if role == "value" else f"v{n}"  # file names never meet twice
            check_hostile_append(lake, kept, dataset, [value], name if role == "file" else None)


def test_dataset_reads_back_by_the_name_it_was_written_with(client: Any, bucket: str) -> None:
    """A dataset appended as "e\u0301" (NFD) is stored as "\u00e9" (NFC); reading it by the
    very name it was written with works too (lake.read validates and normalises the name)."""
    lake = fresh_lake(client, bucket)
    table = pa.table({"id": [1], "p": ["v"]})
    lake.append("e\u0301", table, partition_by=["p"])
    assert list(lake.registry.read().datasets) == ["\u00e9"]
    assert sorted_rows(lake.read("\u00e9")) == sorted_rows(table)
    assert sorted_rows(lake.read("e\u0301")) == sorted_rows(table)


# -- planted registry bodies ----------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_DELETE = object()


def template(lake: Lake) -> dict[str, Any]:
    """A real registry document with every kind of field: datasets, partitions, manifests,
    properties, a lease fence, a lock fence, commits and a retired manifest."""
    table = pa.table({"id": [1, 2], "k": ["a", "b"]})
    lake.append("sales", table, partition_by=["k"])
    lake.registry.commit("sales", properties={"owner": "etl"}, fence=("lease:x", 3))
    with lake.lock(write=["/sales/k=b"], timeout=5) as held:
        files = lake.registry.files("sales", partitions=["k=b"])
        lake.registry.commit("sales", remove=files, fence=held.fence)
    doc: dict[str, Any] = orjson.loads(lake.store.get(REGISTRY_KEY).body)
    return doc


def paths(value: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside a JSON document."""
    found = [here] if here else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*here, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths(item, (*here, index))
    return found


def broken(doc: dict[str, Any], path: tuple[Any, ...], new: Any) -> dict[str, Any]:
    """``doc`` with the value at ``path`` replaced by ``new`` (or removed)."""
    copy: dict[str, Any] = orjson.loads(orjson.dumps(doc))
    parent: Any = copy
    for step in path[:-1]:
        parent = parent[step]
    if new is _DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = new
    return copy


def plant(lake: Lake, body: bytes) -> str:
    """Write ``body`` as the registry, as another (non-conforming) writer would."""
    response = lake.client.put_object(
        Bucket=lake.bucket, Key=lake.store.full_key(REGISTRY_KEY), Body=body
    )
    return str(response["ETag"])


def check_planted(lake: Lake, body: bytes, *, faithful: bool = False) -> None:
    """A planted body is refused and kept; or, if it is a registry after all, lakelock works
    on it with typed errors only, and (``faithful``) it reads it without coercing anything."""
    etag = plant(lake, body)
    try:
        doc = parse_registry(body)
    except RegistryCorruptError:
        with pytest.raises(RegistryCorruptError):
            lake.registry.read()
        with pytest.raises(RegistryCorruptError):
            lake.append("sales", pa.table({"id": [9], "k": ["c"]}), partition_by=["k"])
        with pytest.raises(RegistryCorruptError):
            lake.registry.commit("other", properties={"a": "b"})
        stored = lake.store.get(REGISTRY_KEY)
        assert (stored.body, stored.etag) == (body, etag), "a refused registry was overwritten"
        return
    if faithful:
        # What lakelock accepts is exactly what it would have written: no guessing.
        assert orjson.loads(serialize_registry(doc)) == orjson.loads(body)
    lake.registry.read()
    for attempt in (
        lambda: lake.read("sales"),
        lambda: lake.append("sales", pa.table({"id": [9], "k": ["c"]}), partition_by=["k"]),
        lambda: lake.registry.commit("other", properties={"a": "b"}),
    ):
        with contextlib.suppress(LakelockError):
            attempt()


@DEFAULT
@given(body=st.binary(max_size=200) | json_values.map(orjson.dumps))
def test_planted_garbage_registry_is_refused_and_kept(
    client: Any, bucket: str, body: bytes
) -> None:
    """Random bytes and JSON of the wrong shape at the registry key: RegistryCorruptError on
    read and on every commit, and the planted body is still there, unchanged."""
    check_planted(fresh_lake(client, bucket), body)


@pytest.fixture
def registry_template(client: Any, bucket: str) -> dict[str, Any]:
    return template(fresh_lake(client, bucket))


def one_field_broken(data: st.DataObject, doc: dict[str, Any]) -> bytes:
    path = data.draw(st.sampled_from(paths(doc)), label="path")
    new = data.draw(json_values | st.just(_DELETE), label="new value")
    return orjson.dumps(broken(doc, path, new))


@DEFAULT
@given(data=st.data())
def test_planted_registry_with_one_field_broken(
    client: Any, bucket: str, registry_template: dict[str, Any], data: st.DataObject
) -> None:
    """A real document with one field replaced by another JSON value, or removed: refused and
    kept, or (when still a registry) read, appended to and committed to with typed errors
    only."""
    body = one_field_broken(data, registry_template)
    check_planted(fresh_lake(client, bucket), body)


@DEFAULT
@given(data=st.data())
def test_registry_parser_does_not_coerce(
    client: Any, bucket: str, registry_template: dict[str, Any], data: st.DataObject
) -> None:
    """A document with one field of the wrong type is refused (and kept), not coerced into a
    registry that the next commit then rewrites: what parse_registry accepts is exactly what
    serialize_registry writes."""
    body = one_field_broken(data, registry_template)
    check_planted(fresh_lake(client, bucket), body, faithful=True)


WRONG_SHAPES = {
    "version-as-string": ("version", "3"),
    "version-with-fraction": ("version", 3.5),
    "partition-by-as-string": ("datasets", "sales", "partition_by", "k"),
    "lock-paths-as-string": ("lock_fences", "lock:sales", 0, "write", "/sales/k=b"),
    "datasets-as-list": ("datasets", []),
    "commit-id-null": ("commits", 0, "id", None),
    "totals-null": ("datasets", "sales", "totals", "files", None),
    "snapshot-as-number": ("datasets", "sales", "snapshot", 7),
    "fates-as-object": ("intents", "fates", {}),
}


@pytest.mark.parametrize("case", list(WRONG_SHAPES.values()), ids=list(WRONG_SHAPES))
def test_wrong_shapes_are_refused_and_kept(
    client: Any, bucket: str, registry_template: dict[str, Any], case: tuple[Any, ...]
) -> None:
    """Fields of the wrong JSON type (a number as a string, a list as a string...) make the
    registry corrupt: refused and kept, never coerced and rewritten."""
    body = orjson.dumps(broken(registry_template, case[:-1], case[-1]))
    with pytest.raises(RegistryCorruptError):
        parse_registry(body)
    check_planted(fresh_lake(client, bucket), body)


@pytest.mark.slow
@pytest.mark.timeout(900)  # 300 examples: minutes on a busy machine
@SLOW
@given(data=st.data())
def test_planted_registry_many(
    client: Any, bucket: str, registry_template: dict[str, Any], data: st.DataObject
) -> None:
    """Broken documents and garbage, many more examples."""
    body = one_field_broken(data, registry_template)
    body = data.draw(st.just(body) | st.binary(max_size=500), label="body")
    check_planted(fresh_lake(client, bucket), body)


@pytest.mark.parametrize(
    "change",
    [
        {"format_version": FORMAT_VERSION + 1},
        {"format_version": 99},
        {"format_version": "1"},
        {"format_version": None},
        {"version": -1},
        {
            "commits": [
                {"id": "x", "version": 10**6, "dataset": "d", "at": "", "added": 0, "removed": 0}
            ]
        },
    ],
)
def test_future_or_invalid_versions_are_refused(
    client: Any, bucket: str, registry_template: dict[str, Any], change: dict[str, Any]
) -> None:
    """Future format versions and impossible version numbers: refused and kept."""
    lake = fresh_lake(client, bucket)
    body = orjson.dumps({**registry_template, **change})
    with pytest.raises(RegistryCorruptError):
        parse_registry(body)
    check_planted(lake, body)


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000,
        b'{"format_version": 1, "pad": "' + b"x" * (9 * 1024 * 1024) + b'"}',
        orjson.dumps([{"k": n} for n in range(200_000)]),
    ],
    ids=["deep", "huge-string", "huge-array"],
)
def test_huge_planted_registry_is_refused_and_kept(client: Any, bucket: str, body: bytes) -> None:
    """Deeply nested and multi-megabyte documents: a typed error, promptly, and kept."""
    check_planted(fresh_lake(client, bucket), body)


def test_counters_at_the_end_of_their_range_are_typed_errors(client: Any, bucket: str) -> None:
    """A registry version, a lease token and a lock table's next token planted at the top of
    the 64-bit range (where +1 no longer serialises): committing, acquiring and locking raise
    lakelock errors (not TypeError), and the planted documents are kept."""
    lake = fresh_lake(client, bucket)
    lake.append("sales", pa.table({"id": [1], "k": ["a"]}), partition_by=["k"])
    lake.lease("job", ttl=5).acquire(timeout=5).release()
    with lake.lock(write=["/sales"], timeout=5):
        pass
    top = 2**64 - 1
    planted = {}
    for key, field in (
        (REGISTRY_KEY, "version"),
        (lease_key("job"), "token"),
        ("metastore/locks/sales.json", "next_token"),
    ):
        doc = orjson.loads(lake.store.get(key).body)
        doc[field] = top
        if field == "version":
            doc["commits"] = []
        planted[key] = orjson.dumps(doc)
        overwrite(lake, key, planted[key])
    with pytest.raises(LakelockError):
        lake.registry.commit("sales", properties={"a": "b"})
    with pytest.raises(LakelockError):
        Lease(lake.store, "job", ttl=5).acquire(timeout=0)
    with pytest.raises(LakelockError):
        lake.lock(write=["/sales"], timeout=0).acquire()
    for key, body in planted.items():
        assert lake.store.get(key).body == body


# -- manifests, data files, missing objects ---------------------------------------------------


def committed(lake: Lake) -> tuple[str, str, bytes, bytes]:
    """A one-file dataset: its manifest key, file key and both bodies."""
    lake.append("sales", pa.table({"id": list(range(50)), "k": ["a"] * 50}), partition_by=["k"])
    snap = lake.registry.read()
    (ref,) = snap.datasets["sales"].partitions["k=a"].manifests
    (f,) = lake.registry.files("sales", snapshot=snap)
    return ref.key, f.key, lake.store.get(ref.key).body, lake.store.get(f.key).body


def overwrite(lake: Lake, key: str, body: bytes) -> None:
    lake.client.put_object(Bucket=lake.bucket, Key=lake.store.full_key(key), Body=body)


def damaged(original: bytes) -> st.SearchStrategy[bytes]:
    """``original`` truncated, with a byte flipped, with bytes appended, or replaced."""
    size = len(original)
    truncated = st.integers(0, size - 1).map(lambda n: original[:n])
    flipped = st.tuples(st.integers(0, size - 1), st.integers(1, 255)).map(
        lambda c: original[: c[0]] + bytes([original[c[0]] ^ c[1]]) + original[c[0] + 1 :]
    )
    appended = st.binary(min_size=1, max_size=64).map(lambda extra: original + extra)
    replaced = st.binary(min_size=size, max_size=size).filter(lambda b: b != original)
    return truncated | flipped | appended | replaced


def check_corrupted_data(lake: Lake, data: st.DataObject) -> None:
    _, key, _, original = committed(lake)
    expected = lake.read("sales")
    body = data.draw(damaged(original), label="body")
    overwrite(lake, key, body)
    with pytest.raises(StorageError) as caught:
        lake.read("sales")
    assert caught.value.code == "ChecksumMismatch"
    assert caught.value.key == key
    overwrite(lake, key, original)
    assert lake.read("sales").equals(expected)


@DEFAULT
@given(data=st.data())
def test_corrupted_data_file_is_never_misread(
    client: Any, bucket: str, data: st.DataObject
) -> None:
    """A registered parquet file truncated, bit-flipped, extended or replaced: lake.read raises
    StorageError(code="ChecksumMismatch") and never returns rows; restored, it reads again."""
    check_corrupted_data(fresh_lake(client, bucket), data)


def fresh_reader(lake: Lake) -> Lake:
    """Another process's view of ``lake``: no cached manifests."""
    return Lake(lake.bucket, prefix=lake.prefix, s3=lake.client, retry=FAST_RETRY)


def check_damaged_manifest(lake: Lake, data: st.DataObject) -> None:
    manifest, _, body, _ = committed(lake)
    expected = lake.read("sales")
    overwrite(lake, manifest, data.draw(damaged(body), label="manifest"))
    try:
        table = fresh_reader(lake).read("sales")
    except LakelockError:
        return
    assert table.equals(expected), "a damaged manifest was read as other rows"


@DEFAULT
@given(data=st.data())
def test_damaged_manifest_never_gives_wrong_rows(
    client: Any, bucket: str, data: st.DataObject
) -> None:
    """A manifest truncated, bit-flipped, extended or replaced by garbage: a fresh reader gets
    a typed error or exactly the committed rows, never other rows."""
    check_damaged_manifest(fresh_lake(client, bucket), data)


@pytest.mark.slow
@pytest.mark.timeout(900)  # 300 examples of two checks each
@SLOW
@given(data=st.data())
def test_damaged_objects_many(client: Any, bucket: str, data: st.DataObject) -> None:
    """Damaged data files and manifests, many more examples."""
    check_corrupted_data(fresh_lake(client, bucket), data)
    check_damaged_manifest(fresh_lake(client, bucket), data)


def test_manifest_naming_another_partition_is_refused(client: Any, bucket: str) -> None:
    """A manifest whose file entry was changed to name another partition (still valid JSON)
    is refused: the rows must not come back with the other partition's values."""
    lake = fresh_lake(client, bucket)
    manifest, _, body, _ = committed(lake)
    doctored = orjson.loads(body)
    doctored["files"][0]["partition"] = "k=b"
    overwrite(lake, manifest, orjson.dumps(doctored))
    try:
        table = fresh_reader(lake).read("sales")
    except LakelockError:
        return
    values = set(table.column("k").to_pylist())
    pytest.fail(f"read as partition {values}, committed as k=a")


def test_manifest_that_is_not_its_content_address_is_refused(client: Any, bucket: str) -> None:
    """A manifest's key names the SHA-256 of its bytes: one whose bytes were replaced by
    another valid manifest is refused on read."""
    lake = fresh_lake(client, bucket)
    manifest, _, body, _ = committed(lake)
    doctored = orjson.loads(body)
    doctored["files"][0]["records"] += 1
    overwrite(lake, manifest, orjson.dumps(doctored))
    with pytest.raises(RegistryCorruptError):
        fresh_reader(lake).read("sales")


def test_missing_objects_are_typed_errors(client: Any, bucket: str) -> None:
    """A registered file or manifest that has gone: NotFoundError (a StorageError), and a
    dataset or partition that is not registered: DatasetNotFoundError."""
    lake = fresh_lake(client, bucket)
    manifest, key, _, _ = committed(lake)
    with pytest.raises(DatasetNotFoundError):
        lake.read("nope")
    with pytest.raises(DatasetNotFoundError):
        lake.read("sales", partitions=["k=zz"])
    lake.client.delete_object(Bucket=lake.bucket, Key=lake.store.full_key(key))
    with pytest.raises(StorageError):
        lake.read("sales")
    lake.client.delete_object(Bucket=lake.bucket, Key=lake.store.full_key(manifest))
    with pytest.raises(RegistryCorruptError) as missing:
        fresh_reader(lake).read("sales")
    assert isinstance(missing.value.__cause__, StorageError)


def registry_objects(lake: Lake, prefix: str) -> list[str]:
    return sorted(o.key for o in lake.store.list(prefix))


def test_damaged_snapshot_or_index_node_never_gives_wrong_rows(client: Any, bucket: str) -> None:
    """A dataset snapshot or index node truncated, bit-flipped or extended: a fresh reader gets
    RegistryCorruptError (never an empty partition, never other rows); put back, it reads."""
    lake = fresh_lake(client, bucket)
    lake.append(
        "sales",
        pa.table({"id": list(range(120)), "k": [f"p{n}" for n in range(120)]}),
        partition_by=["k"],
    )
    expected = sorted_rows(lake.read("sales"))
    nodes = registry_objects(lake, "metastore/nodes/")
    assert nodes, "120 partitions need index nodes below the snapshot"
    (snapshot,) = registry_objects(lake, "metastore/snapshots/")
    for key in (snapshot, nodes[0]):
        body = lake.store.get(key).body
        middle = len(body) // 2
        for bad in (
            body[:middle],
            body[:middle] + bytes([body[middle] ^ 0x5A]) + body[middle + 1 :],
            body + b" ",
        ):
            overwrite(lake, key, bad)
            with pytest.raises(RegistryCorruptError):
                fresh_reader(lake).read("sales")
        overwrite(lake, key, body)
        assert sorted_rows(fresh_reader(lake).read("sales")) == expected


def test_missing_index_node_is_corrupt_not_empty(client: Any, bucket: str) -> None:
    """An index node that is gone: RegistryCorruptError for the partitions below it, not an
    empty partition or a shorter table."""
    lake = fresh_lake(client, bucket)
    lake.append(
        "sales",
        pa.table({"id": list(range(120)), "k": [f"p{n}" for n in range(120)]}),
        partition_by=["k"],
    )
    for key in registry_objects(lake, "metastore/nodes/"):
        lake.client.delete_object(Bucket=lake.bucket, Key=lake.store.full_key(key))
    with pytest.raises(RegistryCorruptError):
        fresh_reader(lake).read("sales")
    with pytest.raises(RegistryCorruptError):
        fresh_reader(lake).read("sales", partitions=["k=p7"])


# -- planted lease documents and lock tables --------------------------------------------------


@DEFAULT
@given(body=st.binary(max_size=100) | json_values.map(orjson.dumps))
def test_planted_lease_and_lock_documents_are_refused_and_kept(
    client: Any, bucket: str, body: bytes
) -> None:
    """Garbage at a lease's key and at a lock table's key: LeaseError on acquire, and the
    planted bodies unchanged."""
    lake = fresh_lake(client, bucket)
    lease_at = lake.store.full_key(lease_key("job"))
    table_at = lake.store.full_key("metastore/locks/sales.json")
    for key in (lease_at, table_at):
        lake.client.put_object(Bucket=lake.bucket, Key=key, Body=body)
    with pytest.raises(LeaseError):
        Lease(lake.store, "job", ttl=5).acquire(timeout=0)
    with pytest.raises(LeaseError):
        lake.lock(write=["/sales"], timeout=0).acquire()
    for key in (lease_at, table_at):
        assert lake.client.get_object(Bucket=lake.bucket, Key=key)["Body"].read() == body
