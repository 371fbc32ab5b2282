"""``lakelock registry show|log|migrate|configure``: what the registry says, read in one
consistent snapshot; upgrading it; changing the lake's settings."""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from lakelock._cli._common import (
    LakeTarget,
    add_command,
    add_dataset_option,
    century_duration,
    check_bucket,
    check_lake,
    commit_window,
    format_duration,
    format_size,
    lake_for,
    natural_key,
    number_type,
    parse_duration,
    print_json,
    print_lines,
    render_table,
    to_jsonable,
)
from lakelock._durations import dated_instant, format_instant
from lakelock._lake import Lake
from lakelock._layout import files_prefix
from lakelock._registry import (
    FORMAT_VERSION,
    DatasetState,
    HistoryEntry,
    LogEntry,
    RegistrySnapshot,
)
from lakelock._registry._settings import (
    DEFAULTS,
    MAX_COMMIT_WINDOW,
    MAX_INTENT_TTL,
    LakeSettings,
)
from lakelock.errors import DatasetNotFoundError

__all__ = ["add_parser"]


#: How ``registry show`` writes the vacuum record's instants and ``registry log`` a commit's
#: time (as the registry's own times); one no date holds (recorded by a clock far off) is
#: shown as seconds from the epoch instead. ``log --json`` gives each commit's ``at`` so, or
#: ``null`` where no date holds it, and ``at_seconds``, the seconds since the epoch recorded.
_INSTANT = "%Y-%m-%dT%H:%M:%S.%fZ"


def add_parser(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "registry",
        help="the registry: its datasets, commits (log), settings (configure), format (migrate)",
        description="What the lake's registry records, read in one consistent snapshot: its "
        "datasets (show), their commits (log); change the lake's settings (configure) or "
        "upgrade its format (migrate). `lakelock registry ACTION --help` says more.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    add_command(
        actions,
        "show",
        run_show,
        help="datasets (or one dataset's schema and partitions)",
        description="Show the registry's datasets, or with --dataset one dataset's schema, "
        "properties and partitions.",
        on_lake=True,
        json=True,
        arguments=_show_arguments,
    )
    add_command(
        actions,
        "log",
        run_log,
        help="recent commits, newest first",
        description="Recent commits recorded in the registry's root, newest first, with the "
        "operation each one was (append, overwrite, delete, compact, rename, copy, restore, "
        "properties; 'commit' for a plain registry commit; 'takeover', 'lock', 'unlock' for "
        "leases and the path lock), and the commits refused or cancelled meanwhile "
        "(each used up a version to record why: 'rejected', 'cancelled', with the reason); "
        "with --dataset, that dataset's whole history (as far back as vacuum kept it). "
        "A version that records no commit is not listed: a change of the lake's settings "
        "(registry configure), an upgrade (registry migrate) and vacuum's move of the root "
        "before it deletes; registry show shows the settings and the vacuum cutoff they "
        "left.",
        on_lake=True,
        json=True,
        arguments=_log_arguments,
    )
    add_command(
        actions,
        "migrate",
        run_migrate,
        help=f"upgrade a format-1 or format-2 registry to format {FORMAT_VERSION}",
        description=f"Upgrade the registry to format {FORMAT_VERSION} now, by compare-and-swap "
        "(any commit would do it too). A format-1 document is kept under metastore/backups/. "
        "From then on lakelocks that read only formats 1 and 2 refuse the lake (they would "
        "misapply commits spanning datasets and restores). A registry upgraded already is "
        "left as it is.",
        on_lake=True,
    )
    add_command(
        actions,
        "configure",
        run_configure,
        help="change the lake's settings (retention, commit window, intent TTL, vacuum floor)",
        description="Change the lake's settings, for every writer, by one compare-and-swap "
        "of the registry. A prefix with no lake is refused (a mistyped one would get a new "
        "lake while the real one kept its settings); --create starts a lake there with these "
        "settings (without any, it creates nothing and says so). Settings not given stay as "
        "they are; without any, show them. Every writer "
        "reads them from the registry; a writer given another value explicitly "
        "(Lake(retention=...)) is refused. "
        "--retention: how long a replaced version stays readable (time travel; vacuum keeps "
        "it). --commit-window: how many recent commit ids the registry keeps (a re-run "
        "within them is recognised across datasets). --intent-ttl: how long an undecided "
        "commit may still be applied. --vacuum-floor: the shortest window vacuum ever uses, "
        "even with --no-enforce-retention; writers refuse to commit what they wrote longer "
        "than half of it ago (0: no floor, for a lake nobody writes while vacuum runs).",
        on_lake=True,
        json=True,
        arguments=_configure_arguments,
    )


