"""The registry's pure core: parsing, serialising, commit transforms, schema rules, fencing."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any

import orjson
import pyarrow as pa
import pytest

from lakelock._datafile import DataFile
from lakelock._registry import (
    Change,
    Fence,
    Manifest,
    RegistryDoc,
    apply_change,
    evolve_schema,
    parse_manifest,
    parse_registry,
    seal,
    serialize_registry,
)
from lakelock._registry._changes import (
    _replaced,
    delta_manifests,
    manifests_needed,
    partition_of_key,
)
from lakelock._registry._core import _decide
from lakelock._registry._document import IntentFate, with_datasets
from lakelock._registry._manifest import serialize_manifest
from lakelock._stats import ColumnStats, FileStats, stats_from_json
from lakelock.errors import (
    CommitConflictError,
    PartitionByMismatchError,
    RegistryCorruptError,
    SchemaMismatchError,
    StaleFenceError,
)
from tests._support.files import datafile

NOW = "2026-11-21T08:00:00.000000Z"
NONCE = "n0"


def change(dataset: str = "sales", *, add: tuple[DataFile, ...] = (), **kw: object) -> Change:
    """A prepared Change: delta manifest refs computed as the registry would."""
    refs = {path: ref for path, (ref, _) in delta_manifests(dataset, add, nonce=NONCE).items()}
    return Change(
        dataset=dataset,
        commit_id=str(kw.pop("commit_id", "c1")),
        add=add,
        added_manifests=MappingProxyType(refs),
        **kw,  # type: ignore[arg-type]
    )


def commit(
    doc: RegistryDoc, *changes: Change, manifests: dict[str, Manifest] | None = None
) -> RegistryDoc:
    """Apply and seal changes in one batch, as one CAS would."""
    applied = []
    current = doc
    for c in changes:
        a = apply_change(
            current, c, manifests=manifests or {}, now=NOW, next_version=doc.version + 1
        )
        current = a.doc
        applied.append((c, a))
    return seal(current, applied, now=NOW, window=100)


def test_round_trip_is_exact() -> None:
    """serialise → parse gives back the same document, byte for byte the second time."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("year", pa.string())])
    doc = commit(
        RegistryDoc(format_version=1),
        change(
            add=(
                datafile("sales", "year=2024", "a.parquet"),
                datafile("sales", "year=2025", "b.parquet"),
            ),
            schema=schema,
            partition_by=("year",),
            properties={"owner": "etl"},
            fence=Fence("lease:leader", 3),
        ),
    )
    body = serialize_registry(doc)
    parsed = parse_registry(body)
    assert serialize_registry(parsed) == body
    sales = parsed.datasets["sales"]
    assert sales.schema is not None
    assert sales.schema.equals(schema)
    assert (sales.file_count, sales.record_count, sales.schema_version) == (2, 20, 1)
    assert parsed.fences == {"lease:leader": 3}
    assert [c.id for c in parsed.commits] == ["c1"]


def _doc(**fields: object) -> bytes:
    """A format-1 root with some fields overridden."""
    base: dict[str, object] = {
        "format_version": 1,
        "version": 1,
        "updated_at": "",
        "datasets": {},
        "fences": {},
        "commits": [],
    }
    return orjson.dumps({**base, **fields})


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        b'{"format_version": 2, "version": 1}',
        b'{"format_version": 1}',
        _doc(version=-1),
        _doc(datasets={"d": {}}),
        _doc(
            commits=[{"id": "x", "version": 5, "dataset": "d", "at": "", "added": 0, "removed": 0}]
        ),
    ],
    ids=[
        "not-json",
        "not-object",
        "future-format",
        "missing-fields",
        "negative-version",
        "bad-dataset",
        "commit-from-future",
    ],
)
def test_untrustworthy_documents_are_corrupt(body: bytes) -> None:
    """Anything but a valid format-1 registry raises RegistryCorruptError."""
    with pytest.raises(RegistryCorruptError):
        parse_registry(body, bucket="b", key="k")


