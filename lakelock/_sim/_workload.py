"""What simulated writers commit: the public API as pipelines use it, each commit an
:class:`Invocation` the checker's model judges (:mod:`._check`).

The kinds (:data:`KINDS`, weighted by a :class:`Mix`):

=============  =================================================================================
``append``     new files into one partition (``Lake.append``)
``overwrite``  new files replacing a partition (``Lake.overwrite``)
``delete``     a partition removed (``Lake.delete``)
``remove``     a file the writer added removed (``registry.commit(remove=...)``)
``restore``    an older version made current again (``Lake.restore``)
``multi``      new files into two datasets in one commit (``registry.commit_changes``)
``compact``    a partition's files replaced by one file (``Lake.compact``: removes exactly the
               files it read)
``rename``     a partition moved to another partition of its dataset under a path lock
               (``Lake.rename_partition``: the copies added, the originals removed)
``copy``       a partition copied to another dataset under a path lock (``Lake.copy_partition``)
``properties`` properties set and removed (``Lake.set_properties``)
``register``   ``registry.commit(add=files)`` of files written earlier — a third of the time
               files this writer registered already, again under a new id
``schema``     an append that merges a column into the schema (``schema_mode="merge"``); half
               of them give the column another type than other writers do (one of the two
               is refused: ``SchemaMismatchError``)
``lease``      an append fenced by a lease (``Lease.fence``): a writer takes the lease over
               (token one higher), which is first a ``takeover`` commit of its own (as
               ``Lake.lease`` records it before handing the token out), or keeps
               committing with the token it holds, as a leader paused past its TTL does
               when it comes back
``lock``       an overwrite fenced by a path-lock grant on its partition: a new grant, or the
               one the writer held before (a holder paused and coming back)
``rerun``      one of the writer's earlier commits run again with its commit id: the same
               rows (a retry), other rows (``CommitIdReusedError``), or its oldest id (older
               than the idempotency window)
``collide``    a commit whose caller-chosen id another pipeline chooses too (two pipelines
               colliding on one id, each with its own dataset and rows)
``empty``      a commit of nothing under a caller-chosen id: an empty ``Lake.append`` (no
               rows), or ``registry.commit`` of no files (a cluster job whose workers found
               no rows); a ``rerun`` of it has the rows
``named``      an append under a caller-chosen id whose files have a caller-given
               ``file_name``: a ``rerun`` of it with the same rows writes the same keys with
               the same bytes (the upload its earlier run, perhaps refused, left there)
``spelt``      a ``lease`` whose name has an accent, spelt composed (NFC) or decomposed (NFD)
               at random: one lease however it is spelt
``typed``      ``registry.commit(add=files)`` of a worker's files that carry the schema they
               were written with (:data:`WORKER_SCHEMAS`): the dataset's columns, a narrower
               type, a type the dataset's cannot hold, or a column the dataset may lack;
               half of them with ``schema_mode="merge"``
``accented``   an append under a caller-chosen id with an accent (NFC); a ``rerun`` of it
               spells the id decomposed (NFD) half the time: refused before anything is
               written (``InvalidArgumentError``), never its rows a second time
``readlock``   an append under the fence of a path-lock grant that only reads its path:
               refused before anything is written (``InvalidArgumentError``), a read's fence
               fencing no write
``nested``     a ``typed`` commit of files holding a struct of one field or of two
               (:data:`NESTED_SCHEMAS`): a field the dataset's struct lacks is refused
``regroup``    ``registry.commit_changes`` of changes without a digest under a caller-chosen
               id, into one dataset or two; half of them one of those commits run again
               under its id spanning a dataset more or fewer (``CommitIdReusedError``,
               whichever dataset it names first)
=============  =================================================================================

The last eight are off in the default mix (``Mix``'s weight 0: the default run's draws,
and so its figures, stay as they were); the seed sweep turns on all but ``regroup``.

Data files are synthetic :class:`~lakelock._datafile.DataFile` records (the registry only
records them): their PUT is simulated (it costs a request and its bytes) but holds no parquet.
Commit ids are made from the writer's seeded generator by
:func:`~lakelock._registry._changes.new_commit_id`, as the registry makes them (time first),
or chosen by the "caller" (``job-...``) for a share of commits. Each change carries a digest
of what it commits, as the ``Lake``'s operations do (:mod:`lakelock._digest`): rows are not
simulated, so a digest stands for them (the same rows, the same digest; a ``registry.commit`` gets
:func:`~lakelock._registry._builder.summary_digest` of its files, as the registry makes it).

What an operation reads before it commits (the files of a partition to compact or move, a
version to restore) is read from the bucket at no cost, as the checker reads it: the
simulator sizes and checks the commit, not the read. The lease's and the path lock's own
protocols (their objects in the bucket) are not simulated: the tokens they hand out are
(each takeover or conflicting grant one higher), and the registry's fencing is what the
model checks. A lease taken over is recorded in the registry before its token is used, as
``Lake.lease`` does (FORMAT.md, "Lease takeovers"): a ``takeover`` invocation (the change
:func:`~lakelock._registry._changes.takeover` builds, naming no dataset) made first, and the
fenced append only once it is acknowledged (:meth:`Workload.then`); a takeover refused,
given up or unknown leaves the lease not acquired (the token dropped, no append).
"""