def _configure_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--create",
        action="store_true",
        help="start a new lake at a prefix that has none, with these settings (without it, "
        "a prefix with no lake is refused: a typo must not make one)",
    )
    parser.add_argument(
        "--retention",
        type=century_duration,
        metavar="AGE",
        help=f"e.g. 30d (default of a new lake: {format_duration(DEFAULTS.retention)})",
    )
    parser.add_argument(
        "--commit-window",
        type=commit_window,
        metavar="N",
        help=f"recent commit ids kept, at most {MAX_COMMIT_WINDOW} (default of a new lake: "
        f"{DEFAULTS.commit_window})",
    )
    parser.add_argument(
        "--intent-ttl",
        type=_intent_ttl,
        metavar="AGE",
        help=f"e.g. 10m, at most {format_duration(MAX_INTENT_TTL)} (default of a new lake: "
        f"{format_duration(DEFAULTS.intent_ttl)})",
    )
    parser.add_argument(
        "--vacuum-floor",
        type=century_duration,
        metavar="AGE",
        help="e.g. 1h (default of a new lake: "
        f"{format_duration(DEFAULTS.vacuum_floor)}, at most the retention)",
    )


def _intent_ttl(text: str) -> float:
    """``--intent-ttl`` (argparse type): a duration, refused above its bound as a usage error."""
    seconds = parse_duration(text)
    if seconds > MAX_INTENT_TTL:
        raise argparse.ArgumentTypeError(
            f"at most {format_duration(MAX_INTENT_TTL)} (vacuum keeps every intent younger "
            f"than it), got {text!r}"
        )
    return seconds


def run_configure(args: argparse.Namespace) -> int:
    target: LakeTarget = args.url
    lake = lake_for(args, target)
    check_bucket(lake.client, target.bucket)
    changes = {
        name: getattr(args, name)
        for name in ("retention", "commit_window", "intent_ttl", "vacuum_floor")
        if getattr(args, name) is not None
    }
    existed = lake.registry.read().version != 0
    if not existed and not args.create:
        otherwise = ", or pass --create" + ("" if changes else " with settings")
        check_lake(lake, target, otherwise=f"{otherwise} to start a lake there")
    if changes:
        settings = lake.registry.configure(**changes, create=True)
    else:
        settings = lake.registry.settings()
    if args.json:
        print_json(
            {"url": target.url, "lake": existed or bool(changes), "settings": settings.to_json()},
            sort_keys=False,
        )
    else:
        print_lines([f"{target.url}: {_what_happened(existed, changed=bool(changes))}"])
        print_lines(_settings_lines(settings))
    return 0


def _what_happened(existed: bool, *, changed: bool) -> str:
    """The heading of ``registry configure``'s answer."""
    if existed:
        return "configured" if changed else "settings"
    if changed:
        return "a new lake, created with these settings"
    return (
        "no lake here, and no settings given: nothing created (--create starts a lake with the "
        "settings given); a new lake's settings would be"
    )


def _settings_lines(settings: LakeSettings) -> list[str]:
    return [
        f"retention {format_duration(settings.retention)}, commit window "
        f"{settings.commit_window}, intent TTL {format_duration(settings.intent_ttl)}, "
        f"vacuum floor {format_duration(settings.vacuum_floor)}"
    ]


