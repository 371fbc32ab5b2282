"""Adversarial tests of the command line (README, "The command line") given what a user's
pipeline leaves for it: a prefix where no lake lives (``lakelock registry configure
s3://bucket --retention 30d``, the lake's settings, every writer's; "Time travel": every
version is readable while the retention keeps it; the other commands that act on a lake,
vacuum, locks and mirror, already answer a mistyped prefix with "no lake at ..."), and names
and values holding control characters, which the command prints."""

from __future__ import annotations

import unicodedata
from typing import Any

import orjson
import pyarrow as pa
import pytest

from lakelock import Lake
from lakelock.testing import S3Endpoint
from tests._support.processes import InProcess
from tests.test_cli_mistakes import one_error_line


def test_configure_of_a_mistyped_prefix_is_refused_not_a_new_lake(
    s3: S3Endpoint, lake: Lake, client: Any, in_process: InProcess
) -> None:
    """A lake lives at ``warehouse/``; its operator lengthens the retention to 30 days before
    a month-end time travel, but types ``warehous``. The command answered "configured,
    retention 30d" (exit 0) for a new lake it had just created at the typo, while the real
    lake kept its 7 days and the next vacuum deleted the versions the operator believed were
    kept. A prefix with no lake must be refused, one line naming it (exit 1), with nothing
    written there; ``--create`` starts a lake there on purpose, with those settings."""
    real = Lake(lake.bucket, prefix="warehouse", s3=client)
    real.append("sales", pa.table({"id": [1]}))
    typo = f"s3://{lake.bucket}/warehous"
    result = in_process(
        "registry", "configure", typo, "--retention", "30d", "--endpoint-url", s3.url
    )
    assert result.returncode == 1
    assert one_error_line(result.stderr).startswith(f"no lake at {typo}/: ")
    assert "--create" in result.stderr
    assert "Contents" not in client.list_objects_v2(Bucket=lake.bucket, Prefix="warehous/")
    assert real.registry.settings().retention == 7 * 86400.0
    created = in_process(
        "registry", "configure", typo, "--retention", "30d", "--create", "--endpoint-url", s3.url
    )
    assert created.returncode == 0, created.stderr
    assert Lake(lake.bucket, prefix="warehous", s3=client).registry.settings().retention == (
        30 * 86400.0
    )
    shown = in_process(
        "registry", "configure", typo.replace("warehous", "nowhere"), "--endpoint-url", s3.url
    )
    # No lake there to show settings of: said so (not the defaults shown as a lake's),
    # and nothing written.
    assert shown.returncode == 1
    assert one_error_line(shown.stderr).startswith(f"no lake at {typo[:-8]}nowhere/: ")
    assert "Contents" not in client.list_objects_v2(Bucket=lake.bucket, Prefix="nowhere/")


@pytest.mark.parametrize("action", ["log", "show"])
def test_a_dataset_asked_of_a_mistyped_prefix_is_no_lake_not_a_missing_dataset(
    s3: S3Endpoint, lake: Lake, client: Any, in_process: InProcess, action: str
) -> None:
    """A lake lives at ``warehouse/``; an auditor asks for ``sales``'s history (or its
    files) but types ``warehous``. The answer was "dataset 'sales' is not in the registry:
    `lakelock registry show s3://.../warehous/` lists its datasets", as if the lake had lost
    the dataset, and the command it pointed at said "no registry yet". A prefix with no lake
    is named as such (exit 1), as vacuum, locks, mirror and configure name it."""
    Lake(lake.bucket, prefix="warehouse", s3=client).append("sales", pa.table({"id": [1]}))
    typo = f"s3://{lake.bucket}/warehous"
    result = in_process("registry", action, typo, "--dataset", "sales", "--endpoint-url", s3.url)
    assert result.returncode == 1
    assert one_error_line(result.stderr).startswith(f"no lake at {typo}/: ")


