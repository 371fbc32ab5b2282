"""The pure core of the distributed path lock: lock tables and their transforms.

No I/O, no clocks: every transform takes the server-time bounds it is decided at
(:class:`~lakelock._clock.TimeBounds`). ``_distributed`` wraps them in S3 compare-and-swaps.

The rule
--------
The same as the in-process lock (:mod:`lakelock._pathlock._core`): two requests conflict iff a
path of one lies in the lineage (ancestor, itself, descendant) of a path of the other and at
least one of the two writes it, decided by :func:`~lakelock._pathlock.requests_conflict` on
the holders' stored requests. No intent modes are stored: a table lists whole requests, so the
oracle itself is the compatibility check.

Datasets and tables
-------------------
A path's dataset is its first segment (``/sales/year=2024`` belongs to ``sales``). Paths of
different datasets are never in each other's lineage, so each dataset has its own table and a
request is split by dataset (:func:`split_by_dataset`). The root ``/`` belongs to no dataset
and cannot be locked across machines.

The document (``metastore/locks/<dataset>.json``)
-------------------------------------------------
::

    {
      "format_version": 1,
      "kind": "lakelock.lock-table",
      "dataset": "sales",
      "next_token": 42,                  # the token the next grant gets; only ever grows
      "holders": [
        {"id": "<uuid hex>",             # one grant (one request's part in this dataset)
         "token": 41,
         "owner": {"id": "...", "host": "etl-3", "pid": 4242, "label": null},
         "read": ["/sales/year=2024/month=01"],
         "write": ["/sales/year=2024/month=02"],
         "acquired_at": 1767225600.0,    # server time
         "expires_at": 1767225630.0}     # server time
      ]
    }

Transforms (``now``: server-time bounds; ``margin``: the stated safety margin)
------------------------------------------------------------------------------
- :func:`grant`: holders not :func:`~lakelock._holding.provably_expired` are *live*; if a
  live holder's request conflicts with ours → :class:`Blocked` (who, and until when); otherwise
  the new table drops the dead holders, appends ours with ``token = next_token`` and
  ``expires_at = now.latest + ttl``, and increments ``next_token``. All of a dataset's paths go
  in one holder, in one write: all-or-nothing, no hold-and-wait inside a table.
- :func:`renew_holder`: extends our holder, only while it is valid in our own view
  (``now.latest < expires_at - margin``), else :class:`~lakelock._holding.Lapsed`.
- :func:`release_holder`: removes our holder (and dead ones).

Safety: a holder is granted only when no live conflicting holder exists in the table it is
written into, and the write is a compare-and-swap on that very table. A holder stops acting
``margin`` before its expiry by its latest bound; others ignore it only ``margin`` after by
their earliest bound. So two conflicting holders never both believe they hold the lock.

Fencing tokens
--------------
Tokens are per table: ``next_token`` grows with every grant. A holder granted later than a
*conflicting* holder always has the higher token (it could be granted only once the earlier one
was gone). But **compatible** holders run concurrently with different tokens, so a registry
must not reject every token below the highest it has seen for ``lock:<dataset>``: that would
refuse a legitimate commit of an older, compatible holder. The check must be lineage-aware:
reject a commit of holder *h* iff a commit was made under a holder with a higher token whose
request conflicts with *h*'s (the registry's hierarchical ``Fence`` does exactly this).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Final, Literal

from lakelock._clock import TimeBounds
from lakelock._holding import DocumentReader, Lapsed, Owner, holder_valid, provably_expired
from lakelock._names import validate_partition_path
from lakelock._pathlock._core import LockRequest, normalize_path, requests_conflict
from lakelock.errors import InvalidNameError

__all__ = [
    "Blocked",
    "Granted",
    "Holder",
    "LockTable",
    "canonical_request",
    "dataset_of",
    "describe",
    "dump_table",
    "empty_table",
    "grant",
    "live_holders",
    "parse_table",
    "release_holder",
    "renew_holder",
    "split_by_dataset",
]

TABLE_KIND: Final = "lakelock.lock-table"


# --- datasets ----------------------------------------------------------------------------------


def dataset_of(path: str) -> str:
    """The dataset (first segment) of a path; the root belongs to none."""
    normal = normalize_path(path)
    if normal == "/":
        raise InvalidNameError(path, "the root '/' spans every dataset: lock a dataset or below")
    dataset = normal.split("/", 2)[1]
    if any(ord(c) < 32 or ord(c) == 127 for c in dataset):
        raise InvalidNameError(path, "a dataset name may not contain control characters")
    return dataset


def canonical_request(request: LockRequest) -> LockRequest:
    """``request`` with its datasets' names NFC-normalised and each ``col=value`` segment
    below a dataset spelt as the registry files partitions (Hive-escaped,
    :func:`~lakelock._names.validate_partition_path`), so a lock names a dataset and a
    partition as its commits and other locks do however its caller spelt them:
    ``/ev/ts=2024-01-01T06:30:00`` is ``/ev/ts=2024-01-01T06%3A30%3A00`` in the lock table and
    the grant's fence (both compared by what they name: :func:`~lakelock._pathlock._core.path_key`,
    whatever spelling an older lakelock stored). Other segments stay as they
    are; a ``col=value`` segment that names no partition value (a bad ``%`` escape) is
    :class:`~lakelock.errors.InvalidNameError`."""

    def canonical(path: str) -> str:
        dataset, *rest = path[1:].split("/")
        segments = [validate_partition_path(s) if "=" in s else s for s in rest]
        return "/".join(["", unicodedata.normalize("NFC", dataset), *segments])

    return LockRequest(map(canonical, request.read), map(canonical, request.write))


def split_by_dataset(request: LockRequest) -> dict[str, LockRequest]:
    """``request`` cut into one request per dataset, in dataset order (the order tables are
    taken in)."""
    reads: dict[str, list[str]] = {}
    writes: dict[str, list[str]] = {}
    for path in request.read:
        reads.setdefault(dataset_of(path), []).append(path)
    for path in request.write:
        writes.setdefault(dataset_of(path), []).append(path)
    return {
        dataset: LockRequest(reads.get(dataset, ()), writes.get(dataset, ()))
        for dataset in sorted(reads.keys() | writes.keys())
    }


# --- documents ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Holder:
    """One grant in a lock table: ``owner``'s request on this dataset's paths."""

    id: str
    token: int
    owner: Owner
    read: frozenset[str]
    write: frozenset[str]
    acquired_at: float
    expires_at: float

    @property
    def request(self) -> LockRequest:
        return LockRequest(self.read, self.write)

    @property
    def dataset(self) -> str:
        return dataset_of(next(iter(self.write or self.read)))

    @property
    def modes(self) -> tuple[tuple[str, Literal["read", "write"]], ...]:
        """Each path with its mode, sorted by path (a path both read and written is written)."""
        written: list[tuple[str, Literal["read", "write"]]] = [(p, "write") for p in self.write]
        read: list[tuple[str, Literal["read", "write"]]] = [
            (p, "read") for p in self.read - self.write
        ]
        return tuple(sorted(written + read))


@dataclass(frozen=True, slots=True)
class LockTable:
    """One dataset's lock table (module docstring has the JSON layout)."""

    dataset: str
    next_token: int
    holders: tuple[Holder, ...]

    def find(self, holder_id: str) -> Holder | None:
        return next((holder for holder in self.holders if holder.id == holder_id), None)