def _show_arguments(parser: argparse.ArgumentParser) -> None:
    add_dataset_option(parser, "show this dataset in detail (default: every dataset, a row each)")
    parser.add_argument(
        "--files", action="store_true", help="with --dataset: list its committed files too"
    )
    parser.add_argument(
        "--version",
        type=int,
        metavar="N",
        help="show the registry as it was at version N (time travel; default: the current one)",
    )


def _log_arguments(parser: argparse.ArgumentParser) -> None:
    add_dataset_option(
        parser,
        "this dataset's whole history (default: every dataset's recent commits, and those "
        "refused or cancelled)",
    )
    parser.add_argument(
        "-n",
        "--limit",
        type=number_type(int, lambda value: value >= 1, "a positive integer"),
        default=20,
        metavar="N",
        help="at most N commits (default 20)",
    )


def run_migrate(args: argparse.Namespace) -> int:
    target: LakeTarget = args.url
    lake = lake_for(args, target)
    result = lake.registry.migrate()
    if result is None:
        print_lines([f"{target.url}: the registry is in format {FORMAT_VERSION} already"])
    else:
        kept = f"; format-1 document kept at {result.backup}" if result.backup else ""
        print_lines(
            [
                f"{target.url}: upgraded from format {result.upgraded_from} to format "
                f"{FORMAT_VERSION} at version {result.version}{kept}"
            ]
        )
    return 0


def _read(args: argparse.Namespace) -> tuple[Any, RegistrySnapshot]:
    target: LakeTarget = args.url
    lake = lake_for(args, target)
    snapshot: RegistrySnapshot = lake.registry.read(version=getattr(args, "version", None))
    if snapshot.version == 0:
        check_bucket(lake.client, target.bucket)  # "no registry" must not hide "no bucket"
    return lake, snapshot


def _no_such_dataset(lake: Lake, target: LakeTarget, dataset: str) -> NoReturn:
    """Refuse a dataset the registry lacks: as "no lake at ..." where no lake lives (a
    mistyped prefix, not a dataset the lake lost), else as the missing dataset it is."""
    check_lake(lake, target)
    raise DatasetNotFoundError(dataset)


def run_show(args: argparse.Namespace) -> int:
    lake, snap = _read(args)
    target: LakeTarget = args.url
    if args.dataset is not None:
        state = snap.datasets.get(args.dataset)
        if state is None:
            _no_such_dataset(lake, target, args.dataset)
        files = lake.registry.files(args.dataset, snapshot=snap) if args.files else None
        if args.json:
            data = {"url": target.url, "registry_version": snap.version, **_dataset_json(state)}
            if files is not None:
                data["files"] = [f.to_json() for f in files]
            print_json(data, sort_keys=False)
        else:
            print_lines(_dataset_lines(target, snap, state, files))
        return 0
    if args.json:
        print_json(
            {
                "url": target.url,
                "version": snap.version,
                "etag": snap.etag,
                "updated_at": snap.updated_at,
                "format_version": snap.format_version,
                "datasets": {name: _dataset_json(s) for name, s in sorted(snap.datasets.items())},
                "fences": dict(sorted(snap.fences.items())),
                "pending_intents": _pending(lake, snap),
                "settings": (snap.settings or DEFAULTS).to_json(),
                "settings_stored": snap.settings is not None,
                "vacuum_cutoff": snap.vacuum_cutoff,
                "vacuum_horizon": snap.vacuum_horizon,
            },
            sort_keys=False,
        )
        return 0
    print_lines(_registry_lines(target, snap, _pending(lake, snap)))
    return 0