from __future__ import annotations

import hashlib
import math
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from random import Random
from typing import Any

import pyarrow as pa

from lakelock._datafile import DataFile
from lakelock._fence import Fence
from lakelock._layout import files_prefix
from lakelock._registry._builder import summary_digest
from lakelock._registry._changes import Change, SchemaMode, new_commit_id, takeover

__all__ = ["KINDS", "Invocation", "Mix", "Shared", "Workload"]

PARTITION_BY = ("part",)
#: The kinds of commit a writer makes (the fields of :class:`Mix`).
KINDS = (
    "append",
    "overwrite",
    "delete",
    "remove",
    "restore",
    "multi",
    "compact",
    "rename",
    "copy",
    "properties",
    "register",
    "schema",
    "lease",
    "lock",
    "rerun",
    "collide",
    "empty",
    "named",
    "spelt",
    "typed",
    "accented",
    "readlock",
    "nested",
    "regroup",
)
#: The kinds whose commit appends files to one dataset's partition (two datasets': ``multi``),
#: replacing it for an ``overwrite`` and a ``lock``, carrying a fence for some.
_APPENDS = frozenset(
    {"append", "multi", "overwrite", "schema", "lease", "spelt", "lock", "collide", "readlock"}
)
#: The kinds a protocol without the registry's full API (the toy) can make.
BASIC_KINDS = ("append", "overwrite", "delete", "remove", "multi")
#: How long a caller-chosen id that pipelines collide on is chosen for (virtual seconds):
#: writers making a ``collide`` commit within one such slot choose the same id.
COLLIDE_SLOT = 0.25
#: The column ``schema`` commits merge, and the types they give it (the second refused
#: wherever the first is in the dataset's schema, and the other way round).
MERGED_COLUMN = "extra"
MERGED_TYPES = (pa.int64(), pa.string())
#: The name of the ``spelt`` kind's lease (after ``lease:``), in NFC: it has a letter with an
#: accent, which its writers spell composed or decomposed.
SPELT_LEASE = unicodedata.normalize("NFC", "élu")
#: What the ``accented`` kind's caller-chosen ids begin with, in NFC: a letter with an accent.
ACCENTED_ID = unicodedata.normalize("NFC", "tâche")
#: The schemas the workers of ``typed`` commits write their files with (partitioned by
#: ``part``, read from the path): the columns a typed dataset first gets, ``id`` narrower
#: (held), ``id`` as a string (held by no dataset whose ``id`` is a number), and the column
#: ``schema`` commits merge (:data:`MERGED_COLUMN`) in each of its two types.
WORKER_SCHEMAS = (
    pa.schema([("part", pa.int64()), ("id", pa.int64())]),
    pa.schema([("part", pa.int64()), ("id", pa.int32())]),
    pa.schema([("part", pa.int64()), ("id", pa.string())]),
    *(
        pa.schema([("part", pa.int64()), ("id", pa.int64()), (MERGED_COLUMN, t)])
        for t in MERGED_TYPES
    ),
)
#: The schemas the workers of ``nested`` commits write their files with: a struct column
#: (``nest``) of one field or of two. A dataset that merged the first holds no file of the
#: second: a read casts a struct by field name, and would drop the field it lacks.
NESTED_SCHEMAS = tuple(
    pa.schema(
        [
            ("part", pa.int64()),
            ("id", pa.int64()),
            ("nest", pa.struct([(name, pa.int64()) for name in names])),
        ]
    )
    for names in (["a"], ["a", "b"])
)