def test_manifest_round_trip_and_corruption() -> None:
    """Manifests parse back to the same files; a future manifest is refused."""
    files = (datafile("sales", "year=2024", "a.parquet"),)
    body = serialize_manifest(Manifest("sales", "year=2024", files))
    assert parse_manifest(body).files == files
    future = orjson.loads(body)
    future["format_version"] = 9
    with pytest.raises(RegistryCorruptError):
        parse_manifest(orjson.dumps(future))


def test_manifest_bytes_are_orjsons_and_a_consolidation_keeps_what_parsing_gives() -> None:
    """``serialize_manifest`` makes each file's entry once, and a consolidation keeps the
    manifest it built instead of parsing its bytes again (``Applied.manifests``): the bytes
    are exactly orjson's of the whole document, and the kept manifest equals the parse of
    them — with statistics (parsed back with their columns sorted) it is that parse."""
    # Columns as a writer may list them (not sorted): parsing sorts them.
    stats = FileStats((ColumnStats("b", 1, max="z\u00e9"), ColumnStats("a", 0)))
    assert stats_from_json(stats.to_json()) != stats
    plain = [datafile("sales", "year=2024", f"f{n:02d}.parquet") for n in range(17)]
    with_stats = dataclasses.replace(plain[0], key=plain[0].key + "s", stats=stats)
    for files, partition in (((*plain, with_stats), "year=2024"), ((plain[1],), None)):
        manifest = Manifest("sales", partition, tuple(files))
        whole = {
            "format_version": 1,
            "dataset": "sales",
            "partition": partition,
            "files": [f.to_json() for f in files],
        }
        assert serialize_manifest(manifest) == orjson.dumps(whole, option=orjson.OPT_SORT_KEYS)
        assert serialize_manifest(manifest) == serialize_manifest(manifest)  # entries kept
    doc, manifests = RegistryDoc(format_version=1), {}
    for n, f in enumerate(plain[:16]):
        doc = commit(doc, change(commit_id=f"c{n}", add=(f,)))
        for ref, body in delta_manifests("sales", (f,), nonce=NONCE).values():
            manifests[ref.key] = parse_manifest(body)
    for last in (plain[16], with_stats):  # the 17th manifest: consolidated
        applied = apply_change(
            doc,
            change(commit_id="last", add=(last,)),
            manifests=manifests,
            now=NOW,
            next_version=doc.version + 1,
        )
        ((key, body),) = applied.writes
        assert applied.manifests == ((key, parse_manifest(body)),)
        assert len(applied.manifests[0][1].files) == 17


def test_a_roots_index_of_fates_and_commits_answers_as_its_scans_do() -> None:
    """A parsed root looks fates and recent commits up in an index (the newest of a key
    wins, as the scans find it); a root whose fates or commits changed scans again."""
    doc = commit(RegistryDoc(), change(add=(datafile("sales", "year=2024", "a"),)))
    fates = (
        IntentFate("k1", "rejected", 1, 0.0, "old"),
        IntentFate("k2", "applied", 1, 0.0),
        IntentFate("k1", "applied", 1, 0.0),
    )
    doc = dataclasses.replace(doc, fates=fates)
    parsed = parse_registry(serialize_registry(doc))
    assert parsed.fate("k1") == IntentFate("k1", "applied", 1, 0.0)
    assert parsed.fate("k3") is None
    assert parsed.commit("c1") == doc.commit("c1") is not None
    assert parsed.commit("c9") is None
    copied = with_datasets(parsed, parsed.datasets)
    assert copied.fate("k1") == parsed.fate("k1")
    assert copied == parsed
    changed = _replaced(parsed, fates=fates[:1])
    assert changed.fate("k1") == IntentFate("k1", "rejected", 1, 0.0, "old")