def run_log(args: argparse.Namespace) -> int:
    target: LakeTarget = args.url
    lake = lake_for(args, target)
    if args.dataset is not None:
        try:
            history = lake.registry.history(args.dataset, limit=args.limit)
        except DatasetNotFoundError:
            _no_such_dataset(lake, target, args.dataset)
        entries = [_history_json(h) for h in history]
    else:  # one read of the root: its commits and refusals are of one version
        entries = [_log_json(e) for e in lake.registry.log(limit=args.limit)]
    if args.json:
        print_json(entries)
        return 0
    if not entries:
        _, snap = _read(args)
        what = f" to dataset {args.dataset!r}" if args.dataset else ""
        print_lines([f"{target.url}: no commits{what} recorded (registry version {snap.version})"])
        return 0
    rows = [
        (
            e["version"],
            format_instant(e["at_seconds"], _INSTANT),
            e["operation"],
            ",".join(e["datasets"]) or "-",
            e["added"],
            e["removed"],
            e["id"] if e["id"] is not None else f"({e['reason'] or 'no reason recorded'})",
        )
        for e in entries
    ]
    print_lines(
        render_table(
            ("VERSION", "AT", "OPERATION", "DATASETS", "ADDED", "REMOVED", "COMMIT"),
            rows,
            right=("VERSION", "ADDED", "REMOVED"),
        )
    )
    return 0


def _instant_json(epoch: float) -> dict[str, Any]:
    """A commit's time in ``log --json``: ``at``, the UTC date and time (``null`` where no
    date holds it: recorded by a clock far off), and ``at_seconds``, as recorded."""
    return {"at": dated_instant(epoch, _INSTANT), "at_seconds": epoch}


def _history_json(entry: HistoryEntry) -> dict[str, Any]:
    return {
        "id": entry.commit_id,
        "version": entry.version,
        "dataset": entry.dataset,
        "datasets": [entry.dataset],
        "operation": entry.operation,
        **_instant_json(entry.at),
        "added": entry.added,
        "removed": entry.removed,
    }


def _log_json(entry: LogEntry) -> dict[str, Any]:
    """One entry of ``log --json``: a refused or cancelled commit's operation is its fate
    (the root records no more of it), its ``dataset`` ``null``."""
    return {
        "id": entry.commit_id,
        "version": entry.version,
        "dataset": ",".join(entry.datasets) if entry.fate == "applied" else None,
        "datasets": list(entry.datasets),
        "operation": entry.operation or entry.fate,
        **_instant_json(entry.at),
        "added": entry.added,
        "removed": entry.removed,
        "digest": entry.digest,
        "intent": entry.intent,
        "reason": entry.reason,
    }


# -- rendering ----------------------------------------------------------------------------------


def _pending(lake: Any, snap: RegistrySnapshot) -> list[str]:
    """Intents not decided yet (none in a version other than the current one)."""
    if snap.historical or snap.version == 0:
        return []
    pending: list[str] = lake.registry.pending_intents()
    return pending


def _registry_lines(
    target: LakeTarget, snap: RegistrySnapshot, pending: list[str] | None = None
) -> list[str]:
    if snap.version == 0:  # a historical version has no ETag either: not the test
        return [f"{target.url}: no registry yet (nothing committed)"]
    count = len(snap.datasets)
    lines = [
        f"{target.url}",
        f"registry version {snap.version}{' (as it was)' if snap.historical else ''}, "
        f"updated {snap.updated_at}, {count} dataset{'s' if count != 1 else ''}",
    ]
    if snap.format_version < FORMAT_VERSION:
        lines.append(
            f"registry format {snap.format_version}: the next commit upgrades it to format "
            f"{FORMAT_VERSION} (or `lakelock registry migrate`)"
        )
    else:
        lines.append(f"registry format {snap.format_version}")
    if not snap.historical:
        settings = _settings_lines(snap.settings or DEFAULTS)[0]
        stored = "" if snap.settings is not None else " (the defaults: none stored yet)"
        lines.append(f"settings: {settings}{stored}")
        if snap.vacuum_cutoff is not None:
            cutoff = format_instant(snap.vacuum_cutoff, _INSTANT)
            lines.append(
                f"vacuum cutoff {cutoff} (server time): the last vacuum "
                "deleted unreferenced files written up to it; a commit adding a file written "
                "at or before it is refused"
            )
        if snap.vacuum_horizon is not None:
            horizon = format_instant(snap.vacuum_horizon, _INSTANT)
            lines.append(
                f"vacuum horizon {horizon}: the last vacuum kept no version "
                "replaced before it; such a version is neither read nor restored, whatever "
                "the retention"
            )
    if pending:
        lines.append(
            f"{len(pending)} pending intent{'s' if len(pending) != 1 else ''} (commits written, "
            f"not yet applied by any swap): oldest {pending[0]}"
        )
    if snap.datasets:
        rows = [
            (
                name,
                ",".join(s.partition_by) or "-",
                s.partition_count,
                s.file_count,
                f"{s.record_count:,}",
                format_size(s.size),
                f"v{s.schema_version}",
                s.updated_version,
                s.updated_at,
            )
            for name, s in sorted(snap.datasets.items())
        ]
        lines.append("")
        lines += render_table(
            (
                "DATASET",
                "PARTITIONED BY",
                "PARTITIONS",
                "FILES",
                "RECORDS",
                "SIZE",
                "SCHEMA",
                "VERSION",
                "UPDATED",
            ),
            rows,
            right=("PARTITIONS", "FILES", "RECORDS", "SIZE", "VERSION"),
        )
    if snap.fences:
        lines.append("")
        lines += render_table(
            ("FENCE", "HIGHEST TOKEN"),
            sorted(snap.fences.items()),
            right=("HIGHEST TOKEN",),
        )
    return lines


