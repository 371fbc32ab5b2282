"""``lakelock vacuum``: find (and with ``--delete`` remove) files no registry version needs.

A dry run by default. The work is :meth:`lakelock.Lake.vacuum`'s; this command adds the
progress bar and prints its report.
"""

from __future__ import annotations

import argparse
from typing import Any

from lakelock._cli._common import (
    LakeTarget,
    add_command,
    add_progress_option,
    century_duration,
    check_lake,
    client_for,
    format_duration,
    format_size,
    print_json,
    print_lines,
    render_table,
)
from lakelock._cli._progress import ProgressBar, ProgressCounter, progress_wanted
from lakelock._lake import Lake
from lakelock._vacuum import VacuumReport, check_window

__all__ = ["add_parser", "run"]

#: Items of a list shown in the plain-text report before "... and N more".
SHOWN = 20


def add_parser(commands: Any) -> None:
    add_command(
        commands,
        "vacuum",
        run,
        help="find (or --delete) files that no registry version references",
        description="Find data files and manifests that the registry no longer references and "
        "that are older than --older-than (so no snapshot still being read can need them). "
        "Dry run unless --delete.",
        on_lake=True,
        json=True,
        arguments=_arguments,
    )


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--older-than",
        type=century_duration,
        default=None,
        metavar="AGE",
        help="only files unreferenced and older than this, e.g. 24h, 7d, 90m, up to a "
        "century (default: the lake's retention, and it must equal --retention, the lake's; "
        "less only with --no-enforce-retention, and never below the lake's vacuum floor)",
    )
    parser.add_argument(
        "--enforce-retention",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="refuse an --older-than below the lake's retention, which deletes versions that "
        "time travel promises to keep readable (default: refuse); an --older-than below the "
        "lake's vacuum floor is refused either way",
    )
    parser.add_argument(
        "--retention",
        type=century_duration,
        default=None,
        metavar="AGE",
        help="the retention this lake is expected to have (default: the lake's, as its "
        "registry stores it; `lakelock registry show` shows it): another is refused. "
        "Change the lake's with `lakelock registry configure --retention AGE`",
    )
    parser.add_argument("--delete", action="store_true", help="delete them (default: only report)")
    add_progress_option(parser, shows="progress on stderr, while listing and while deleting")


def run(args: argparse.Namespace) -> int:
    target: LakeTarget = args.url
    lake = Lake(target.bucket, prefix=target.prefix, s3=client_for(args), retention=args.retention)
    check_lake(lake, target)  # vacuum judges a prefix with no lake all unreferenced
    settings = lake.registry.settings()
    if args.older_than is None:
        args.older_than = settings.retention
    check_window(args.older_than, settings, enforce_retention=args.enforce_retention)
    wanted = progress_wanted(args.progress)
    counter = ProgressCounter("listing") if wanted else None
    bar = ProgressBar("deleting") if wanted else None
    try:
        report = lake.vacuum(
            older_than=args.older_than,
            dry_run=not args.delete,
            progress=bar,
            listing=counter,
            enforce_retention=args.enforce_retention,
        )
    finally:
        for shown in (counter, bar):
            if shown is not None:
                shown.close()
    if args.json:
        print_json(
            {
                "url": target.url,
                "dry_run": not args.delete,
                "older_than": args.older_than,
                "scanned": report.scanned,
                "referenced": report.referenced,
                "recent": report.recent,
                "orphans": [
                    {"key": o.key, "size": o.size, "last_modified": o.last_modified}
                    for o in report.orphans
                ],
                "orphan_bytes": report.orphan_bytes,
                "deleted": report.deleted,
                "failed": {key: str(error) for key, error in report.failed.items()},
                "unproven": report.unproven,
            }
        )
        return 1 if report.failed else 0
    print_lines(_report_lines(target, args, report))
    return 1 if report.failed else 0


def _report_lines(target: LakeTarget, args: argparse.Namespace, report: VacuumReport) -> list[str]:
    age = format_duration(args.older_than)
    lines = [
        f"vacuum {target.url}: {report.scanned} objects scanned, {report.referenced} "
        f"referenced, {report.recent} newer than {age}",
        f"{len(report.orphans)} unreferenced and older than {age} "
        f"({format_size(report.orphan_bytes)})" + (":" if report.orphans else ""),
    ]
    lines += [
        f"kept every object of {dataset!r} and every intent, as it cannot prove them "
        f"unneeded: {why}"
        for dataset, why in sorted(report.unproven.items())
    ]
    rows = [
        (o.key, format_size(o.size), o.last_modified.strftime("%Y-%m-%dT%H:%M:%SZ"))
        for o in report.orphans[:SHOWN]
    ]
    if rows:
        lines += [
            "  " + line for line in render_table(("KEY", "SIZE", "MODIFIED"), rows, right=("SIZE",))
        ]
    if len(report.orphans) > SHOWN:
        lines.append(f"  ... and {len(report.orphans) - SHOWN} more (--json lists all)")
    if not args.delete:
        lines.append("dry run: nothing deleted (pass --delete to delete them)")
        return lines
    lines.append(f"deleted {len(report.deleted)}")
    for key, error in sorted(report.failed.items()):
        lines.append(f"NOT deleted {key}: {error}")
    return lines