def test_a_roots_newest_decided_intent_is_worked_out_once_and_never_stale() -> None:
    """The newest intent a root's last swap decided (what a waiting writer staggers by) is
    worked out when the root is parsed and kept for the copies a root read makes; a copy
    with other fates, another version or watermark answers from its own fields."""
    doc = commit(RegistryDoc(), change(add=(datafile("sales", "year=2024", "a"),)))
    fates = (
        IntentFate("k3", "applied", doc.version, 0.0),
        IntentFate("k2", "applied", doc.version - 1, 0.0),
        IntentFate("k9", "cancelled", doc.version - 1, 0.0),
    )
    doc = dataclasses.replace(doc, fates=fates, watermark="k0")
    parsed = parse_registry(serialize_registry(doc))
    assert parsed.newest_decided() == doc.newest_decided() == "k3"
    assert with_datasets(parsed, parsed.datasets).newest_decided() == "k3"
    assert _replaced(parsed, version=doc.version + 1).newest_decided() == "k9"
    assert _replaced(parsed, fates=fates[1:2]).newest_decided() == "k2"
    assert _replaced(parsed, fates=()).newest_decided() == "k0"
    assert _replaced(parsed, fates=(), watermark="k1").newest_decided() == "k1"


def test_stale_fence_is_refused_equal_and_higher_pass() -> None:
    """A lower token is StaleFenceError; the same token passes; a higher one raises the bar."""
    doc = commit(RegistryDoc(format_version=1), change(fence=Fence("lease:l", 5)))
    with pytest.raises(StaleFenceError) as info:
        commit(doc, change(commit_id="c2", fence=Fence("lease:l", 4)))
    assert (info.value.name, info.value.token, info.value.current) == ("lease:l", 4, 5)
    assert commit(doc, change(commit_id="c3", fence=Fence("lease:l", 5))).fences["lease:l"] == 5
    assert commit(doc, change(commit_id="c4", fence=Fence("lease:l", 9))).fences["lease:l"] == 9
    assert commit(doc, change(commit_id="c5", fence=Fence("other", 1))).fences == {
        "lease:l": 5,
        "other": 1,
    }


def test_partition_columns_must_match() -> None:
    """Files and partition_by must agree with the dataset's partition columns."""
    doc = commit(
        RegistryDoc(format_version=1),
        change(partition_by=("year",), add=(datafile("sales", "year=2024", "a"),)),
    )
    with pytest.raises(PartitionByMismatchError):
        commit(doc, change(commit_id="c2", partition_by=("month",)))
    with pytest.raises(CommitConflictError):
        commit(doc, change(commit_id="c3", add=(datafile("sales", "month=01", "b"),)))
    with pytest.raises(CommitConflictError):
        commit(doc, change(commit_id="c4", add=(datafile("other", "year=2024", "c"),)))


def test_adding_the_same_files_twice_is_a_conflict() -> None:
    """The same delta manifest committed twice (a retry without commit id) is refused."""
    files = (datafile("sales", "", "a.parquet"),)
    doc = commit(RegistryDoc(format_version=1), change(add=files))
    with pytest.raises(CommitConflictError):
        commit(doc, change(commit_id="c2", add=files))


def test_remove_consolidates_and_missing_file_is_conflict() -> None:
    """Removing a registered file rewrites its partition's manifest; removing an absent one
    is a conflict, not a silent success."""
    a, b = datafile("sales", "", "a.parquet"), datafile("sales", "", "b.parquet")
    doc = commit(RegistryDoc(format_version=1), change(add=(a, b)))
    (ref,) = doc.datasets["sales"].partitions[""].manifests
    loaded = {ref.key: Manifest("sales", "", (a, b))}
    c2 = change(commit_id="c2", remove=(a.key,))
    assert manifests_needed(doc, c2) == {ref.key}
    applied = apply_change(doc, c2, manifests=loaded, now=NOW, next_version=doc.version + 1)
    ((key, body),) = applied.writes
    assert parse_manifest(body).files == (b,)
    partition = applied.doc.datasets["sales"].partitions[""]
    assert [m.key for m in partition.manifests] == [key]
    assert partition.file_count == 1
    with pytest.raises(CommitConflictError):
        apply_change(
            doc,
            change(commit_id="c3", remove=("datasets/sales/zzz",)),
            manifests=loaded,
            now=NOW,
            next_version=2,
        )