def test_what_the_lake_holds_is_shown_with_its_control_characters_escaped(
    s3: S3Endpoint, lake: Lake, in_process: InProcess
) -> None:
    """A pipeline copies an upstream file's header into the dataset's properties and merges
    a column named after another header; both carry terminal control sequences (ESC ``[2J``
    clears the screen, U+009B is the one-character CSI). ``lakelock registry show`` printed
    them raw: the operator's terminal executed them, and what it showed (an erased table, a
    forged line) was not what the lake holds. Every control character the lake's names and
    values hold must be shown escaped (``\\x1b``), the table aligned around it."""
    lake.append("sales", pa.table({"id": [1], "k": ["x"]}), partition_by=["k"])
    lake.set_properties("sales", {"source": "feed\x1b[2J\x9b2Kok"})
    merged = pa.table({"id": [2], "k": ["y"], "c\x1b[8m": [1]})
    lake.append("sales", merged, partition_by=["k"], schema_mode="merge")
    shown = in_process("registry", "show", lake.url, "--dataset", "sales", "--endpoint-url", s3.url)
    assert shown.returncode == 0, shown.stderr
    controls = {c for c in shown.stdout if unicodedata.category(c) == "Cc"}
    assert controls <= {"\n"}, controls
    assert "source = feed\\x1b[2J\\x9b2Kok" in shown.stdout
    column = next(line for line in shown.stdout.splitlines() if "c\\x1b[8m" in line)
    assert column.split() == ["c\\x1b[8m", "int64"]


def test_what_the_lake_holds_is_shown_with_its_direction_overrides_escaped(
    s3: S3Endpoint, lake: Lake, in_process: InProcess
) -> None:
    """A property copied from an upstream file's header holds U+202E (RIGHT-TO-LEFT
    OVERRIDE), as a file name crafted to hide its extension does. ``lakelock registry
    show`` printed it raw: the terminal drew the rest of the line right to left, so the
    value shown (``source = feedexe.csv``) was not the one the lake holds. Like a control
    character, a bidirectional override, embedding or isolate is shown escaped, and the
    characters a name may legitimately join with (U+200D in an emoji) are left as they
    are."""
    lake.append("sales", pa.table({"id": [1], "k": ["x"]}), partition_by=["k"])
    lake.set_properties(
        "sales", {"source": "feed\u202evsc.exe", "team": "\U0001f468\u200d\U0001f4bb"}
    )
    shown = in_process("registry", "show", lake.url, "--dataset", "sales", "--endpoint-url", s3.url)
    assert shown.returncode == 0, shown.stderr
    assert "source = feed\\u202evsc.exe" in shown.stdout
    assert "team = \U0001f468\u200d\U0001f4bb" in shown.stdout
    bidi = {
        c
        for c in shown.stdout
        if unicodedata.bidirectional(c)
        in {"LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI"}
    }
    assert not bidi, bidi


def test_json_output_escapes_what_a_terminal_would_act_on(
    s3: S3Endpoint, lake: Lake, in_process: InProcess
) -> None:
    """``--json`` piped to a terminal (or ``less -R``) is read by people too. A property
    holding U+009B (CSI, a C1 control: the terminal reads what follows as a command, as
    after ESC ``[``), DEL or U+202E was written raw: valid JSON, which JSON escapes only
    for C0. They are written as ``\\u009b`` escapes: the same JSON, parsed, and nothing a
    terminal acts on."""
    value = "feed\u009b2J\u007f\u0085\u202evsc.exe"
    lake.append("sales", pa.table({"id": [1], "k": ["x"]}), partition_by=["k"])
    lake.set_properties("sales", {"source": value})
    shown = in_process(
        "registry", "show", lake.url, "--dataset", "sales", "--json", "--endpoint-url", s3.url
    )
    assert shown.returncode == 0, shown.stderr
    assert "feed\\u009b2J\\u007f\\u0085\\u202evsc.exe" in shown.stdout
    assert not [c for c in shown.stdout if unicodedata.category(c) == "Cc" and c != "\n"]
    assert value in orjson.dumps(orjson.loads(shown.stdout)).decode()  # the same JSON