def empty_table(dataset: str) -> LockTable:
    """A dataset's table before its first grant."""
    return LockTable(dataset, 1, ())


def parse_table(body: bytes, *, dataset: str, fail: Callable[[str], Exception]) -> LockTable:
    """The one parser of lock tables: refuses other versions, kinds and broken invariants
    (paths outside the dataset, tokens not below ``next_token``, duplicate ids or tokens)."""
    doc = DocumentReader.load(body, kind=TABLE_KIND, fail=fail)
    if doc.text("dataset") != dataset:
        raise fail(f"table is for dataset {doc.raw['dataset']!r}, expected {dataset!r}")
    next_token = doc.integer("next_token", minimum=1)
    raw_holders = doc.get("holders")
    if not isinstance(raw_holders, list):
        raise fail("'holders' must be a list")
    holders = []
    for n, raw in enumerate(raw_holders):
        item = doc.sub(raw, f"holders[{n}]")
        read, write = item.texts("read"), item.texts("write")
        for path in (*read, *write):
            if path != normalize_path(path) or dataset_of(path) != dataset:
                raise fail(f"holders[{n}]: path {path!r} is not a normal path of {dataset!r}")
        if not read and not write:
            raise fail(f"holders[{n}] locks no path")
        holder = Holder(
            item.text("id"),
            item.integer("token", minimum=1),
            item.owner("owner"),
            frozenset(read),
            frozenset(write),
            item.number("acquired_at"),
            item.number("expires_at"),
        )
        if holder.token >= next_token:
            raise fail(f"holders[{n}] has token {holder.token} >= next_token {next_token}")
        holders.append(holder)
    if len({h.id for h in holders}) != len(holders):
        raise fail("duplicate holder ids")
    if len({h.token for h in holders}) != len(holders):
        raise fail("duplicate holder tokens")
    return LockTable(dataset, next_token, tuple(holders))