def test_removing_every_file_drops_the_partition() -> None:
    """A partition left empty disappears from the registry."""
    a = datafile("sales", "year=2024", "a")
    doc = commit(RegistryDoc(format_version=1), change(add=(a,), partition_by=("year",)))
    (ref,) = doc.datasets["sales"].partitions["year=2024"].manifests
    after = commit(
        doc,
        change(commit_id="c2", remove=(a.key,)),
        manifests={ref.key: Manifest("sales", "year=2024", (a,))},
    )
    assert dict(after.datasets["sales"].partitions) == {}


def test_many_appends_are_compacted() -> None:
    """A partition past the manifest limit is consolidated into one manifest of all files."""
    doc = RegistryDoc(format_version=1)
    stored: dict[str, Manifest] = {}  # what S3 would hold: every manifest ever written
    for n in range(20):
        f = datafile("sales", "", f"f{n:02d}")
        for ref, body in delta_manifests("sales", (f,), nonce=NONCE).values():
            stored[ref.key] = parse_manifest(body)
        c = change(commit_id=f"c{n}", add=(f,))
        needed = {k: stored[k] for k in manifests_needed(doc, c)}
        applied = apply_change(doc, c, manifests=needed, now=NOW, next_version=doc.version + 1)
        for key, body in applied.writes:
            stored[key] = parse_manifest(body)
        doc = seal(applied.doc, [(c, applied)], now=NOW, window=100)
    partition = doc.datasets["sales"].partitions[""]
    assert len(partition.manifests) < 16
    assert partition.file_count == 20
    listed = sorted(f.name for m in partition.manifests for f in stored[m.key].files)
    assert listed == [f"f{n:02d}" for n in range(20)]


def test_properties_set_and_unset() -> None:
    """Properties merge; a None value removes a property."""
    doc = commit(RegistryDoc(format_version=1), change(properties={"a": "1", "b": "2"}))
    doc = commit(doc, change(commit_id="c2", properties={"a": None, "c": "3"}))
    assert dict(doc.datasets["sales"].properties) == {"b": "2", "c": "3"}


def test_seal_bumps_version_once_and_bounds_the_window() -> None:
    """A batch is one version; the commit list keeps the newest `window` ids."""
    doc = RegistryDoc(format_version=1)
    for n in range(5):
        c1, c2 = change(commit_id=f"a{n}"), change(commit_id=f"b{n}")
        a1 = apply_change(doc, c1, manifests={}, now=NOW, next_version=doc.version + 1)
        a2 = apply_change(a1.doc, c2, manifests={}, now=NOW, next_version=doc.version + 1)
        doc = seal(a2.doc, [(c1, a1), (c2, a2)], now=NOW, window=4)
    assert doc.version == 5
    assert [(c.id, c.version) for c in doc.commits] == [("a3", 4), ("b3", 4), ("a4", 5), ("b4", 5)]
    assert doc.commit("b4") is not None
    assert doc.commit("a0") is None


SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())])


EXTRA = SCHEMA.append(pa.field("extra", pa.float64()))


