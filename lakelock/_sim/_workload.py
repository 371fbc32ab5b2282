"""What simulated writers commit: appends (most), overwrites of a partition, partition
deletes, removals of a file the writer added, restores of an older version, and commits
spanning two datasets; each commit an :class:`Invocation` the checker judges.

Data files are synthetic :class:`~lakelock._datafile.DataFile` records (the registry only
records them): their PUT is simulated (it costs a request and its bytes) but holds no parquet.
Commit ids are made from the writer's seeded generator, in the shape
:func:`~lakelock._registry._changes.new_commit_id` gives them (time first), or chosen by the
"caller" (``job-...``) for a share of commits.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from random import Random
from typing import Any

from lakelock._datafile import DataFile
from lakelock._layout import files_prefix
from lakelock._registry._changes import Change

__all__ = ["KINDS", "Invocation", "Mix", "Workload"]

PARTITION_BY = ("part",)
#: The kinds of commit a writer makes (the fields of :class:`Mix`).
KINDS = ("append", "overwrite", "delete", "remove", "restore", "multi")


@dataclass(frozen=True)
class Mix:
    """Relative weights of the kinds of commit a writer makes."""

    append: float = 0.80
    overwrite: float = 0.06
    delete: float = 0.03
    remove: float = 0.03
    restore: float = 0.02
    multi: float = 0.06

    def __post_init__(self) -> None:
        for name, weight in self.kinds():
            if not (weight >= 0 and math.isfinite(weight)):
                raise ValueError(f"the weight of {name!r} commits must be >= 0, got {weight!r}")
        if not any(weight > 0 for _, weight in self.kinds()):
            raise ValueError("a mix needs a kind of commit with a weight > 0")

    def kinds(self) -> tuple[tuple[str, float], ...]:
        return tuple((name, float(getattr(self, name))) for name in self.__dataclass_fields__)

    @classmethod
    def of(cls, weights: Iterable[tuple[str, float]]) -> Mix:
        """The mix of exactly ``weights`` (kind, weight): a kind not named has weight 0, so
        ``Mix.of([("append", 1)])`` is appends only (``lakelock simulate --mix append=1``).
        A kind named twice keeps its last weight."""
        chosen = dict(weights)
        unknown = sorted(set(chosen) - set(KINDS))
        if unknown:
            raise ValueError(f"unknown kind of commit {unknown[0]!r}: one of {', '.join(KINDS)}")
        return cls(**{name: float(chosen.get(name, 0.0)) for name in KINDS})

    def options(self) -> str:
        """This mix as ``lakelock simulate`` options (empty: the default mix)."""
        if self == Mix():
            return ""
        return " ".join(f"--mix {name}={weight:g}" for name, weight in self.kinds() if weight)


@dataclass
class Invocation:
    """One commit as its caller saw it. ``outcome``: ``ok`` (acknowledged at ``version``),
    ``fail`` (``CommitConflictError``: must not be applied), ``gaveup``
    (``RetryBudgetExhaustedError``: its intent cancelled, must not be applied), ``unknown``
    (``CommitStateUnknownError``: at most once), ``crash`` (any other exception: a defect),
    ``killed`` (its process died and no restart finished it), ``running`` (the run ended)."""

    id: str
    writer: int
    op: str
    changes: tuple[Change, ...]
    explicit: bool
    start: float
    end: float | None = None
    outcome: str = "running"
    version: int | None = None
    error: str | None = None
    restarts: int = 0
    already: bool = False
    batch: int = 1
    #: A restore's target: the registry version whose files it makes current again.
    restore_version: int | None = None
    data: tuple[tuple[str, bytes], ...] = field(default=(), repr=False)

    @property
    def datasets(self) -> tuple[str, ...]:
        return tuple(c.dataset for c in self.changes)


class Workload:
    """Builds one writer's next commit. ``known`` remembers the files this writer added and
    saw acknowledged, per dataset (what a removal names)."""

    def __init__(
        self,
        writer: int,
        rng: Random,
        *,
        datasets: int,
        partitions: int,
        files: int,
        file_bytes: int,
        mix: Mix,
        explicit_share: float = 0.2,
        restores: bool = True,
    ) -> None:
        self.writer = writer
        self.rng = rng
        self.names = [f"ds{n}" for n in range(max(1, datasets))]
        self.partitions = max(1, partitions)
        self.files = max(1, files)
        self.file_bytes = file_bytes
        kinds = mix.kinds()
        if len(self.names) < 2:
            kinds = tuple((k, w) for k, w in kinds if k != "multi")
        if not restores:
            kinds = tuple((k, w) for k, w in kinds if k != "restore")
        if not any(w > 0 for _, w in kinds):
            raise ValueError(
                "the mix names only commits this run cannot make (commits spanning datasets "
                "need 2 datasets; the toy protocol makes no restores)"
            )
        self.kinds = kinds
        self.explicit_share = explicit_share
        self.known: dict[str, list[str]] = {}
        self.count = 0

    def choose(self) -> str:
        total = sum(w for _, w in self.kinds)
        pick = self.rng.random() * total
        for kind, weight in self.kinds:
            pick -= weight
            if pick < 0:
                return kind
        return self.kinds[0][0]

    def commit_id(self, now: float) -> tuple[str, bool]:
        """A commit id and whether the caller chose it (``explicit``)."""
        self.count += 1
        if self.rng.random() < self.explicit_share:
            return f"job-{self.writer}-{self.count}", True
        ms = int(now * 1000) & 0xFFFFFFFFFFFF
        return f"{ms:012x}{self.rng.getrandbits(80):020x}", False

    def build(self, kind: str, now: float, start: float) -> Invocation:
        """The next commit of ``kind`` (restores are finished by the caller, who knows the
        versions: :meth:`restore`)."""
        commit_id, explicit = self.commit_id(now)
        dataset = self.rng.choice(self.names)
        path = f"part={self.rng.randrange(self.partitions)}"
        changes: list[Change]
        data: list[tuple[str, bytes]] = []
        if kind in {"append", "multi", "overwrite"}:
            targets = self.rng.sample(self.names, 2) if kind == "multi" else [dataset]
            changes = []
            for name in targets:
                added = self._files(name, path, commit_id, data)
                changes.append(
                    Change(
                        dataset=name,
                        commit_id=commit_id,
                        add=added,
                        partition_by=PARTITION_BY,
                        remove_partitions=(path,) if kind == "overwrite" else (),
                        operation="overwrite" if kind == "overwrite" else "append",
                        generated_id=not explicit,
                    )
                )
        elif kind == "delete":
            changes = [
                Change(
                    dataset=dataset,
                    commit_id=commit_id,
                    partition_by=PARTITION_BY,
                    remove_partitions=(path,),
                    operation="delete",
                    generated_id=not explicit,
                )
            ]
        elif kind == "remove":
            mine = self.known.get(dataset)
            if not mine:
                return self.build("append", now, start)
            key = mine.pop(self.rng.randrange(len(mine)))
            changes = [
                Change(
                    dataset=dataset,
                    commit_id=commit_id,
                    remove=(key,),
                    partition_by=PARTITION_BY,
                    operation="delete",
                    generated_id=not explicit,
                )
            ]
        else:
            raise ValueError(f"unknown commit kind {kind!r}")
        return Invocation(
            commit_id, self.writer, kind, tuple(changes), explicit, start, data=tuple(data)
        )

    def restore(
        self, now: float, start: float, dataset: str, state: Any, version: int, *, until: float
    ) -> Invocation:
        commit_id, explicit = self.commit_id(now)
        change = Change(
            dataset=dataset,
            commit_id=commit_id,
            restore=state,
            operation="restore",
            generated_id=not explicit,
            restore_until=until,
        )
        return Invocation(
            commit_id,
            self.writer,
            "restore",
            (change,),
            explicit,
            start,
            restore_version=version,
        )

    def acknowledged(self, invocation: Invocation) -> None:
        for change in invocation.changes:
            if change.add:
                self.known.setdefault(change.dataset, []).extend(f.key for f in change.add)

    def _files(
        self, dataset: str, path: str, commit_id: str, data: list[tuple[str, bytes]]
    ) -> tuple[DataFile, ...]:
        files = []
        for n in range(self.files):
            key = f"{files_prefix(dataset, path)}{commit_id}-{n}.parquet"
            body = (key.encode() * (1 + self.file_bytes // max(1, len(key))))[: self.file_bytes]
            data.append((key, body))
            files.append(
                DataFile(
                    dataset=dataset,
                    key=key,
                    partition_path=path,
                    size=len(body),
                    record_count=1 + self.rng.randrange(1000),
                    checksum=f"sha256:{self.rng.getrandbits(256):064x}",
                    etag=f'"{self.rng.getrandbits(128):032x}"',
                    write_id=f"{self.rng.getrandbits(64):016x}",
                )
            )
        return tuple(files)