def _dataset_lines(
    target: LakeTarget, snap: RegistrySnapshot, state: DatasetState, files: list[Any] | None
) -> list[str]:
    lines = [
        f"dataset {state.name}  ({target.url}{files_prefix(state.name)})",
        f"registry version {snap.version}; dataset last changed at version "
        f"{state.updated_version} ({state.updated_at}), created {state.created_at}",
        f"{len(state.partitions)} partitions, {state.file_count} files, "
        f"{state.record_count:,} records, {format_size(state.size)}",
        "",
        f"schema v{state.schema_version}:",
    ]
    if state.schema is None:
        lines.append("  (none recorded)")
    else:
        partition_columns = set(state.partition_by)
        rows = [
            (
                f"  {field.name}",
                str(field.type),
                "" if field.nullable else "not null",
                "partition" if field.name in partition_columns else "",
            )
            for field in state.schema
        ]
        lines += render_table(("  COLUMN", "TYPE", "", ""), rows)
    lines.append(f"partitioned by: {', '.join(state.partition_by) or '(not partitioned)'}")
    if state.properties:
        lines.append("properties:")
        lines += [f"  {k} = {v}" for k, v in sorted(state.properties.items())]
    if state.partitions:
        lines.append("")
        partition_rows = [
            (
                path or "(root)",
                p.file_count,
                f"{p.record_count:,}",
                format_size(p.size),
                p.updated_version,
            )
            for path, p in _partitions(state)
        ]
        lines += render_table(
            ("PARTITION", "FILES", "RECORDS", "SIZE", "VERSION"),
            partition_rows,
            right=("FILES", "RECORDS", "SIZE", "VERSION"),
        )
    if files is not None:
        lines.append("")
        file_rows = [(f.key, f"{f.record_count:,}", format_size(f.size), f.etag) for f in files]
        lines += render_table(
            ("FILE", "RECORDS", "SIZE", "ETAG"), file_rows, right=("RECORDS", "SIZE")
        )
    return lines


def _partitions(state: DatasetState) -> list[tuple[str, Any]]:
    """The partitions in natural order: ``day=2`` before ``day=10``."""
    return sorted(state.partitions.items(), key=lambda item: natural_key(item[0]))


def _dataset_json(state: DatasetState) -> dict[str, Any]:
    return {
        "name": state.name,
        "schema": to_jsonable(state.schema) if state.schema is not None else None,
        "schema_version": state.schema_version,
        "partition_by": list(state.partition_by),
        "properties": dict(state.properties),
        "created_at": state.created_at,
        "updated_at": state.updated_at,
        "updated_version": state.updated_version,
        "file_count": state.file_count,
        "record_count": state.record_count,
        "size": state.size,
        "partitions": {
            path: {
                "file_count": p.file_count,
                "record_count": p.record_count,
                "size": p.size,
                "updated_version": p.updated_version,
                "manifests": [m.key for m in p.manifests],
            }
            for path, p in _partitions(state)
        },
    }