@pytest.mark.parametrize(
    ("new", "mode", "version", "fails"),
    [
        (SCHEMA, None, 1, False),
        (EXTRA, "merge", 2, False),
        (EXTRA, None, 1, True),
        (pa.schema([pa.field("id", pa.int64(), nullable=False)]), None, 1, False),
        (
            pa.schema([pa.field("id", pa.int32(), nullable=False), ("name", pa.string())]),
            "merge",
            1,
            True,
        ),
        (SCHEMA.append(pa.field("required", pa.int8(), nullable=False)), "merge", 1, True),
        (pa.schema([("name", pa.string())]), "merge", 1, True),
    ],
    ids=[
        "same",
        "added-nullable-merged",
        "added-nullable-refused",
        "missing-nullable",
        "type-change",
        "new-required",
        "missing-required",
    ],
)
def test_schema_rules(new: pa.Schema, mode: str | None, version: int, fails: bool) -> None:
    """Compatible evolution bumps schema_version; incompatible schemas are
    SchemaMismatchError; a new column needs schema_mode="merge"."""
    if fails:
        with pytest.raises(SchemaMismatchError):
            evolve_schema(SCHEMA, new, 1, change(schema_mode=mode))
        return
    schema, got = evolve_schema(SCHEMA, new, 1, change(schema_mode=mode))
    assert got == version
    assert schema is not None
    assert schema.get_field_index("id") == 0


def test_partition_of_key() -> None:
    """The partition path is what lies between the dataset folder and the file name."""
    assert partition_of_key("d", "datasets/d/a=1/b=2/f.parquet") == "a=1/b=2"
    assert partition_of_key("d", "datasets/d/f.parquet") == ""
    with pytest.raises(CommitConflictError):
        partition_of_key("d", "datasets/other/f.parquet")


def test_lock_fences_refuse_only_superseded_grants() -> None:
    """Under a path lock, a lower token is refused only if a conflicting grant with a higher
    token committed; a compatible holder with a lower token still commits."""
    newer = Fence("lock:sales", 5, write=("/sales/year=2024",))
    doc = commit(RegistryDoc(format_version=1), change(fence=newer))
    zombie = Fence("lock:sales", 4, read=("/sales",), write=("/sales/staging",))
    with pytest.raises(StaleFenceError) as info:
        commit(doc, change(commit_id="c2", fence=zombie))
    assert (info.value.token, info.value.current) == (4, 5)
    compatible = Fence("lock:sales", 3, write=("/sales/year=2025",))
    after = commit(doc, change(commit_id="c3", fence=compatible))
    assert [r.token for r in after.lock_fences["lock:sales"]] == [5, 3]
    reader = Fence("lock:sales", 2, read=("/sales/year=2023",))
    assert commit(after, change(commit_id="c4", fence=reader)).version == 3
    assert parse_registry(serialize_registry(after)).lock_fences == after.lock_fences


def test_a_write_lock_that_ended_refuses_its_own_fence() -> None:
    """Once its write lock is cleared (``unlock``) or a conflicting grant of a higher token
    registers, a grant's fence is refused whatever its token (``current`` its own, or that of
    the conflicting grant of a higher token that since superseded its record, which is then
    compacted like any other), a ``lock`` of it too; an ``unlock`` of a grant never recorded
    records it ended; ``ended`` survives a round trip through the root's JSON, and a grant
    that never registered is unaffected."""
    doc = commit(RegistryDoc(format_version=1), change(add=(datafile("sales", "", "a"),)))
    cleared = Fence("lock:sales", 4, write=("/sales/year=2024",))
    doc = commit(doc, change(commit_id="c2", fence=cleared, operation="lock"))
    doc = commit(doc, change(commit_id="c3", fence=cleared, operation="unlock"))
    superseded = Fence("lock:sales", 5, write=("/sales/year=2025",))
    doc = commit(doc, change(commit_id="c4", fence=superseded, operation="lock"))
    doc = commit(doc, change(commit_id="c5", fence=Fence("lock:sales", 6, write=("/sales",))))
    late = Fence("lock:sales", 7, write=("/sales/year=2026",))
    doc = commit(doc, change(commit_id="c6", fence=late, operation="unlock"))
    doc = parse_registry(serialize_registry(doc))
    for n, (fence, current) in enumerate(((cleared, 6), (late, late.token))):
        for operation in ("append", "lock"):
            with pytest.raises(StaleFenceError) as info:
                commit(doc, change(commit_id=f"x{n}{operation}", fence=fence, operation=operation))
            assert (info.value.token, info.value.current) == (fence.token, current)
    with pytest.raises(StaleFenceError):  # superseded by grant 6, which wrote under it
        commit(doc, change(commit_id="x5", fence=superseded))
    records = {r.token: (r.held, r.ended) for r in doc.lock_fences["lock:sales"]}
    assert records == {4: (False, False), 5: (True, False), 6: (False, False), 7: (False, True)}
    never = Fence("lock:sales", 8, write=("/sales/year=2023",))
    assert commit(doc, change(commit_id="c7", fence=never)).version == doc.version + 1


