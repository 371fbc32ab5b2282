"""``lakelock locks``: who holds which path locks and leases, with tokens and expiry.

Read-only: lists ``metastore/locks/`` (one lock table per dataset) and ``metastore/leases/``.
"Live" is judged against the server's clock (the ``Date`` of the read), without the protocol's
safety margin: this is a picture for humans, not a decision. A document that cannot be parsed
is listed as unreadable, with why, beside every other one; the exit status is then 1, since
the picture misses whoever that document names.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from lakelock._cli._common import (
    LakeTarget,
    add_command,
    check_lake,
    format_duration,
    format_time,
    lake_for,
    print_json,
    print_lines,
    render_table,
)
from lakelock._holding import Unreadable
from lakelock._lease import read_leases
from lakelock._pathlock import read_lock_tables

__all__ = ["add_parser", "run"]


def add_parser(commands: Any) -> None:
    add_command(
        commands,
        "locks",
        run,
        help="show current path-lock holders and leases",
        description="Show the distributed path-lock holders of every dataset and every lease: "
        "owners, fencing tokens, expiry. A lock table or lease document that cannot be read is "
        "shown as unreadable, with why, beside the others, and the exit status is then 1.",
        on_lake=True,
        json=True,
        arguments=_arguments,
    )


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--all", action="store_true", help="also show expired holders and released leases"
    )


def _state(expires_at: float, now: float, *, released: bool = False) -> str:
    if released or expires_at <= 0:
        return "released"
    return "live" if expires_at > now else "expired"


def _expiry(expires_at: float, now: float) -> str:
    if expires_at <= 0:
        return "-"
    delta = expires_at - now
    when = f"in {format_duration(delta)}" if delta >= 0 else f"{format_duration(-delta)} ago"
    return f"{format_time(expires_at)} ({when})"


def _owner(owner: Any) -> str:
    return "-" if owner is None else str(owner)


def run(args: argparse.Namespace) -> int:
    target: LakeTarget = args.url
    lake = lake_for(args, target)
    unreadable: list[Unreadable] = []
    tables = read_lock_tables(lake.store, unreadable=unreadable)
    leases = read_leases(lake.store, unreadable=unreadable)
    if not tables and not leases and not unreadable:
        check_lake(lake, target)  # locks of a lake are kept beside its registry
    times = [s.server_time for s in tables if s.server_time is not None]
    times += [s.server_time for s in leases if s.server_time is not None]
    now = max(times) if times else time.time()

    holders = [
        (stored, holder, _state(holder.expires_at, now))
        for stored in tables
        for holder in stored.doc.holders
    ]
    lease_rows = [
        (stored, _state(stored.doc.expires_at, now, released=stored.doc.released))
        for stored in leases
    ]
    if not args.all:
        holders = [h for h in holders if h[2] == "live"]
        lease_rows = [r for r in lease_rows if r[1] == "live"]

    if args.json:
        print_json(
            {
                "url": target.url,
                "server_time": now,
                "locks": [
                    {
                        "dataset": stored.doc.dataset,
                        "holder": holder.id,
                        "token": holder.token,
                        "owner": holder.owner.to_json(),
                        "read": sorted(holder.read),
                        "write": sorted(holder.write),
                        "acquired_at": holder.acquired_at,
                        "expires_at": holder.expires_at,
                        "state": state,
                    }
                    for stored, holder, state in holders
                ],
                "leases": [
                    {
                        "name": stored.doc.name,
                        "token": stored.doc.token,
                        "owner": stored.doc.owner.to_json() if stored.doc.owner else None,
                        "acquired_at": stored.doc.acquired_at,
                        "renewed_at": stored.doc.renewed_at,
                        "expires_at": stored.doc.expires_at,
                        "ttl": stored.doc.ttl,
                        "state": state,
                    }
                    for stored, state in lease_rows
                ],
                "unreadable": [{"key": u.key, "reason": u.reason} for u in unreadable],
            }
        )
        return 1 if unreadable else 0

    which = "" if args.all else "live "
    lines = [f"{target.url} at server time {format_time(now)}", ""]
    if holders:
        lines.append(f"{which}path-lock holders:".capitalize())
        lines += render_table(
            ("DATASET", "TOKEN", "OWNER", "STATE", "EXPIRES", "PATHS"),
            [
                (
                    stored.doc.dataset,
                    holder.token,
                    _owner(holder.owner),
                    state,
                    _expiry(holder.expires_at, now),
                    ", ".join(f"{mode} {path}" for path, mode in holder.modes),
                )
                for stored, holder, state in holders
            ],
            right=("TOKEN",),
        )
    else:
        lines.append(f"no {which}path-lock holders ({len(tables)} lock tables)")
    lines.append("")
    if lease_rows:
        lines.append(f"{which}leases:".capitalize())
        lines += render_table(
            ("LEASE", "TOKEN", "OWNER", "STATE", "EXPIRES"),
            [
                (
                    stored.doc.name,
                    stored.doc.token,
                    _owner(stored.doc.owner),
                    state,
                    _expiry(stored.doc.expires_at, now),
                )
                for stored, state in lease_rows
            ],
            right=("TOKEN",),
        )
    else:
        lines.append(f"no {which}leases ({len(leases)} known)")
    if unreadable:
        lines += ["", "Unreadable (who holds these is not known):"]
        lines += render_table(("KEY", "WHY"), [(u.key, u.reason) for u in unreadable])
    print_lines(lines)
    return 1 if unreadable else 0