@dataclass(frozen=True)
class Mix:
    """Relative weights of the kinds of commit a writer makes."""

    append: float = 0.80
    overwrite: float = 0.06
    delete: float = 0.03
    remove: float = 0.03
    restore: float = 0.02
    multi: float = 0.06
    compact: float = 0.02
    rename: float = 0.02
    copy: float = 0.01
    properties: float = 0.02
    register: float = 0.03
    schema: float = 0.02
    lease: float = 0.04
    lock: float = 0.03
    rerun: float = 0.03
    collide: float = 0.02
    empty: float = 0.0
    named: float = 0.0
    spelt: float = 0.0
    typed: float = 0.0
    accented: float = 0.0
    readlock: float = 0.0
    nested: float = 0.0
    regroup: float = 0.0

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
    ``killed`` (its process died and no restart finished it), ``running`` (the run ended).
    ``error_type``: the class of the error it raised; ``expected``: the typed error a
    refusal of this commit must be (``None``: any ``CommitConflictError``)."""

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
    error_type: str | None = None
    restarts: int = 0
    already: bool = False
    batch: int = 1
    #: A restore's target: the registry version whose files it makes current again.
    restore_version: int | None = None
    expected: str | None = None
    #: The intents its killed runs sent (they may land, and be applied, after the kill).
    killed_intents: tuple[str, ...] = ()
    #: The invocation this one runs again after its process was killed (other rows).
    rerun_of: Invocation | None = field(default=None, repr=False)
    data: tuple[tuple[str, bytes], ...] = field(default=(), repr=False)
    #: What a copy or rename copies: the keys of the files it read (a copy of each is made
    #: as its data PUT lands; one gone by then refuses it, :func:`._ops.copy_refused`).
    sources: tuple[str, ...] = ()
    #: Acknowledged with nothing committed (``CommitResult.empty``: no version made).
    empty: bool = False
    #: Its files named by the caller (``file_name``): each key and the bytes this call
    #: uploads there (kept after the PUT: the checker compares re-runs' uploads).
    uploads: tuple[tuple[str, bytes], ...] = field(default=(), repr=False)

    @property
    def datasets(self) -> tuple[str, ...]:
        return tuple(c.dataset for c in self.changes)


@dataclass
class Shared:
    """What the writers of a run share: the tokens the leases and path locks have handed
    out (the highest per lease name, per lock table), and how a writer reads the files of a
    partition (at no cost: :mod:`._workload`)."""

    files_of: Callable[[str, str], Sequence[DataFile] | None] = lambda _d, _p: None
    exists: Callable[[str], bool] = lambda _d: False
    leases: dict[str, int] = field(default_factory=dict)
    grants: dict[str, int] = field(default_factory=dict)


class Workload:
    """Builds one writer's next commit. ``known`` remembers the files this writer added and
    saw acknowledged, per dataset (what a removal names); ``registered`` the files it
    registered with ``registry.commit`` (what it registers again); ``mine`` its commits with
    caller-chosen ids (what it re-runs); ``lease`` and ``grants`` the tokens it holds."""

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
        full_api: bool = True,
        shared: Shared | None = None,
    ) -> None:
        self.writer = writer
        self.rng = rng
        self.names = [f"ds{n}" for n in range(max(1, datasets))]
        self.partitions = max(1, partitions)
        self.files = max(1, files)
        self.file_bytes = file_bytes
        kinds = mix.kinds()
        if len(self.names) < 2:
            kinds = tuple((k, w) for k, w in kinds if k not in ("multi", "copy", "regroup"))
        if not restores:
            kinds = tuple((k, w) for k, w in kinds if k != "restore")
        if not full_api:
            kinds = tuple((k, w) for k, w in kinds if k in BASIC_KINDS)
        if not any(w > 0 for _, w in kinds):
            raise ValueError(
                "the mix names only commits this run cannot make (commits spanning datasets "
                "need 2 datasets; the toy protocol makes only "
                f"{', '.join(BASIC_KINDS)})"
            )
        self.kinds = kinds
        self.explicit_share = explicit_share
        self.shared = shared or Shared()
        self.known: dict[str, list[str]] = {}
        self.registered: dict[str, list[DataFile]] = {}
        self.mine: list[Invocation] = []
        #: Its ``regroup`` commits made under ids of their own (what a ``regroup`` re-runs).
        self.regrouped: list[Invocation] = []
        self.lease: dict[str, int] = {}
        self.grants: dict[tuple[str, str], int] = {}
        self.count = 0
        #: The fenced append a ``takeover`` invocation is made for (:meth:`then`).
        self.taking: tuple[Invocation, Invocation] | None = None
        #: Whether the last lease fence was taken over (a new token) rather than held.
        self.taken = False

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
        return self.generated_id(now), False

    def generated_id(self, now: float) -> str:
        """An id as the registry generates one, from the workload's seeded randomness."""
        return new_commit_id(now, token=f"{self.rng.getrandbits(80):020x}")

    def digest(self) -> str:
        """A digest standing for the rows of one commit (other rows, another digest)."""
        return f"sha256:{self.rng.getrandbits(256):064x}"

    def build(self, kind: str, now: float, start: float) -> Invocation | None:
        """The next commit of ``kind`` (restores are finished by the caller, who knows the
        versions: :meth:`restore`); ``None``: nothing to commit (a partition to compact or
        move holds no files)."""
        if kind in ("compact", "rename", "copy"):
            return self._from_files(kind, now, start)
        made = {
            "register": self._register,
            "rerun": self._rerun,
            "empty": self._empty,
            "named": self._named,
            "typed": self._typed,
            "nested": self._nested,
            "accented": self._accented,
            "regroup": self._regroup,
        }.get(kind)
        if made is not None:
            return made(now, start)
        commit_id, explicit = self.commit_id(now)
        if kind == "collide":
            commit_id, explicit = f"job-shared-{int(start / COLLIDE_SLOT)}", True
        dataset = self.rng.choice(self.names)
        path = f"part={self.rng.randrange(self.partitions)}"
        if kind == "lock":
            path = "part=0"  # the partition pipelines take turns on, under its lock
        changes: list[Change]
        data: list[tuple[str, bytes]] = []
        expected = None
        if kind in _APPENDS:
            targets = self.rng.sample(self.names, 2) if kind == "multi" else [dataset]
            changes = []
            # One digest for the whole commit, as an operation spanning datasets makes one
            # (a rename's or copy's): the root records it for the commit.
            digest = self.digest()
            for name in targets:
                added = self._files(name, path, commit_id, data)
                changes.append(
                    Change(
                        dataset=name,
                        commit_id=commit_id,
                        add=added,
                        partition_by=PARTITION_BY,
                        remove_partitions=(path,) if kind in ("overwrite", "lock") else (),
                        operation="overwrite" if kind in ("overwrite", "lock") else "append",
                        generated_id=not explicit,
                        digest=digest,
                    )
                )
            if kind == "schema":
                kind_of = self.rng.choice(MERGED_TYPES)
                schema = pa.schema([pa.field(MERGED_COLUMN, kind_of, nullable=True)])
                changes = [replace(changes[0], schema=schema, schema_mode="merge")]
                expected = "SchemaMismatchError"
            else:
                changes, expected = self._fenced(kind, dataset, path, changes)
        elif kind == "delete":
            changes = [
                Change(
                    dataset=dataset,
                    commit_id=commit_id,
                    partition_by=PARTITION_BY,
                    remove_partitions=(path,),
                    operation="delete",
                    generated_id=not explicit,
                    digest=self.digest(),
                )
            ]
        elif kind == "properties":
            if not self.shared.exists(dataset):  # Lake.set_properties needs the dataset
                return self.build("append", now, start)
            n = self.rng.randrange(3)
            properties: dict[str, str | None] = {f"p{n}": f"{self.writer}-{self.count}"}
            if self.rng.random() < 0.3:
                properties[f"p{(n + 1) % 3}"] = None
            changes = [
                Change(
                    dataset=dataset,
                    commit_id=commit_id,
                    properties=properties,
                    operation="properties",
                    generated_id=not explicit,
                    digest=self.digest(),
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
                    digest=self.digest(),
                )
            ]
        else:
            raise ValueError(f"unknown commit kind {kind!r}")
        invocation = Invocation(
            commit_id,
            self.writer,
            kind,
            tuple(changes),
            explicit,
            start,
            data=tuple(data),
            expected=expected,
        )
        if explicit and kind != "collide":
            self.mine.append(invocation)
        return self._leased(invocation, now, start) if kind in ("lease", "spelt") else invocation

    def made(self, now: float, start: float) -> Invocation:
        """The commit that makes the lake before a quiet start: a file into one partition of
        every dataset, in one commit (the tables a pipeline's owner made and filled once)."""
        commit_id = self.generated_id(now)
        digest = self.digest()
        data: list[tuple[str, bytes]] = []
        changes = tuple(
            Change(
                dataset=name,
                commit_id=commit_id,
                add=self._files(name, "part=0", commit_id, data),
                partition_by=PARTITION_BY,
                operation="append",
                generated_id=True,
                digest=digest,
            )
            for name in self.names
        )
        kind = "multi" if len(changes) > 1 else "append"
        return Invocation(commit_id, self.writer, kind, changes, False, start, data=tuple(data))

    def then(self, invocation: Invocation) -> Invocation | None:
        """What the writer commits next after ``invocation`` before choosing again: after a
        ``takeover`` acknowledged, the fenced append it was made for (its start the
        takeover's end); after one refused, given up or unknown, nothing (the lease is not
        acquired: FORMAT.md, "Lease takeovers"), and the token is dropped."""
        taking, self.taking = self.taking, None
        if taking is None or taking[0] is not invocation:
            return None
        made, fenced = taking
        if made.outcome != "ok":
            for change in made.changes:
                if change.fence is not None:
                    self.lease.pop(_nfc(change.fence.name), None)
            return None
        fenced.start = made.end if made.end is not None else fenced.start
        return fenced

    def _leased(self, fenced: Invocation, now: float, start: float) -> Invocation:
        """``fenced``, or first the commit that records the lease it carries the token of
        when that token was taken over just now (before the token is used: the registry
        makes its id, generated)."""
        fence = fenced.changes[0].fence
        assert fence is not None
        if not self.taken:
            return fenced
        commit_id = self.generated_id(now)
        made = Invocation(
            commit_id,
            self.writer,
            "takeover",
            (takeover(fence, commit_id),),
            False,
            start,
            expected="StaleFenceError",
        )
        self.taking = (made, fenced)
        return made

    def restore(
        self,
        now: float,
        start: float,
        dataset: str,
        state: Any,
        version: int,
        *,
        until: float,
        since: float,
    ) -> Invocation:
        commit_id, explicit = self.commit_id(now)
        change = Change(
            dataset=dataset,
            commit_id=commit_id,
            restore=state,
            operation="restore",
            generated_id=not explicit,
            restore_until=until,
            restore_since=since,
            digest=self.digest(),
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
            if change.add and invocation.op != "register":
                self.known.setdefault(change.dataset, []).extend(f.key for f in change.add)
            if change.add and invocation.op == "register":
                self.registered.setdefault(change.dataset, []).extend(change.add)

    def refused(self, invocation: Invocation, error_type: str) -> None:
        """A fenced commit refused as stale: its writer steps down (takes a new grant or
        the lease over before its next fenced commit)."""
        if error_type != "StaleFenceError":
            return
        for change in invocation.changes:
            if change.fence is None:
                continue
            if change.fence.hierarchical:
                for path in change.remove_partitions:
                    self.grants.pop((change.dataset, path), None)
            else:
                self.lease.pop(_nfc(change.fence.name), None)

    def again(self, invocation: Invocation, now: float) -> Invocation:
        """``invocation`` run again after its process was killed with other rows: the same
        commit id, another change (new files, another digest)."""
        data: list[tuple[str, bytes]] = []
        changes = []
        digest = self.digest()
        for change in invocation.changes:
            if not change.add:
                changes.append(replace(change, digest=digest, generated_id=False))
                continue
            path = change.add[0].partition_path
            name = f"{invocation.id}-r{invocation.restarts}"
            added = self._files(change.dataset, path, name, data)
            changes.append(replace(change, add=added, digest=digest, generated_id=False))
        return replace(
            invocation,
            changes=tuple(changes),
            data=tuple(data),
            explicit=True,
            start=now,
            restarts=0,
            outcome="running",
            rerun_of=invocation,
            expected=None,
        )

    # -- the kinds that read before they commit -------------------------------------------

    def _from_files(self, kind: str, now: float, start: float) -> Invocation | None:
        dataset = self.rng.choice(self.names)
        part = self.rng.randrange(self.partitions)
        path = f"part={part}"
        files = self.shared.files_of(dataset, path)
        if not files:
            return self.build("append", now, start)
        commit_id, explicit = self.commit_id(now)
        data: list[tuple[str, bytes]] = []
        keys = tuple(f.key for f in files)
        if kind == "compact":
            merged = self._files(dataset, path, commit_id, data, count=1)
            changes: tuple[Change, ...] = (
                Change(
                    dataset=dataset,
                    commit_id=commit_id,
                    add=merged,
                    remove=keys,
                    partition_by=PARTITION_BY,
                    operation="compact",
                    generated_id=not explicit,
                    digest=self.digest(),
                ),
            )
        else:
            to = (
                self.rng.choice([n for n in self.names if n != dataset])
                if kind == "copy"
                else dataset
            )
            to_path = f"part={self.partitions + self.rng.randrange(self.partitions)}"
            if kind == "rename":
                fence = self._grant(dataset, path, also=to_path)
            else:
                fence = self._grant(dataset, path, read=True)
            copies = tuple(
                replace(
                    f,
                    dataset=to,
                    key=f"{files_prefix(to, to_path)}{commit_id}-{n}.parquet",
                    partition_path=to_path,
                )
                for n, f in enumerate(files)
            )
            data += [(f.key, f.key.encode()) for f in copies]
            digest = self.digest()
            operation = "rename" if kind == "rename" else "copy"
            if kind == "rename":
                changes = (
                    Change(
                        dataset=to,
                        commit_id=commit_id,
                        add=copies,
                        remove=keys,
                        partition_by=PARTITION_BY,
                        fence=fence,
                        operation=operation,
                        generated_id=not explicit,
                        digest=digest,
                    ),
                )
            else:
                target_fence = Fence(f"lock:{to}", self._token(to), write=(f"/{to}/{to_path}",))
                changes = (
                    Change(
                        dataset=to,
                        commit_id=commit_id,
                        add=copies,
                        partition_by=PARTITION_BY,
                        fence=target_fence,
                        operation=operation,
                        generated_id=not explicit,
                        digest=digest,
                    ),
                    Change(
                        dataset=dataset,
                        commit_id=commit_id,
                        fence=fence,
                        operation=operation,
                        generated_id=not explicit,
                        digest=digest,
                    ),
                )
        copied = () if kind == "compact" else keys
        return Invocation(
            commit_id, self.writer, kind, changes, explicit, start, data=tuple(data), sources=copied
        )

    def _register(self, now: float, start: float) -> Invocation:
        """``registry.commit(add=files)`` of files written earlier: new ones (their PUT
        first), or a third of the time files this writer registered already, again."""
        commit_id, explicit = self.commit_id(now)
        dataset = self.rng.choice(self.names)
        data: list[tuple[str, bytes]] = []
        before = self.registered.get(dataset)
        added: tuple[DataFile, ...]
        if before and self.rng.random() < 1 / 3:
            # As a pipeline has them from the registry (``registry.files``): without the
            # write time only the writing process knew.
            added = (replace(self.rng.choice(before), written_at=None),)
        else:
            path = f"part={self.rng.randrange(self.partitions)}"
            added = self._files(dataset, path, commit_id, data)
        change = _registered(dataset, commit_id, added, explicit=explicit)
        return Invocation(
            commit_id, self.writer, "register", (change,), explicit, start, data=tuple(data)
        )

    def _rerun(self, now: float, start: float) -> Invocation | None:
        """One of this writer's commits with caller-chosen ids run again: the same rows (a
        retry: new files, the same digest), other rows (another digest), or its oldest (an
        id perhaps older than the window)."""
        if not self.mine:
            return self.build("append", now, start)
        pick = self.rng.random()
        earlier = self.mine[0] if pick < 0.2 else self.rng.choice(self.mine)
        same = self.rng.random() < 0.5
        data: list[tuple[str, bytes]] = []
        changes = []
        other = self.digest()
        if earlier.op == "empty":
            return self._with_rows(earlier, other, start)
        if earlier.op == "named":
            return self._named_again(earlier, same, other, start)
        commit_id, expected = earlier.id, None
        if earlier.op == "accented" and self.rng.random() < 0.5:
            # The job's id read back decomposed (a file name on macOS): refused.
            commit_id, expected = unicodedata.normalize("NFD", earlier.id), "InvalidArgumentError"
        for change in earlier.changes:
            digest = change.digest if same else other
            if earlier.op == "typed":
                # The workers' files committed again, the caller declaring no schema.
                changes.append(replace(change, digest=digest, schema=None))
            elif change.add and earlier.op != "register":
                path = change.add[0].partition_path
                added = self._files(change.dataset, path, f"{earlier.id}-{self.count}", data)
                changes.append(replace(change, add=added, digest=digest, commit_id=commit_id))
            else:
                changes.append(replace(change, digest=digest, commit_id=commit_id))
            self.count += 1
        return Invocation(
            commit_id,
            self.writer,
            "rerun",
            tuple(changes),
            True,
            start,
            data=tuple(data),
            restore_version=earlier.restore_version,
            expected=expected,
        )

    def _regroup(self, now: float, start: float) -> Invocation:
        """``registry.commit_changes`` of changes made by hand, without a digest, under a
        caller-chosen id, into one dataset or two; or, half the time once this writer made
        one, one of those commits run again under its id, new files, spanning a dataset more
        or fewer, its datasets in either order: another change (FORMAT.md, "Commit ids":
        ``CommitIdReusedError``). Past the root's window a re-run of fewer datasets is not
        told from its commit's retry (the commit-id index names no dataset), so a run of
        this kind that should hold keeps its commits within the window."""
        again = bool(self.regrouped) and self.rng.random() < 0.5
        self.count += 1
        if again:
            earlier = self.rng.choice(self.regrouped)
            commit_id, names = earlier.id, list(earlier.datasets)
            if len(names) > 1:
                names.remove(self.rng.choice(names))
            else:
                names.append(self.rng.choice([n for n in self.names if n not in names]))
            self.rng.shuffle(names)
        else:
            commit_id = f"job-{self.writer}-{self.count}"
            names = self.rng.sample(self.names, self.rng.choice((1, 2)))
        path = f"part={self.rng.randrange(self.partitions)}"
        data: list[tuple[str, bytes]] = []
        changes = tuple(
            Change(
                dataset=name,
                commit_id=commit_id,
                add=self._files(name, path, f"{commit_id}-{self.count}", data),
                partition_by=PARTITION_BY,
                operation="append",
                generated_id=False,
            )
            for name in names
        )
        invocation = Invocation(
            commit_id, self.writer, "regroup", changes, True, start, data=tuple(data)
        )
        if not again:
            self.regrouped.append(invocation)
        return invocation

    def _nested(self, now: float, start: float) -> Invocation:
        """A ``typed`` commit of files written with one of :data:`NESTED_SCHEMAS`."""
        return self._typed(now, start, NESTED_SCHEMAS)

    def _typed(
        self, now: float, start: float, schemas: Sequence[pa.Schema] = WORKER_SCHEMAS
    ) -> Invocation:
        """``registry.commit(add=files)`` of a worker's files written with one of
        :data:`WORKER_SCHEMAS` (``DataFile.schema``, as ``write`` returns them), half of them
        with ``schema_mode="merge"``: judged as ``CommitBuilder`` judges them
        (:func:`._ops.files_fit`), accepted or refused with nothing committed."""
        commit_id, explicit = self.commit_id(now)
        dataset = self.rng.choice(self.names)
        path = f"part={self.rng.randrange(self.partitions)}"
        schema = self.rng.choice(schemas)
        data: list[tuple[str, bytes]] = []
        added = tuple(
            replace(f, schema=schema) for f in self._files(dataset, path, commit_id, data)
        )
        merge = self.rng.random() < 0.5
        change = _registered(
            dataset, commit_id, added, explicit=explicit, schema_mode="merge" if merge else None
        )
        invocation = Invocation(
            commit_id,
            self.writer,
            "typed",
            (change,),
            explicit,
            start,
            data=tuple(data),
            expected="SchemaMismatchError",
        )
        if explicit:
            self.mine.append(invocation)
        return invocation

    def _accented(self, now: float, start: float) -> Invocation:
        """An append under a caller-chosen id with an accent, in NFC (:data:`ACCENTED_ID`):
        a ``rerun`` of it may spell the id decomposed."""
        self.count += 1
        commit_id = f"{ACCENTED_ID}-{self.writer}-{self.count}"
        dataset = self.rng.choice(self.names)
        path = f"part={self.rng.randrange(self.partitions)}"
        data: list[tuple[str, bytes]] = []
        change = Change(
            dataset=dataset,
            commit_id=commit_id,
            add=self._files(dataset, path, f"accented-{self.writer}-{self.count}", data),
            partition_by=PARTITION_BY,
            operation="append",
            generated_id=False,
            digest=self.digest(),
        )
        invocation = Invocation(
            commit_id, self.writer, "accented", (change,), True, start, data=tuple(data)
        )
        self.mine.append(invocation)
        return invocation

    def _empty(self, now: float, start: float) -> Invocation:
        """A commit of nothing under a caller-chosen id: half the time an empty
        ``Lake.append`` (its partition columns given), else ``registry.commit`` of no files
        (nothing declared: a cluster job whose workers found no rows). A ``rerun`` of it has
        the rows (:meth:`_with_rows`)."""
        self.count += 1
        commit_id = f"job-{self.writer}-{self.count}"
        dataset = self.rng.choice(self.names)
        change = Change(dataset=dataset, commit_id=commit_id, generated_id=False)
        if self.rng.random() < 0.5:
            change = replace(
                change, partition_by=PARTITION_BY, operation="append", digest=self.digest()
            )
        else:
            change = replace(change, operation="commit")
            change = replace(change, digest=summary_digest(change))
        invocation = Invocation(commit_id, self.writer, "empty", (change,), True, start)
        self.mine.append(invocation)
        return invocation

    def _with_rows(self, earlier: Invocation, digest: str, start: float) -> Invocation:
        """``earlier``, a commit of nothing, run again under its id once the rows are there:
        an append of them, or ``registry.commit`` of the files the workers wrote."""
        data: list[tuple[str, bytes]] = []
        change = earlier.changes[0]
        path = f"part={self.rng.randrange(self.partitions)}"
        added = self._files(change.dataset, path, f"{earlier.id}-{self.count}", data)
        rows = replace(change, add=added, partition_by=PARTITION_BY, digest=digest)
        if change.operation == "commit":
            rows = replace(rows, existing_files=True)
            rows = replace(rows, digest=summary_digest(rows))
        return Invocation(earlier.id, self.writer, "rerun", (rows,), True, start, data=tuple(data))

    def _named(self, now: float, start: float) -> Invocation:
        """An append under a caller-chosen id whose file has a caller-given name
        (``file_name``): its key is the job's, whatever run writes it."""
        self.count += 1
        commit_id = f"job-{self.writer}-{self.count}"
        dataset = self.rng.choice(self.names)
        path = f"part={self.rng.randrange(self.partitions)}"
        digest = self.digest()
        key = f"{files_prefix(dataset, path)}load-{self.writer}-{self.count}.parquet"
        added, data = self._named_file(dataset, path, key, digest)
        change = Change(
            dataset=dataset,
            commit_id=commit_id,
            add=added,
            partition_by=PARTITION_BY,
            operation="append",
            generated_id=False,
            digest=digest,
        )
        invocation = Invocation(
            commit_id, self.writer, "named", (change,), True, start, data=data, uploads=data
        )
        self.mine.append(invocation)
        return invocation

    def _named_again(
        self, earlier: Invocation, same: bool, digest: str, start: float
    ) -> Invocation:
        """``earlier``, an append with a caller-given file name, run again under its id:
        the same rows are the same bytes at the same key (its upload, which a refused or
        killed earlier run may have left there); other rows, other bytes at that key."""
        change = earlier.changes[0]
        if same:
            added = tuple(replace(f, written_at=None) for f in change.add)
            data = earlier.uploads
            digest = change.digest or digest
        else:
            key = change.add[0].key
            added, data = self._named_file(
                change.dataset, change.add[0].partition_path, key, digest
            )
        again = replace(change, add=added, digest=digest, existing_files=False)
        return Invocation(
            earlier.id, self.writer, "rerun", (again,), True, start, data=data, uploads=data
        )

    def _named_file(
        self, dataset: str, path: str, key: str, digest: str
    ) -> tuple[tuple[DataFile, ...], tuple[tuple[str, bytes], ...]]:
        """The file at ``key`` holding the rows ``digest`` stands for: its bytes are those
        rows' (the same rows, the same bytes), and its checksum theirs."""
        stem = f"{digest}|{key}".encode()
        body = (stem * (1 + self.file_bytes // len(stem)))[: max(self.file_bytes, len(stem))]
        written = DataFile(
            dataset=dataset,
            key=key,
            partition_path=path,
            size=len(body),
            record_count=1 + self.rng.randrange(1000),
            checksum=f"sha256:{hashlib.sha256(body).hexdigest()}",
            etag=f'"{hashlib.md5(body).hexdigest()}"',  # S3's ETag of a PUT
            write_id=f"{self.rng.getrandbits(64):016x}",
        )
        return (written,), ((key, body),)

    # -- fences ---------------------------------------------------------------------------

    def _fenced(
        self, kind: str, dataset: str, path: str, changes: list[Change]
    ) -> tuple[list[Change], str | None]:
        """``changes`` as a ``lease``, ``spelt``, ``lock`` or ``readlock`` commit makes them,
        carrying its fence, and the refusal it may meet: a stale fence, or (``readlock``: a
        grant that only reads the path it writes) a fence that fences no write. Other kinds'
        as they are."""
        if kind in ("lease", "spelt"):
            fence = self._lease(dataset, spelt=kind == "spelt")
        elif kind in ("lock", "readlock"):
            fence = self._grant(dataset, path, read=kind == "readlock")
        else:
            return changes, None
        expected = "InvalidArgumentError" if kind == "readlock" else "StaleFenceError"
        return [replace(changes[0], fence=fence)], expected

    def _lease(self, dataset: str, *, spelt: bool = False) -> Fence:
        """The fence of the lease over ``dataset``'s pipeline (named as ``Lake.lease``
        names it): the token this writer holds (half the time, if it holds one: a leader
        that may have been paused past its TTL and superseded), else the lease taken over
        (one higher than any handed out; :attr:`taken`). ``spelt``: the lease whose name
        has an accent, spelt composed or decomposed at random — one lease, whose tokens
        the lease's own protocol hands out under its NFC name (FORMAT.md, "Names")."""
        name = f"lease:{SPELT_LEASE if spelt else 'leader'}-{dataset}"
        held = self.lease.get(name)
        self.taken = held is None or self.rng.random() < 0.5
        if held is None or self.taken:
            held = self.shared.leases[name] = self.shared.leases.get(name, 0) + 1
            self.lease[name] = held
        if spelt and self.rng.random() < 0.5:
            name = unicodedata.normalize("NFD", name)
        return Fence(name, held)

    def _token(self, dataset: str) -> int:
        token = self.shared.grants[dataset] = self.shared.grants.get(dataset, 0) + 1
        return token

    def _grant(
        self, dataset: str, path: str, *, also: str | None = None, read: bool = False
    ) -> Fence:
        """A path-lock grant on ``dataset``'s table writing ``path`` (and ``also``; reading
        it, ``read``): the one this writer held for it before (half the time: a holder
        paused and coming back, superseded if another grant came since), else a new one."""
        held = self.grants.get((dataset, path))
        if held is None or also is not None or read or self.rng.random() < 0.5:
            held = self._token(dataset)
            if also is None and not read:
                self.grants[(dataset, path)] = held
        paths = tuple(sorted({f"/{dataset}/{path}"} | ({f"/{dataset}/{also}"} if also else set())))
        if read:
            return Fence(f"lock:{dataset}", held, read=paths)
        return Fence(f"lock:{dataset}", held, write=paths)

    def _files(
        self,
        dataset: str,
        path: str,
        commit_id: str,
        data: list[tuple[str, bytes]],
        *,
        count: int | None = None,
    ) -> tuple[DataFile, ...]:
        files = []
        for n in range(self.files if count is None else count):
            key = f"{files_prefix(dataset, path)}{commit_id}-{n}.parquet"
            if any(key == k for k, _ in data):
                key = f"{files_prefix(dataset, path)}{commit_id}-{n}-{len(data)}.parquet"
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


def _nfc(name: str) -> str:
    """A lease's name as its own protocol keys it (NFC), however a fence spelt it."""
    return unicodedata.normalize("NFC", name)


def _registered(
    dataset: str,
    commit_id: str,
    added: tuple[DataFile, ...],
    *,
    explicit: bool,
    schema_mode: SchemaMode = None,
) -> Change:
    """The change ``registry.commit(add=added)`` makes of files written earlier, its digest
    bound as ``registry.commit`` binds it."""
    change = Change(
        dataset=dataset,
        commit_id=commit_id,
        add=added,
        partition_by=PARTITION_BY,
        operation="commit",
        generated_id=not explicit,
        existing_files=True,  # as registry.commit marks files written before it
        schema_mode=schema_mode,
    )
    return replace(change, digest=summary_digest(change))
