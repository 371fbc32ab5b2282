"""The Iceberg view after a restore dropped a column: promises broken today."""

from __future__ import annotations

import pyarrow as pa
from pyiceberg import table as pyiceberg_table

from lakelock import Lake
from lakelock.testing import S3Endpoint
from tests._support.views import iceberg_properties, rows


def test_a_column_added_after_a_restore_dropped_one_reads_in_the_iceberg_view(
    lake: Lake, s3: S3Endpoint
) -> None:
    """README: pyiceberg's StaticTable reads every version "exactly as lakelock does" (an
    added column null in older files). A restore to a version before a column was added
    (``score``), then an append merging another column (``y``): lakelock gives ``y`` the
    field id ``score`` had (column position + 1), the name mapping is built from the widest
    schema (which names ``score``, not ``y``), and pyiceberg cannot read the current
    version at all today ("Could not find field with name: y")."""
    first = lake.append("events", pa.table({"kind": ["a"], "n": [1]})).version
    lake.append("events", pa.table({"kind": ["b"], "n": [2], "score": [7]}), schema_mode="merge")
    lake.restore("events", version=first)
    last = lake.append(
        "events", pa.table({"kind": ["d"], "n": [4], "y": [1.5]}), schema_mode="merge"
    ).version
    result = lake.mirror("events", formats=("iceberg",))
    assert result.iceberg is not None
    table = pyiceberg_table.StaticTable.from_metadata(
        result.iceberg, properties=iceberg_properties(s3.url)
    )
    expected = lake.read("events", version=last)
    got = table.scan(snapshot_id=last).to_arrow()
    assert rows(got, expected.schema) == rows(expected, expected.schema)