def dump_table(table: LockTable) -> bytes:
    return DocumentReader.dump(
        TABLE_KIND,
        {
            "dataset": table.dataset,
            "next_token": table.next_token,
            "holders": [
                {
                    "id": h.id,
                    "token": h.token,
                    "owner": h.owner.to_json(),
                    "read": sorted(h.read),
                    "write": sorted(h.write),
                    "acquired_at": h.acquired_at,
                    "expires_at": h.expires_at,
                }
                for h in table.holders
            ],
        },
    )


# --- transforms --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Granted:
    """Write ``table`` (``If-Match`` the table decided on) to hold ``holder``."""

    table: LockTable
    holder: Holder


@dataclass(frozen=True, slots=True)
class Blocked:
    """Live conflicting ``holders``; absent releases they are all gone once server time is
    past ``until``."""

    holders: tuple[Holder, ...]
    until: float


def live_holders(table: LockTable, now: TimeBounds, margin: float) -> tuple[Holder, ...]:
    """Holders not provably expired: the ones everybody else must respect."""
    return tuple(h for h in table.holders if not provably_expired(h.expires_at, now, margin))


def grant(
    table: LockTable,
    request: LockRequest,
    owner: Owner,
    now: TimeBounds,
    *,
    ttl: float,
    margin: float,
    holder_id: str,
) -> Granted | Blocked:
    """Grant ``request`` (all of it, on this table's dataset) or say who blocks it."""
    if not request.paths:
        raise ValueError("a lock request needs at least one path")
    foreign = {p for p in request.paths if dataset_of(p) != table.dataset}
    if foreign:
        raise ValueError(f"paths {sorted(foreign)} are not in dataset {table.dataset!r}")
    if table.find(holder_id) is not None:
        raise ValueError(f"holder id {holder_id!r} is already in the table")
    live = live_holders(table, now, margin)
    blocking = tuple(h for h in live if requests_conflict(h.request, request))
    if blocking:
        return Blocked(blocking, max(h.expires_at for h in blocking) + margin)
    holder = Holder(
        holder_id,
        table.next_token,
        owner,
        request.read,
        request.write,
        now.latest,
        now.latest + ttl,
    )
    return Granted(LockTable(table.dataset, table.next_token + 1, (*live, holder)), holder)


def renew_holder(
    table: LockTable, holder_id: str, now: TimeBounds, *, ttl: float, margin: float
) -> Granted | Lapsed:
    """Extend our holder (never shortening it), dropping dead holders; :class:`Lapsed` if it
    is gone from the table or no longer valid in our own view."""
    holder = table.find(holder_id)
    if holder is None:
        return Lapsed("no longer in the lock table (expired and removed by another process)")
    if not holder_valid(holder.expires_at, now, margin):
        return Lapsed(
            f"expired: server time may be {now.latest:.3f}, holder valid until "
            f"{holder.expires_at - margin:.3f}"
        )
    renewed = replace(holder, expires_at=max(holder.expires_at, now.latest + ttl))
    others = [h for h in live_holders(table, now, margin) if h.id != holder_id]
    return Granted(replace(table, holders=(*others, renewed)), renewed)


def release_holder(
    table: LockTable, holder_id: str, now: TimeBounds, *, margin: float
) -> LockTable | None:
    """The table without our holder (and without dead holders); ``None`` if ours is already
    gone, so there is nothing to write."""
    if table.find(holder_id) is None:
        return None
    kept = tuple(h for h in live_holders(table, now, margin) if h.id != holder_id)
    return replace(table, holders=kept)


def describe(holders: Iterable[Holder]) -> str:
    """Holders for an error message: owner, token and paths."""
    return "; ".join(
        f"{h.owner} token {h.token} read={sorted(h.read)} write={sorted(h.write)}" for h in holders
    )
