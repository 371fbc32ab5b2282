"""``lakelock mirror``: bring a dataset's Iceberg and Delta views up to date.

The work is :meth:`lakelock.Lake.mirror`'s; this command adds a progress bar per format and
prints where the views are (the Iceberg metadata.json and the Delta table URIs), for an
engine to read.
"""

from __future__ import annotations

import argparse
from typing import Any

from lakelock._cli._common import (
    LakeTarget,
    add_command,
    add_dataset_option,
    add_progress_option,
    check_lake,
    client_for,
    print_json,
    print_lines,
)
from lakelock._cli._progress import ProgressBar, progress_wanted
from lakelock._lake import Lake
from lakelock._mirror import FORMATS, MirrorResult, check_formats
from lakelock.errors import InvalidNameError

__all__ = ["add_parser", "run"]


def add_parser(commands: Any) -> None:
    add_command(
        commands,
        "mirror",
        run,
        help="write the Iceberg and Delta views of a dataset's new versions",
        description="Write, for every version of the dataset not yet mirrored, an Iceberg "
        "snapshot (metadata.json, manifest list, manifests) and a Delta log entry, all "
        "create-only: any Iceberg or Delta reader can then read every version. Idempotent; "
        "safe to run from several places at once. With --json: an object of 'dataset', "
        "'version' (the oldest version the views were brought to), 'written' (the versions "
        'each format asked for was given, by format: {"iceberg": 2, "delta": 2}), and '
        "'iceberg' and 'delta' (each view's URI, null for a format not asked for).",
        on_lake=True,
        json=True,
        arguments=_arguments,
    )


def _formats(text: str) -> tuple[str, ...]:
    """``iceberg,delta`` (argparse type): an unknown format is a usage error naming it."""
    try:
        return check_formats([part.strip() for part in text.split(",") if part.strip()])
    except InvalidNameError as error:
        raise argparse.ArgumentTypeError(f"{error.reason}, got {text!r}") from None


def _arguments(parser: argparse.ArgumentParser) -> None:
    add_dataset_option(parser, "the dataset whose versions to mirror", required=True)
    parser.add_argument(
        "--format",
        type=_formats,
        default=FORMATS,
        metavar="FORMATS",
        help="comma-separated: iceberg, delta (default: both)",
    )
    add_progress_option(parser, shows="progress on stderr")


def run(args: argparse.Namespace) -> int:
    target: LakeTarget = args.url
    lake = Lake(target.bucket, prefix=target.prefix, s3=client_for(args))
    check_lake(lake, target)
    wanted = progress_wanted(args.progress)
    formats = _in_mirroring_order(args.format)
    results: list[MirrorResult] = []
    for name in formats:
        bar = ProgressBar(f"mirroring {name}") if wanted else None
        try:
            results.append(lake.mirror(args.dataset, formats=(name,), progress=bar))
        finally:
            if bar is not None:
                bar.close()
    iceberg = next((r.iceberg for r in results if r.iceberg is not None), None)
    delta = next((r.delta for r in results if r.delta is not None), None)
    version = _version_every_view_holds(results)
    written = {name: r.written for name, r in zip(formats, results, strict=True)}
    if args.json:
        print_json(
            {
                "dataset": args.dataset,
                "version": version,
                "written": written,
                "iceberg": iceberg,
                "delta": delta,
            }
        )
        return 0
    done = _what_was_mirrored(written)
    lines = [f"{args.dataset}: views at version {version} ({done})"]
    if iceberg is not None:
        lines.append(f"  iceberg  {iceberg}")
    if delta is not None:
        lines.append(f"  delta    {delta}")
    print_lines(lines)
    return 0


def _in_mirroring_order(formats: tuple[str, ...]) -> tuple[str, ...]:
    """The formats asked for, Iceberg first: each pass mirrors up to the version current when
    it starts, so the first is the oldest, and the Iceberg view's metadata.json, which the
    command names, then holds the version it reports (:func:`_version_every_view_holds`)."""
    return tuple(name for name in FORMATS if name in formats)


def _version_every_view_holds(results: list[MirrorResult]) -> int:
    """The version to report: the oldest the views were mirrored to, one after the other.
    A commit landing between two formats' passes takes the later one a version further; the
    Iceberg metadata.json named (mirrored first) holds exactly this version, and the Delta
    table, read at its root, this one or a newer."""
    return min(r.version for r in results)


def _what_was_mirrored(written: dict[str, int]) -> str:
    """How many versions each view was given: "mirrored 6 versions" when every format was
    given as many (a version written to two views is one version), else each format's."""
    counts = set(written.values())
    if counts == {0}:
        return "already current"
    if len(counts) == 1:
        (count,) = counts
        return f"mirrored {count} version{'s' if count != 1 else ''}"
    return "mirrored " + ", ".join(f"{count} to {name}" for name, count in written.items())
