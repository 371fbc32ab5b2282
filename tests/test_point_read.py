"""Reading one partition stays cheap as the dataset grows: a partition that a commit of many
partitions added is read from its part of the shared manifest (a ranged GET checked against
the part's digest in the index), not from the whole manifest; the index is looked up, not
walked (depth + 4 GETs for a fresh Lake)."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Iterator
from datetime import date, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lakelock import Lake
from lakelock._pinning import pinned_partitions
from lakelock._registry._tree import Node, tree_get, tree_items
from lakelock.errors import RegistryCorruptError
from lakelock.testing import S3Endpoint
from tests._support import FAST_RETRY, wait_until

PARTITIONS = 200


@pytest.fixture
def wide(lake: Lake) -> Lake:
    """One commit of PARTITIONS partitions: one intent lists every file."""
    lake.append(
        "ev", pa.table({"id": range(PARTITIONS), "p": range(PARTITIONS)}), partition_by=["p"]
    )
    lake.close()  # a hedged write's slower copy is answered before the test counts
    return lake


def shared_manifest(lake: Lake) -> str:
    (ref,) = lake.registry.read().datasets["ev"].partitions["p=7"].manifests
    assert ref.part is not None
    return ref.key


def test_a_fresh_lake_reads_one_partition_from_its_part(s3: S3Endpoint, wide: Lake) -> None:
    manifest_size = wide.store.head(shared_manifest(wide)).size
    fresh = Lake(wide.bucket, s3=wide.client)
    s3.reset_stats()
    table = fresh.read("ev", partitions=["p=7"])
    assert table["id"].to_pylist() == [7]
    # root, snapshot, one index node (200 entries: a branch over leaves), the part, the file
    assert s3.stats() == {"GetObject": 5}
    assert s3.traffic()["out"] < manifest_size / 4
    assert sorted(fresh.read("ev", partitions=["p=3", "p=150"])["id"].to_pylist()) == [3, 150]
    assert fresh.read("ev").num_rows == PARTITIONS  # the whole dataset: manifests whole


def test_a_part_that_is_not_what_the_index_names_is_refused(wide: Lake, admin: Any) -> None:
    key = shared_manifest(wide)
    body = wide.store.get(key).body
    tampered = body.replace(b'"records":1,', b'"records":9,', PARTITIONS)
    assert tampered != body
    admin.put_object(Bucket=wide.bucket, Key=key, Body=tampered)
    with pytest.raises(RegistryCorruptError, match="not those the index names"):
        Lake(wide.bucket, s3=wide.client).read("ev", partitions=["p=7"])


# -- a filter that pins every partition column is a point read too ---------------------------

DAYS = [date(2026, 1, 1) + timedelta(days=n) for n in range(30)]
REGIONS = ["eu", "us", "ap", None]
IDS = list(range(1000))


@pytest.fixture(scope="module")
def grid(endpoint: S3Endpoint, new_bucket: Callable[..., str]) -> Iterator[Lake]:
    """Dataset ``g``: 120 partitions (30 days x 4 regions, one of them null), two rows each,
    in one commit; and dataset ``small``: 40 partitions, an index small enough to be inline.
    Made once for the module: its tests only read it (each through a Lake of its own, where
    it counts requests), and writing 240 files is most of what each of them cost."""
    lake = Lake(new_bucket("grid"), s3=endpoint.client(), retry=FAST_RETRY)
    cells = [(d, r) for d in DAYS for r in REGIONS]
    lake.append(
        "g",
        pa.table(
            {
                "id": range(2 * len(cells)),
                "x": [n % 7 for n in range(2 * len(cells))],
                "day": [d for d, _ in cells for _ in range(2)],
                "region": [r for _, r in cells for _ in range(2)],
            }
        ),
        partition_by=["day", "region"],
    )
    lake.append("small", pa.table({"id": range(40), "p": range(40)}), partition_by=["p"])
    lake.close()  # a hedged write's slower copy is answered before the test counts
    yield lake
    lake.close()  # what its tests' reads left running


def index_nodes(lake: Lake, dataset: str, path: str) -> list[str]:
    """The index nodes a lookup of ``path`` in ``dataset``'s partition index reads (the top
    is inline in the snapshot): its depth."""
    objects = lake.registry.internals.objects
    snapshot = objects.snapshot(lake.registry._read_root()[0].entries[dataset].snapshot)
    read: list[str] = []

    def load(key: str) -> Node:
        read.append(key)
        return objects.node(key)

    assert tree_get(snapshot.partitions, path, load) is not None
    return read


def test_a_filter_pinning_every_partition_column_is_a_point_read(
    s3: S3Endpoint, grid: Lake
) -> None:
    """``day == d & region == r`` (with or without conditions on data columns) reads the
    root, the snapshot, one index node per level, the partition's part and its file: depth + 4
    GETs, as the partition given exactly does, not the whole index; so does a 40-partition
    dataset whose index is inline in its snapshot (depth 0)."""
    levels = len(index_nodes(grid, "g", "day=2026-01-08/region=us"))
    assert levels >= 1  # 120 partitions: a branch over leaves
    pinned = (pc.field("day") == DAYS[7]) & (pc.field("region") == "us")
    # A long isin on a data column of the partition column's type does not hide the pin.
    for filter in (pinned, pinned & (pc.field("x") >= 0), pinned & pc.field("id").isin(IDS)):
        s3.reset_stats()
        table = Lake(grid.bucket, s3=grid.client).scan("g", filter=filter).to_arrow()
        assert sorted(table["id"].to_pylist()) == [58, 59]
        assert s3.stats() == {"GetObject": levels + 4}
    assert index_nodes(grid, "small", "p=7") == []
    s3.reset_stats()
    table = Lake(grid.bucket, s3=grid.client).scan("small", filter=pc.field("p") == 7).to_arrow()
    assert table["id"].to_pylist() == [7]
    assert s3.stats() == {"GetObject": 4}


def test_a_few_pinned_values_cost_a_lookup_each(s3: S3Endpoint, grid: Lake) -> None:
    """``isin`` and ``|`` of equalities are the partitions they spell: the index nodes on
    their paths (each read once), one part and one file each; the whole index is never read
    (120 partitions: more nodes than that)."""
    filter = (pc.field("day") == DAYS[3]) & pc.field("region").isin(["eu", "ap"])
    scan = Lake(grid.bucket, s3=grid.client).scan("g", filter=filter)
    paths = sorted({f.partition_path for f in scan.files()})
    assert paths == ["day=2026-01-04/region=ap", "day=2026-01-04/region=eu"]
    nodes = len({key for path in paths for key in index_nodes(grid, "g", path)})
    s3.reset_stats()
    fresh = Lake(grid.bucket, s3=grid.client)
    assert fresh.scan("g", filter=filter).to_arrow().num_rows == 4
    assert s3.stats() == {"GetObject": 2 + nodes + 2 + 2}


def test_a_filter_pinning_some_columns_reads_only_the_manifests_of_what_it_can_match(
    s3: S3Endpoint, grid: Lake
) -> None:
    """``day == d`` on a dataset partitioned by day and region cannot be looked up (the index
    is a hash trie: the 4 partitions of that day lie anywhere in it), so every index node is
    read; but of the manifest all 120 partitions share, only the parts of those 4 are."""
    objects = grid.registry.internals.objects
    snapshot = objects.snapshot(grid.registry._read_root()[0].entries["g"].snapshot)
    nodes: list[str] = []

    def load(key: str) -> Node:
        nodes.append(key)
        return objects.node(key)

    assert len(list(tree_items(snapshot.partitions, load))) == 120
    s3.reset_stats()
    table = Lake(grid.bucket, s3=grid.client).read("g", filter=pc.field("day") == DAYS[9])
    assert sorted(table["id"].to_pylist()) == list(range(72, 80))
    # root, snapshot, every index node, 4 parts (not the manifest whole), 4 files
    assert s3.stats() == {"GetObject": 2 + len(nodes) + 4 + 4}
    assert s3.areas()["GetObject metastore/intents"] == 4  # the shared manifest: an intent


def test_a_walk_of_the_whole_index_reads_a_level_at_a_time(s3: S3Endpoint, grid: Lake) -> None:
    """A read the index cannot look up (here the whole dataset) loads the nodes of each level
    of the index together, not one after the other: two node GETs are held at the endpoint at
    once (a walk that read one node at a time would never send the second before the first
    answered); each node is still read once."""
    # No client retry or timeout while a GET is held: only a second node sent meanwhile can
    # be the second held.
    patient = s3.client(retries={"total_max_attempts": 1}, read_timeout=300)
    s3.inject("stall", operation="GetObject", prefix=f"{grid.prefix}metastore/nodes/", count=2)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        reading = pool.submit(Lake(grid.bucket, s3=patient).read, "g")
        wait_until(lambda: s3.stalled() == 2)
        s3.release_stalls()
        assert reading.result(timeout=60).num_rows == 240


FILTERS = {
    "every column pinned": (pc.field("day") == DAYS[7]) & (pc.field("region") == "us"),
    "and a data column": (pc.field("day") == DAYS[7])
    & (pc.field("region") == "eu")
    & (pc.field("x") > 2),
    "isin": pc.field("day").isin(DAYS[:3]) & pc.field("region").isin(["eu", "us"]),
    "pairs": ((pc.field("day") == DAYS[1]) & (pc.field("region") == "eu"))
    | ((pc.field("day") == DAYS[2]) & (pc.field("region") == "ap")),
    "a null partition": (pc.field("day") == DAYS[4]) & pc.field("region").is_null(),
    "isin with null": (pc.field("day") == DAYS[4]) & pc.field("region").isin(["eu", None]),
    "negated": (pc.field("day") == DAYS[5]) & ~(pc.field("region") != "ap"),
    "a partition that does not exist": (pc.field("day") == date(2030, 1, 1))
    & (pc.field("region") == "eu"),
    "a value no partition can have": (pc.field("day") == DAYS[0]) & (pc.field("region") == ""),
    "one column only": pc.field("day") == DAYS[9],
    "the other column only": pc.field("region") == "ap",
    "a range": (pc.field("day") >= DAYS[20]) & (pc.field("region") == "eu"),
    "not equal": (pc.field("day") == DAYS[6]) & (pc.field("region") != "eu"),
    "either column": (pc.field("day") == DAYS[1]) | (pc.field("region") == "us"),
    "a data column only": pc.field("x") == 3,
    "pinned, and a long isin on a data column": (pc.field("day") == DAYS[2])
    & (pc.field("region") == "eu")
    & pc.field("id").isin(IDS[17:]),
    "too many to look up": pc.field("day").isin(DAYS) & pc.field("region").isin(REGIONS[:3]),
}


def test_pruned_or_not_a_filter_reads_what_the_whole_dataset_filtered_holds(grid: Lake) -> None:
    """Every filter, pinning or not, returns exactly the rows of the whole dataset that it
    admits (pyarrow's own filter over an unfiltered read): looking partitions up never loses
    one, a null partition and a partition of the pinned values that does not exist included."""
    whole = grid.read("g")
    fresh = Lake(grid.bucket, s3=grid.client)
    for name, filter in FILTERS.items():
        got = fresh.scan("g", filter=filter).to_arrow()
        want = whole.filter(filter)["id"].to_pylist()
        assert sorted(got["id"].to_pylist()) == sorted(want), name


def test_a_long_isin_on_a_data_column_of_the_same_type_does_not_hide_the_pin() -> None:
    """Every literal of the partition column's type is a candidate value; a data column's
    isin of 3,000 ids adds 3,000 of them, which are ruled out (the filter admits p == 5 only)
    rather than taken for more partitions than can be looked up."""
    schema = pa.schema([("p", pa.int64()), ("id", pa.int64())])
    ids = pc.field("id").isin(list(range(3000)))
    assert pinned_partitions((pc.field("p") == 5) & ids, schema, ["p"]) == ["p=5"]
    assert pinned_partitions(
        pc.field("p").isin([1, 2, 3]) & (pc.field("p") > 1), schema, ["p"]
    ) == [
        "p=2",
        "p=3",
    ]
    assert pinned_partitions(ids, schema, ["p"]) is None  # p is not pinned at all