def test_fence_only_change_leaves_the_dataset_alone() -> None:
    """A change with just a fence (the read side of a copy) is checked and recorded, and
    does not touch the dataset's state."""
    doc = commit(RegistryDoc(format_version=1), change(add=(datafile("sales", "", "a"),)))
    before = doc.datasets["sales"]
    reader = Fence("lock:sales", 4, read=("/sales/year=2024",))
    after = commit(doc, change(commit_id="c2", fence=reader))
    assert after.datasets["sales"] == before
    assert [r.token for r in after.lock_fences["lock:sales"]] == [4]
    writer = Fence("lock:sales", 6, write=("/sales/year=2024",))
    later = commit(after, change(commit_id="c3", fence=writer))
    with pytest.raises(StaleFenceError):
        commit(later, change(commit_id="c4", fence=reader))


def test_the_records_apply_change_replaces_are_copied_field_for_field() -> None:
    """``_replaced`` (apply_change's cheaper ``dataclasses.replace``) gives an equal record of
    the same type with the changes, leaves the original alone, and refuses a field the
    record does not have."""
    doc = commit(RegistryDoc(format_version=1), change())
    state = doc.datasets["sales"]
    assert _replaced(doc, version=7, watermark="w") == dataclasses.replace(
        doc, version=7, watermark="w"
    )
    copied = _replaced(state, updated_at="later")
    assert copied == dataclasses.replace(state, updated_at="later")
    assert type(copied) is type(state)
    assert state.updated_at != "later"
    with pytest.raises(TypeError, match="no field 'versoin'"):
        _replaced(doc, versoin=7)


@pytest.mark.parametrize("kind", sorted(_decide.FATE_ERRORS))
def test_every_typed_error_a_fate_records_survives_the_root(kind: str) -> None:
    """Each error a rejection's fate records (rule 12) is written in a root every reader
    parses (fields: strings, whole numbers, lists of strings) and made again, the same
    type with the same fields, for the intent's writer. A field the parser refuses (a
    float) would make the root itself unreadable for every process."""
    make, names = _decide.FATE_ERRORS[kind]
    values: dict[str, Any] = {
        "keys": ("datasets/d/a.parquet",),
        "key": "datasets/d/a.parquet",
        "age": 7201,
        "floor": 3600,
        "version": 3,
        "recorded_dataset": "d",
        "recorded_operation": "append",
        "name": "lease:etl",
        "token": 4,
        "current": 5,
        "holder": "grant 4",
        "paths": ("/d/a",),
    }
    error = make("why", dataset="d", commit_id="c", **{n: values[n] for n in names})
    fate = IntentFate("metastore/intents/k", "rejected", 2, 1.0, "why", _decide.error_kind(error))
    doc = RegistryDoc(version=2, fates=(fate,))
    (parsed,) = parse_registry(serialize_registry(doc)).fates
    again = _decide.fate_error(parsed, change())
    assert type(again) is make
    assert all(getattr(again, n) == getattr(error, n) for n in names)
