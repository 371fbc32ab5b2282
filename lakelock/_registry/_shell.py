"""The registry of one lake: :class:`Registry`, reading it (now, or at a version: time
travel), history, migration from format 1; committing is
:class:`~lakelock._registry._commit.CommitQueue` around the sans-I/O commit core
(:mod:`lakelock._registry._core`; docs/ARCHITECTURE.md, "The registry")."""

from __future__ import annotations

import math
import random
import time
import unicodedata
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any

import pyarrow as pa

from lakelock._datafile import DataFile
from lakelock._layout import files_prefix
from lakelock._lease._shell import LEASE_FENCE, issued_token
from lakelock._names import (
    parse_partition_path,
    require_named_columns,
    validate_dataset_name,
    validate_partition_path,
    written_partition_path,
)
from lakelock._pathlock._distributed import LiveGrants
from lakelock._registry._batch import CommitResult, seconds_of
from lakelock._registry._builder import CommitBuilder
from lakelock._registry._changes import (
    Change,
    Fence,
    SchemaMode,
    check_fence_writes,
    checked_schema_mode,
    takeover,
    written_paths,
)
from lakelock._registry._commit import CommitQueue
from lakelock._registry._core import (
    Committer,
    Driver,
    FoldPolicy,
    Hedging,
    Hints,
    Redrive,
    Retry,
)
from lakelock._registry._core._decide import restore_lead, restore_refused, vacuum_horizon
from lakelock._registry._core._schedule import HEDGE_ALONE
from lakelock._registry._core._written import with_write_times
from lakelock._registry._document import (
    REGISTRY_KEY,
    CommitRecord,
    DatasetState,
    IntentFate,
    LockFenceRecord,
    ManifestRef,
    RegistryDoc,
    RegistrySnapshot,
    parse_registry,
    with_datasets,
)
from lakelock._registry._fencing import FENCE_ONLY, LOCK, UNLOCK, held_write_locks
from lakelock._registry._intents import INTENT_PREFIX
from lakelock._registry._log import LogEntry, check_limit, log, undecided
from lakelock._registry._manifest import Manifest
from lakelock._registry._objects import HistoryEntry, LazyDatasets, Objects
from lakelock._registry._settings import (
    LakeSettings,
    configured,
    explicit_settings,
    lake_settings,
)
from lakelock._retry import RetryPolicy
from lakelock._s3 import ObjectStore, PutResult
from lakelock._stored_partitions import check_stored_partitions
from lakelock.errors import (
    ConflictError,
    DatasetNotFoundError,
    InvalidArgumentError,
    InvalidNameError,
    LockedError,
    NotFoundError,
    OutcomeUnknownError,
    RegistryCorruptError,
    SnapshotExpiredError,
    ThrottledError,
    VersionNotFoundError,
)

__all__ = [
    "CommitResult",
    "MigrationResult",
    "Registry",
    "RegistryInternals",
    "RegistrySnapshot",
    "no_lake",
]

MIB = 1024 * 1024
#: How often a commit that a write lock keeps out looks again, while it may wait.
LOCK_POLL = 1.0
#: Most parts of one shared manifest a read of some partitions GETs by range (in parallel,
#: 16 at a time); more, and the manifest is read whole, in one request (a filter that kept
#: most of the partitions one commit added).
PARTS_AT_MOST = 32


@dataclass(frozen=True)
class MigrationResult:
    """An upgrade of the registry's format: the version that did it, where a format-1 root
    was kept (``None``: it was format 2, whose root the upgrade only renumbers), and the
    format it was in."""

    version: int
    backup: str | None
    upgraded_from: int = 1


def _moved(name: str, home: str) -> None:
    """Warn that ``name`` moved to ``home`` (it keeps working for one release)."""
    warnings.warn(
        f"{name} moved: use {home} (the old name goes in the next release)",
        DeprecationWarning,
        stacklevel=3,
    )


def _kept(datasets: Mapping[str, DatasetState], name: str) -> DatasetState | None:
    """Dataset ``name`` of a time-travel snapshot, ``None`` if it did not exist then or its
    version of then is no longer kept."""
    try:
        return datasets[name]
    except KeyError:  # VersionNotFoundError (expired) included
        return None


def _check_when(version: object, as_of: object) -> None:
    """Refuse, before any request, a ``version`` that is not an int (``True`` is not version
    1) and an ``as_of`` that is not a number of seconds or a datetime."""
    if version is not None and (not isinstance(version, int) or isinstance(version, bool)):
        raise InvalidArgumentError(version, f"a version is an int, not {type(version).__name__}")
    if as_of is not None and (
        isinstance(as_of, bool) or not isinstance(as_of, int | float | datetime)
    ):
        raise InvalidArgumentError(
            as_of, "as_of is server time: seconds since the epoch or an aware datetime"
        )
    if isinstance(as_of, datetime) and as_of.utcoffset() is None:
        # Python reads a naive datetime as this machine's local time; a pipeline usually
        # means UTC: either guess answers another instant's version without a word.
        raise InvalidArgumentError(
            as_of, "as_of is server time: a datetime needs a time zone (tzinfo=datetime.UTC)"
        )
    if isinstance(as_of, float) and math.isnan(as_of):
        raise InvalidArgumentError(as_of, "as_of is server time: a number of seconds, not NaN")


#: Why a version below 1 holds nothing: the first commit makes version 1.
_BEFORE_THE_FIRST = (
    ": registry versions start at 1, the lake's first commit (before it, at version 0, the "
    "lake holds no dataset)"
)


def upgrade_version(doc: RegistryDoc) -> int | None:
    """The version that upgraded the registry from format 1 (``None``: it was never in
    format 1): the one after the format-1 root its backup keeps."""
    if doc.backup is None:
        return None
    name = doc.backup.rsplit("/", 1)[-1]  # dataset_registry-<version>-<sha256>.json
    return int(name.split("-")[1]) + 1


def _before_upgrade(upgrade: int, backup: str | None) -> str:
    return (
        f": it is older than the registry's upgrade to format 2 at version {upgrade}; format 1 "
        f"kept no snapshots, so time travel begins at version {upgrade} (the format-1 commit "
        f"log is in history, the last format-1 registry in {backup})"
    )


def _updated_at(doc: RegistryDoc, version: int, datasets: Mapping[str, DatasetState]) -> str:
    """When ``version`` was committed: its record in the root's window, else the newest
    ``updated_at`` of the datasets as they were then (every one is loaded)."""
    for record in doc.commits:
        if record.version == version:
            return record.at
    times = [d.updated_at for d in datasets.values() if d.updated_version <= version]
    return max(times, default="")


def no_lake(
    store: ObjectStore, *, otherwise: str = ", or pass create=True to start a lake there"
) -> NotFoundError:
    """The refusal of what needs a lake at ``store``'s prefix where none is (nothing ever
    committed): a change that would start one there (``configure``), or a command that
    would read a mistyped prefix as an empty lake. ``otherwise``: how to go on if the
    prefix was meant (the command line names its own flag)."""
    return NotFoundError(
        f"no lake at s3://{store.bucket}/{store.prefix}: nothing was ever committed under "
        f"this prefix (no registry); check the bucket and prefix{otherwise}",
        bucket=store.bucket,
        key=f"{store.prefix}{REGISTRY_KEY}",
        operation="GetObject",
    )


class Registry:
    """The registry of one lake: ``metastore/dataset_registry.json`` and its manifests.

    ``group_commit`` merges concurrent ``commit()`` calls of this object into one CAS (up to
    ``max_batch`` commits). ``commit_window``, ``retention``, ``intent_ttl`` and
    ``vacuum_floor`` are the lake's settings (:mod:`._settings`): ``None`` uses the lake's;
    a value given that disagrees with the lake's is refused
    (:class:`~lakelock.errors.SettingsMismatchError`); :meth:`settings` reads them and
    :meth:`configure` changes them. ``policy`` (a :class:`~lakelock.advanced.FoldPolicy`:
    ``Lake(fold_policy=...)`` passes it) holds the scheduling knobs of commits across
    processes.
    ``root_multipart_threshold`` is the root size from which it is written by multipart
    upload with an ``If-Match`` completion. What the commit protocol knows and has decided
    (the root this process last saw, intents' fates, its learnt state) is
    :attr:`internals`'s, not this object's.
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        retry: RetryPolicy | None = None,
        group_commit: bool = True,
        max_batch: int = 256,
        commit_window: int | None = None,
        root_multipart_threshold: int = 8 * MIB,
        retention: float | None = None,
        clock: Callable[[], float] = time.time,
        max_fold: int = FoldPolicy.max_fold,
        fold_interval: float = 1.0,
        intent_ttl: float | None = None,
        policy: FoldPolicy | None = None,
        lock_timeout: float = 0.0,
        vacuum_floor: float | None = None,
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be positive")
        self.store = store
        self.retry = retry or RetryPolicy()
        # The root's own store does not retry 409/503 itself: the commit loop counts them.
        self._root = ObjectStore(
            store.client,
            store.bucket,
            prefix=store.prefix,
            multipart_threshold=root_multipart_threshold,
            retry=RetryPolicy(max_attempts=1, sleep=self.retry.sleep, clock=self.retry.clock),
            read_timeout=store.read_timeout,
            load=store.load,
        )
        #: How long a commit waits for a write lock another process holds over what it
        #: writes (FORMAT.md, "Write locks in force"), then
        #: :class:`~lakelock.errors.LockedError`.
        self.lock_timeout = lock_timeout
        self._grants = LiveGrants(store, clock=self.retry.clock)
        self._clock = clock
        self._objects = Objects(store)
        self._committer = Committer(
            self._objects,
            policy=policy or FoldPolicy(max_fold=max_fold, fold_interval=fold_interval),
            commit_window=commit_window,
            retention=retention,
            intent_ttl=intent_ttl,
            vacuum_floor=vacuum_floor,
            max_attempts=self.retry.max_attempts,
            max_seconds=self.retry.max_elapsed,
            initial_backoff=self.retry.initial_backoff,
            max_backoff=self.retry.max_backoff,
            bucket=store.bucket,
            load=store.load,
            # The operating system's randomness: commit ids, intent keys and manifest names
            # are drawn from it, and a process forked from one that holds this registry must
            # not draw the same ones (a seeded generator is copied by fork).
            rng=random.SystemRandom(),
        )
        policy = self._committer.policy
        self._driver = Driver(
            store,
            self._root,
            sleep=self.retry.sleep,
            clock=clock,
            # The retry policy's monotonic clock: what the core measures spans by (its
            # estimate of the server's clock, an intent's age), injected with it.
            timer=self.retry.clock,
            hedging=Hedging(policy.hedge, alone=HEDGE_ALONE) if policy.hedge else None,
        )
        self._commits = CommitQueue(
            self._committer, self._driver, group_commit=group_commit, max_batch=max_batch
        )
        #: What the commit protocol knows and the root decided (:class:`RegistryInternals`).
        self.internals = RegistryInternals(self)
        #: The highest token each lease's document was seen to have issued, by fence name
        #: (:meth:`_check_lease_token`): tokens only grow, so one at or below it needs no
        #: read of the document again (the commit's check before its files, then as it
        #: commits them, read it twice).
        self._issued: dict[str, int] = {}

    def close(self) -> None:
        """End what this registry does in the background: it stops folding for other
        processes (lingering) and waits for the requests it sent and no longer waits for (a
        hedged request's slower copy, reads made ahead). Afterwards it sends no request
        unless called again: it stays usable."""
        self._commits.close()
        self._driver.close()

    # -- committing -----------------------------------------------------------------------

    def commit(
        self,
        dataset: str,
        *,
        add: Sequence[DataFile] = (),
        remove: Sequence[DataFile | str] = (),
        schema: pa.Schema | None = None,
        properties: Mapping[str, str | None] | None = None,
        commit_id: str | None = None,
        fence: Fence | tuple[str, int] | None = None,
        partition_by: Sequence[str] | None = None,
        remove_partitions: Sequence[str] = (),
        operation: str | None = None,
        schema_mode: SchemaMode = None,
    ) -> CommitResult:
        """Add and remove files of ``dataset`` (and declare its schema, partition columns and
        properties) in one atomic registry update. A ``commit_id`` already recorded makes this
        a no-op success, so a re-run pipeline commits once. ``fence=(name, token)`` refuses
        the commit if a higher token was seen for ``name`` (:class:`StaleFenceError`).
        ``remove_partitions`` removes every file of the partitions at or under those paths
        (``""``: all) as they are when the commit applies (files added by this commit stay);
        ``operation`` names the commit in the log (default ``"commit"``). A new dataset
        without ``partition_by`` takes the partition columns its files' paths name. Nothing
        to add, remove or declare under a ``commit_id`` commits nothing (``result.empty``)
        and leaves the id unrecorded, as an empty ``Lake.append`` does. A ``schema`` with a
        column named ``""`` is :class:`~lakelock.errors.InvalidNameError`, as a table's; one
        with columns the dataset lacks is :class:`~lakelock.errors.SchemaMismatchError`
        unless ``schema_mode="merge"`` adds them to the dataset's schema."""
        if schema is not None:
            require_named_columns(schema.names, of="schema")
        partitions = tuple(dict.fromkeys(validate_partition_path(p) for p in remove_partitions))
        commit = CommitBuilder(
            self,
            dataset,
            operation or "commit",
            commit_id=commit_id,
            fence=fence,
            schema=schema,
            partition_by=partition_by,
            schema_mode=checked_schema_mode(schema_mode),
            properties=dict(properties) if properties is not None else None,
        )
        # Files written earlier, perhaps committed already (a retry): FORMAT.md rule 14.
        commit.add(add, existing=True)
        commit.remove(
            (r.key if isinstance(r, DataFile) else r for r in remove), partitions=partitions
        )
        commit.bind_to_files()
        self._refuse_new_spellings(dataset, add)
        # A file storing a partition column with another value than its path's would read
        # otherwise in lakelock than in Iceberg readers: its footer is read (not lakelock's
        # own files'), before anything is written.
        check_stored_partitions(self.store, add)
        declared = schema is not None or partition_by is not None or properties is not None
        if commit_id is not None and not (add or remove or partitions or declared):
            # Nothing under an id the caller chose (a cluster job whose workers found no
            # rows): checked like any other commit of it, then nothing is recorded, as
            # Lake.append's empty table: the run that has the files commits them under
            # that id, and a dataset not made yet is not made without its partition
            # columns.
            planned = commit.check()
            if isinstance(planned, CommitResult):
                return planned
            return commit.empty(planned.version)
        return commit.commit()

    def _refuse_new_spellings(self, dataset: str, add: Sequence[DataFile]) -> None:
        """Refuse (:class:`~lakelock.errors.InvalidNameError`, before the commit writes
        anything) files another tool wrote into a partition whose value is not Unicode NFC,
        as rows written are refused (:func:`~lakelock._names.written_partition_value`): that
        spelling would be a second partition of the value. A spelling that is already a
        partition of the dataset (registered before lakelock refused such values) is let
        through: a commit into it makes no second partition, which is what the rule keeps
        out, and refusing it would stop the pipeline that fills that partition, and any
        rewrite of its files (a compaction's), for good. Only such a file costs a read of
        the registry."""
        spellings = {f.partition_path for f in add if not _partition_is_nfc(f.partition_path)}
        if not spellings:
            return
        state = self.read().datasets.get(validate_dataset_name(dataset))
        for path in sorted(spellings):
            if state is None or path not in state.partitions:
                written_partition_path(path)

    def commit_changes(self, changes: Sequence[Change]) -> CommitResult:
        """Commit changes to several datasets as one, all or nothing (they must share one
        commit id, and ``generated_id``: whether lakelock made it up rather than the caller
        chose it). Every commit of a lake comes here, built by a
        :class:`~lakelock._registry._builder.CommitBuilder`. A write lock another process
        holds over what they write refuses them (:class:`~lakelock.errors.LockedError`),
        after up to ``lock_timeout`` seconds of waiting for it (FORMAT.md, "Write locks in
        force"); a change whose path-lock fence does not write what it writes is refused
        first (:func:`~lakelock._registry._changes.check_fence_writes`)."""
        if not changes or len({c.commit_id for c in changes}) != 1:
            raise ValueError("commit_changes needs at least one change and one commit id")
        if len({c.dataset for c in changes}) != len(changes):
            raise ValueError("commit_changes takes one change per dataset")
        if len({c.generated_id for c in changes}) != 1:
            raise ValueError("commit_changes needs one commit id, generated or chosen")
        for change in changes:
            check_fence_writes(change)
            self._check_lease_token(change)
        if any(c.operation in FENCE_ONLY for c in changes):
            return self._commits.commit(changes, now=self._clock())
        # Files written before this commit are held to the vacuum floor by when the server
        # wrote them (FORMAT.md rule 10); one that is gone refuses it here.
        changes = self._driver.run(with_write_times(changes, bucket=self.store.bucket))
        started, cleared = self.retry.clock(), set[int]()
        while True:
            # Write locks in force, on the root this process knows (no request); one it shows is
            # looked for in the root as it is now (a GET the commit would make anyway), so a
            # lock released since costs nothing more, and one held costs no refused commit.
            doc = self._known_doc()
            blocking = self._write_locks_over(changes, doc.lock_fences) if doc else None
            if blocking is not None:
                blocking = self._write_locks_over(changes, self._current()[0].lock_fences)
            if blocking is None:
                try:
                    return self._commits.commit(changes, now=self._clock())
                except LockedError as locked:  # registered after this process last looked
                    blocking = self._locked_change(changes, locked)
            self._wait_out(*blocking, started=started, cleared=cleared)

    # -- write locks in force (FORMAT.md) ---------------------------------------------------

    def _lock_commit(self, fences: tuple[Fence, ...], operation: str) -> None:
        commit_id = self._new_commit_id()
        changes = [
            Change(
                dataset=fence.name.removeprefix("lock:"),
                commit_id=commit_id,
                fence=fence,
                operation=operation,
                generated_id=True,
            )
            for fence in fences
        ]
        self.commit_changes(changes)

    def _new_commit_id(self) -> str:
        """A commit id for a commit whose caller chose none: the lake's one generator (the
        time by this registry's clock, then the commit core's randomness: FORMAT.md, "Commit
        ids"), for every operation and ``registry.commit``."""
        return self._committer.new_commit_id(self._clock())

    def _check_lease_token(self, change: Change) -> None:
        """Refuse (:class:`~lakelock.errors.InvalidArgumentError`) a lease's fence spelt by
        hand, ``("lease:<name>", token)``, whose token is above any its lease has issued (a
        run's date, a job id read for it): recorded, it would be the highest token the
        registry keeps for the lease, and every later acquisition's would be refused as
        stale, for good. The lease's document is read only for a token above the one this
        process last saw recorded (a holder's first commit, if its acquisition was not
        recorded), and not again for a token at or below one the document was seen to have
        issued; a name no lakelock lease has is left to the registry's check alone."""
        fence = change.fence
        if (
            fence is None
            or fence.hierarchical
            or change.operation in FENCE_ONLY  # a takeover: the token its lease just issued
            or not change.dataset  # refused for its name (only a takeover names none)
            or not fence.name.startswith(LEASE_FENCE)
        ):
            return
        known = self._known_doc()
        if known is not None and known.fences.get(fence.name, -1) >= fence.token:
            return
        if self._issued.get(fence.name, -1) >= fence.token:
            return
        issued = issued_token(self.store, fence.name.removeprefix(LEASE_FENCE))
        if issued is not None:
            self._issued[fence.name] = max(issued, self._issued.get(fence.name, issued))
        if issued is not None and fence.token > issued:
            raise InvalidArgumentError(
                fence.token,
                f"lease {fence.name.removeprefix(LEASE_FENCE)!r} has issued tokens up to "
                f"{issued} only (use lease.fence, or the token acquire gave)",
                what="fencing token",
            )

    def _known_doc(self) -> RegistryDoc | None:
        """The root this process last read or wrote (no request; ``None`` before the first:
        then the commit itself reads it, and the core checks the write locks there)."""
        with self._commits.lock:
            known = self._committer.known
        return None if known is None else known[0]

    @staticmethod
    def _write_locks_over(
        changes: Sequence[Change], lock_fences: Mapping[str, tuple[LockFenceRecord, ...]]
    ) -> tuple[Change, LockFenceRecord] | None:
        """The first held write lock that one of ``changes`` would write under, if any."""
        for change in changes:
            paths = written_paths(change)
            for record in held_write_locks(lock_fences, change.dataset, paths, change.fence):
                return change, record
        return None

    def _locked_change(
        self, changes: Sequence[Change], locked: LockedError
    ) -> tuple[Change, LockFenceRecord]:
        change = next(c for c in changes if c.dataset == locked.dataset)
        doc = self._known_doc()
        records = doc.lock_fences.get(f"lock:{change.dataset}", ()) if doc else ()
        record = next((r for r in records if r.token == locked.token), None)
        if record is None:  # cleared since: the core's record of it is what there is
            record = LockFenceRecord(locked.token, (), locked.paths, 0.0, held=True)
        return change, record

    def _wait_out(
        self, change: Change, record: LockFenceRecord, *, started: float, cleared: set[int]
    ) -> None:
        """Clear the write lock ``record`` if its grant ended (its lock table says so; once
        per commit: ``cleared``); else wait a poll for it, within ``lock_timeout`` of
        ``started``; else :class:`~lakelock.errors.LockedError` naming its holder."""
        holder = self._grants.holder(change.dataset, record.token)
        if holder is None and record.token not in cleared:  # it never holds again
            cleared.add(record.token)
            fence = Fence(f"lock:{change.dataset}", record.token, record.read, record.write)
            self._lock_commit((fence,), UNLOCK)
            return
        waited = self.retry.clock() - started
        if holder is not None and waited < self.lock_timeout:
            self.retry.sleep(min(LOCK_POLL, self.lock_timeout - waited))
            return
        after = f"; waited {waited:.3g} s" if self.lock_timeout else ""
        who = f"{holder.owner} grant {holder.token}" if holder else f"grant {record.token}"
        raise LockedError(
            f"dataset {change.dataset!r}: {list(written_paths(change))} lie under the write "
            f"lock held by {who} on {sorted(record.write)}{after} "
            f"(lock_timeout={self.lock_timeout:g})",
            holder=who,
            paths=tuple(sorted(record.write)),
            token=record.token,
            timeout=self.lock_timeout,
            dataset=change.dataset,
            commit_id=change.commit_id,
        )

    @property
    def policy(self) -> FoldPolicy:
        """Deprecated: ``Lake(fold_policy=...)`` sets it; ``registry.internals.policy``."""
        _moved("Registry.policy", "Lake(fold_policy=...) or registry.internals.policy")
        return self.internals.policy

    @policy.setter
    def policy(self, policy: FoldPolicy) -> None:
        _moved("Registry.policy", "Lake(fold_policy=...) or registry.internals.policy")
        self.internals.policy = policy

    # -- the lake's settings -----------------------------------------------------------------

    def settings(self) -> LakeSettings:
        """The lake's settings (one read of the root): those it stores, or before any are
        stored (a new lake, or one made before they were), those this registry was given
        over the defaults, which its first commit stores. A setting given that disagrees
        with the lake's is :class:`~lakelock.errors.SettingsMismatchError`."""
        doc, _ = self._current()
        return self._settings_of(doc)

    def _settings_of(self, doc: RegistryDoc) -> LakeSettings:
        return lake_settings(doc.settings, self._committer.explicit)

    def configure(
        self,
        *,
        retention: float | None = None,
        commit_window: int | None = None,
        intent_ttl: float | None = None,
        vacuum_floor: float | None = None,
        create: bool = False,
    ) -> LakeSettings:
        """Change the lake's settings for every writer, by one compare-and-swap; returns
        them. Those not given stay as they are (a vacuum floor above a retention lowered
        below it follows it down). An invalid combination is
        :class:`~lakelock.errors.InvalidNameError`, before anything is written. A prefix
        with no lake yet (nothing ever committed) is :class:`~lakelock.errors.NotFoundError`
        naming it, nothing written, unless ``create``: then this commit starts the lake
        there (a mistyped prefix must not get a new lake while the real one keeps its
        settings). Writers read them from the root they commit on: a process that was given
        another value explicitly is refused from then on. A ``create`` that is no bool (a
        flag read as text: ``"false"`` is truthy) is
        :class:`~lakelock.errors.InvalidArgumentError`, nothing written."""
        if not isinstance(create, bool):
            raise InvalidArgumentError(
                create, "create is True or False, not text or a number", what="create flag"
            )
        changes = explicit_settings(
            retention=retention,
            commit_window=commit_window,
            intent_ttl=intent_ttl,
            vacuum_floor=vacuum_floor,
        )
        doc, _ = self._current()
        # What it changes from: the lake's (a setting this registry was given that disagrees
        # with them is what configure is for, not refused here).
        base = doc.settings or lake_settings(None, self._committer.explicit)
        configured(base, changes)  # invalid: refused before anything is written
        if doc.version == 0 and not create:
            raise no_lake(self.store)
        stored = self._commits.run(self._committer.configure(changes))
        assert isinstance(stored, LakeSettings)
        return stored

    def _hedged_write(self, put: Callable[[], PutResult]) -> PutResult:
        """``put()`` — a create-only PUT of a small new object, with one write id however
        often it is sent — sent a second time if it is slower than this process's writes
        usually are, as the commit's own are (docs/FORMAT.md, "Scheduling" 7): a lake's
        appends send their data files through it."""
        return self._driver.hedged(put)

    def read(
        self, *, version: int | None = None, as_of: float | datetime | None = None
    ) -> RegistrySnapshot:
        """The current registry (version 0 and no datasets before the first commit), or, with
        ``version`` or ``as_of`` (server time: seconds since the epoch or an aware datetime),
        every dataset as it was then. A version older than the retention is
        :class:`~lakelock.errors.SnapshotExpiredError`; one that does not exist
        :class:`~lakelock.errors.VersionNotFoundError`. Throttling and transport failures
        are retried within the registry's budget."""
        _check_when(version, as_of)
        doc, etag = self._current()
        if version is None and as_of is None:
            return RegistrySnapshot.of(doc, etag)
        return self._travel(doc, version=version, as_of=as_of)

    def _current(self) -> tuple[RegistryDoc, str | None]:
        for attempt in self.retry.retrying((ConflictError, ThrottledError, OutcomeUnknownError)):
            with attempt:
                doc, etag = self._read_root()
        return doc, etag

    def _read_root(self) -> tuple[RegistryDoc, str | None]:
        """The root as it is now (its body parsed, its datasets loaded on demand). The next
        commit of this process may start from it (a hint: a stale one costs a 412)."""
        try:
            data = self._root.get(REGISTRY_KEY)
        except NotFoundError as error:
            if error.code == "NoSuchBucket":  # a missing bucket is not an empty lake
                raise NotFoundError(
                    f"bucket {self.store.bucket!r} does not exist",
                    bucket=self.store.bucket,
                    key=error.key,
                    operation=error.operation,
                    status=error.status,
                    code=error.code,
                ) from error
            return RegistryDoc(), None
        doc = parse_registry(
            data.body, bucket=self.store.bucket, key=self._root.full_key(REGISTRY_KEY)
        )
        if doc.format_version > 1:
            doc = with_datasets(doc, self._objects.datasets(doc))
        with self._commits.lock:
            self._committer.observe(doc, data.etag, self._clock())
        return doc, data.etag

    def _travel(
        self, doc: RegistryDoc, *, version: int | None, as_of: float | datetime | None
    ) -> RegistrySnapshot:
        if version is not None and as_of is not None:
            raise InvalidArgumentError(
                (version, as_of), "give version or as_of, not both", what="read point"
            )
        seconds = as_of.timestamp() if isinstance(as_of, datetime) else as_of
        if version is not None and version < 1:
            raise VersionNotFoundError("*", version=version, reason=_BEFORE_THE_FIRST)
        if version is not None and version > doc.version:
            raise VersionNotFoundError(
                "*", version=version, reason=f": the registry is at version {doc.version}"
            )
        if doc.format_version == 1:
            raise VersionNotFoundError(
                "*",
                version=version,
                as_of=seconds,
                reason=": this registry is still in format 1, which keeps no history "
                "(the next commit, or `lakelock registry migrate`, upgrades it)",
            )
        if version == doc.version:
            return RegistrySnapshot.of(doc, None)
        upgrade = upgrade_version(doc)
        if upgrade is not None and version is not None and version < upgrade:
            raise VersionNotFoundError(
                "*", version=version, reason=_before_upgrade(upgrade, doc.backup)
            )
        entries = doc.entries
        # A version replaced before the last vacuum's window began may have lost its objects
        # even where the retention, grown since, would keep it (FORMAT.md rule 9).
        horizon = vacuum_horizon(doc)
        expire_before = self._clock() - self._settings_of(doc).retention
        if horizon is not None:
            expire_before = max(expire_before, horizon)

        def load(name: str) -> DatasetState | None:
            return self._objects.at_version(
                entries[name],
                name,
                version=version,
                as_of=seconds,
                expire_before=expire_before,
                upgrade=upgrade,
            )

        datasets = LazyDatasets(entries, load, sparse=True)
        # (``load`` reads ``version``: the version found for as_of is another name.)
        at = version
        if at is None:
            # The newest version among the datasets as of then that can still be read (one
            # expired raises only when it is asked for).
            at = max((s.updated_version for n in entries if (s := _kept(datasets, n))), default=0)
        return RegistrySnapshot(
            version=at,
            etag=None,
            updated_at=_updated_at(doc, at, datasets),
            datasets=datasets,
            fences=MappingProxyType({}),
            commits=tuple(c for c in doc.commits if c.version <= at),
            historical=True,
        )

    def dataset(
        self,
        name: str,
        *,
        version: int | None = None,
        as_of: float | datetime | None = None,
        snapshot: RegistrySnapshot | None = None,
    ) -> DatasetState:
        """One dataset, now or at ``version``/``as_of``: loads just that dataset."""
        name = validate_dataset_name(name)
        snap = snapshot or self.read(version=version, as_of=as_of)
        try:
            state: DatasetState | None = snap.datasets[name]
        except VersionNotFoundError:  # a KeyError too: .get() would hide why (vacuumed...)
            raise
        except KeyError:
            state = None
        if state is None:
            if version is not None or as_of is not None:
                seconds = as_of.timestamp() if isinstance(as_of, datetime) else as_of
                raise VersionNotFoundError(name, version=version, as_of=seconds)
            raise DatasetNotFoundError(name)
        return state

    def history(self, dataset: str, *, limit: int | None = None) -> list[HistoryEntry]:
        """The commits of ``dataset``, newest first: version, server time, commit id,
        operation and counts, as far back as its snapshots are kept (see vacuum). ``limit``
        (at most that many) is a count: a negative one is refused before any request."""
        dataset = validate_dataset_name(dataset)
        check_limit(limit)
        doc, _ = self._current()
        if doc.format_version == 1:
            if dataset not in doc.datasets:
                raise DatasetNotFoundError(dataset)
            return [
                HistoryEntry(
                    dataset, c.version, seconds_of(c.at), c.id, c.operation, c.added, c.removed
                )
                for c in reversed(doc.commits)
                if dataset in c.datasets
            ][:limit]
        entry = doc.entries.get(dataset)
        if entry is None:
            raise DatasetNotFoundError(dataset)
        found = self._objects.history(entry, dataset, limit=limit)
        if doc.backup is None or (limit is not None and len(found) >= limit):
            return found
        # Upgraded from format 1: its commit log (the recent window the old root kept, in
        # the backup) goes on where the snapshots begin. Those versions cannot be read.
        old = parse_registry(self.store.get(doc.backup).body, bucket=self.store.bucket)
        found += [
            HistoryEntry(
                dataset, c.version, seconds_of(c.at), c.id, c.operation, c.added, c.removed
            )
            for c in reversed(old.commits)
            if dataset in c.datasets
        ]
        return found[:limit]

    def log(self, *, limit: int | None = None) -> list[LogEntry]:
        """The commits of every dataset that the root records, newest first, from one read
        of it: those of its window of recent commits (``commit_window``) and the commits it
        refused or cancelled meanwhile, each of which used up a version to record why
        (:mod:`._log`); at most ``limit``. A version that records no commit is not listed:
        a settings change (:meth:`configure`), an upgrade (:meth:`migrate`), vacuum's move
        of the root before it deletes (:meth:`read` shows the settings and cutoff they
        left). A dataset's whole history is :meth:`history`."""
        check_limit(limit)
        doc, _ = self._current()
        return log(doc, limit=limit)

    def pending_intents(self) -> list[str]:
        """The keys of the intents no swap has decided yet (above the watermark, no fate),
        oldest first: commits written, of this process, of others or of crashed ones, that
        the next fold may apply or refuse."""
        doc, _ = self._current()
        if doc.format_version == 1:
            return []
        listed = self.store.list(INTENT_PREFIX, start_after=doc.watermark)
        return undecided(doc, (o.key for o in listed))

    def migrate(self) -> MigrationResult | None:
        """Upgrade a format-1 or format-2 registry to this lakelock's format (3) by
        compare-and-swap (any commit does it too), keeping a format-1 document as a
        write-once backup; ``None`` if it is upgraded already (or a concurrent upgrade won:
        exactly one does). Lakelocks that know only formats 1 and 2 refuse the lake from
        then on (docs/FORMAT.md rule 17)."""
        try:
            upgraded = self._commits.run(self._committer.migrate())
        except (Redrive, Retry):
            return None
        if not isinstance(upgraded, tuple):
            return None
        old, new_doc = upgraded
        return MigrationResult(new_doc.version, new_doc.backup if old == 1 else None, old)

    def find_commit(self, commit_id: str, *, datasets: Iterable[str] | None = None) -> int | None:
        """The version that recorded ``commit_id``, or None: the root's recent window first,
        then the commit-id index of each dataset (of ``datasets``, default all) — so a re-run
        is recognised long after it left the window (as long as its dataset exists). None
        is not final for a commit whose outcome was unknown: its pending intent may still be
        applied by a fold, or its swap land; re-running it under the same id lands it once."""
        snap = self.read()
        for record in reversed(snap.commits):
            if record.id == commit_id:
                return record.version
        names = list(datasets) if datasets is not None else list(snap.datasets)
        for name in names:
            state = snap.datasets.get(name)
            if state is not None:
                found = self._objects.commit_version(state, commit_id)
                if found is not None:
                    return found
        return None

    def _parts(self, dataset: str, parts: list[tuple[str, ManifestRef]]) -> list[DataFile]:
        """The files of each (partition, manifest part), read in parallel where not cached."""

        def read(item: tuple[str, ManifestRef]) -> tuple[DataFile, ...]:
            path, ref = item
            found = self._objects.partition_files(dataset, path, ref)
            if found is None:  # read whole (an Objects without a store)
                found = self._objects.manifest(ref.key).files_of(path)
            if len(found) != ref.files:
                raise RegistryCorruptError(
                    f"part of {ref.key} for {dataset!r}/{path!r} lists {len(found)} of "
                    f"{ref.files} files",
                    bucket=self.store.bucket,
                    key=self.store.full_key(ref.key),
                )
            return found

        if len(parts) <= 1:
            return [f for item in parts for f in read(item)]
        with ThreadPoolExecutor(min(16, len(parts))) as pool:
            return [f for found in pool.map(read, parts) for f in found]

    def files(
        self,
        dataset: str,
        *,
        snapshot: RegistrySnapshot | None = None,
        partitions: Iterable[str] | None = None,
    ) -> list[DataFile]:
        """The committed files of ``dataset`` in ``snapshot`` (default: a fresh read),
        optionally only of the given partition paths, in key order."""
        snap = snapshot or self.read()
        try:
            state = snap.datasets[dataset]
        except VersionNotFoundError:
            raise  # a version of it that expired, or predates the upgrade: says which
        except KeyError:
            raise DatasetNotFoundError(dataset) from None
        if partitions is not None:
            chosen = [(p, state.partitions.get(p)) for p in dict.fromkeys(partitions)]
        else:
            chosen = list(state.partitions.items())
        refs = [
            (path, ref)
            for path, partition in chosen
            if partition is not None
            for ref in partition.manifests
        ]
        files: list[DataFile] = []
        if partitions is not None:
            # A few partitions of manifests shared with many others (a commit that touched
            # many partitions): read just their parts, not every partition's files. Many
            # parts of one manifest (a filter that kept most partitions): the manifest whole,
            # one GET instead of one per part.
            wanted = Counter(ref.key for _, ref in refs if ref.part is not None)
            parts = [(p, ref) for p, ref in refs if 0 < wanted[ref.key] <= PARTS_AT_MOST]
            refs = [(p, ref) for p, ref in refs if not 0 < wanted[ref.key] <= PARTS_AT_MOST]
            files += self._parts(dataset, parts)
        loaded = self._objects.manifests(ref.key for _, ref in refs)
        for path, ref in refs:
            manifest = loaded[ref.key]
            prefix = files_prefix(dataset, path)
            mine = manifest.files_of(path)
            stray = [
                f.key
                for f in (manifest.files if manifest.partition is not None else mine)
                if f.partition_path != path or not f.key.startswith(prefix)
            ]
            if (
                manifest.dataset != dataset
                or manifest.partition not in (None, path)
                or stray
                or len(mine) != ref.files
            ):
                raise RegistryCorruptError(
                    f"manifest filed under {dataset!r}/{path!r} lists other files "
                    f"({manifest.dataset!r}/{manifest.partition!r}, {stray[:3]}, "
                    f"{len(mine)} of {ref.files} files)",
                    bucket=self.store.bucket,
                    key=self.store.full_key(ref.key),
                )
            files.extend(mine)
        return sorted(files, key=lambda f: f.key)


class RegistryInternals:
    """What the commit protocol of one :class:`Registry` knows and the root has decided,
    for diagnostics, tests and lakelock's own tools (``registry.internals``): nothing here is
    needed to write or read a lake. Its types are in :mod:`lakelock.advanced`; their
    meaning is docs/FORMAT.md's and the glossary's (docs/ARCHITECTURE.md)."""

    def __init__(self, registry: Registry) -> None:
        self._registry = registry

    @property
    def objects(self) -> Objects:
        """The cache of the lake's write-once objects this registry reads through."""
        return self._registry._objects

    @property
    def policy(self) -> FoldPolicy:
        """The scheduling knobs of group commit across processes (liveness only): the
        ``Lake(fold_policy=...)`` given, else the defaults."""
        return self._registry._committer.policy

    @policy.setter
    def policy(self, policy: FoldPolicy) -> None:
        self._registry._committer.policy = policy

    @property
    def hints(self) -> Hints:
        """What this process has learnt about the others (rounds, contention)."""
        return self._registry._committer.hints

    @property
    def explicit(self) -> dict[str, float | int]:
        """The settings this registry was given (the rest are the lake's)."""
        return dict(self._registry._committer.explicit)

    @property
    def group_commit(self) -> bool:
        """Whether concurrent commits of this registry merge into one compare-and-swap."""
        return self._registry._commits.group_commit

    def known(self) -> RegistrySnapshot:
        """The registry as this process last read or wrote it, at no request (a fresh
        :meth:`Registry.read` if it knows none yet). It may be stale: for checks that the
        commit loop makes again on the current version (an operation's checks before it
        writes)."""
        registry = self._registry
        with registry._commits.lock:
            known = registry._committer.known
        if known is None:
            return registry.read()
        doc, etag = known
        if doc.format_version > 1:
            # The commit core's documents load their datasets through its offline view of the
            # cache (a miss is a signal to the core, not a GET): hand out one that loads them.
            doc = with_datasets(doc, registry._objects.datasets(doc))
        return RegistrySnapshot.of(doc, etag)

    def intent_fates(self) -> tuple[IntentFate, ...]:
        """What the root has decided about recent intents (applied at a version, rejected
        with a reason, cancelled), oldest first: every one above the watermark, and at least
        the ``commit_window`` most recent."""
        doc, _ = self._registry._current()
        return doc.fates

    def pending_intents(self) -> list[str]:
        """Deprecated: :meth:`Registry.pending_intents`."""
        _moved("registry.internals.pending_intents()", "registry.pending_intents()")
        return self._registry.pending_intents()

    def recorded_commit(
        self, commit_id: str, dataset: str, *, snapshot: RegistrySnapshot | None = None
    ) -> CommitRecord | Mapping[str, Any] | None:
        """What the registry recorded of ``commit_id``: the root's record if it is a recent
        commit (of any dataset), else the entry of ``dataset``'s commit-id index, else
        ``None`` (compare with :func:`~lakelock._registry._changes.reused_commit_id`)."""
        snap = snapshot or self._registry.read()
        for record in reversed(snap.commits):
            if record.id == commit_id:
                return record
        state = snap.datasets.get(dataset)
        if state is None or snap.format_version == 1:
            return None
        return self._registry._objects.commit_entry(state, commit_id)

    def restore_point(
        self, name: str, *, version: int | None = None, as_of: float | datetime | None = None
    ) -> tuple[DatasetState, float | None, float | None]:
        """The dataset at ``version``/``as_of``, for a restore to make current again, when
        that version leaves the retention and when it was replaced (its successor's commit
        time, from which whoever applies the restore measures the retention of the root it
        applies on; both ``None``: it is the current one). A version
        that leaves it too soon for a restore to land first, or was replaced before the
        window of the lake's last vacuum (its horizon, recorded in the root), is
        :class:`~lakelock.errors.SnapshotExpiredError` (FORMAT.md rule 9)."""
        registry = self._registry
        name = validate_dataset_name(name)
        _check_when(version, as_of)
        doc, _ = registry._current()
        snapshot = registry._travel(doc, version=version, as_of=as_of)
        state = registry.dataset(name, version=version, as_of=as_of, snapshot=snapshot)
        if doc.format_version == 1 or name not in doc.entries:
            return state, None, None
        replaced = registry._objects.replaced_at(doc.entries[name], state.updated_version)
        if replaced is None:
            return state, None, None
        retention = registry._settings_of(doc).retention
        until, now = replaced + retention, registry._clock()
        if restore_refused(until, now=now, retention=retention):
            left, lead = until - now, restore_lead(retention)
            raise SnapshotExpiredError(
                name,
                version=version,
                as_of=as_of.timestamp() if isinstance(as_of, datetime) else as_of,
                reason=f": it leaves the registry's retention in {max(left, 0):.0f} s, too "
                f"soon to restore it safely (a restore needs {lead:g} s before then: vacuum "
                "may delete its files as the restore commits); restore a newer version",
            )
        return state, until, replaced

    def load_manifests(self, keys: Iterable[str]) -> dict[str, Manifest]:
        """The manifests at ``keys`` (cached: they are content-addressed, never change)."""
        return self._registry._objects.manifests(keys)

    def hold_write_locks(self, fences: tuple[Fence, ...]) -> None:
        """Register path-lock grants as write locks in force, in one commit: until released,
        commits to their write paths that do not carry their fence are refused (the
        distributed path lock's grants call this)."""
        self._registry._lock_commit(fences, LOCK)

    def release_write_locks(self, fences: tuple[Fence, ...]) -> None:
        """Clear the write locks in force of these grants, in one commit."""
        self._registry._lock_commit(fences, UNLOCK)

    def check_lease_token(self, change: Change) -> None:
        """Refuse ``change``'s lease fence if its token is above any its lease issued
        (:meth:`Registry._check_lease_token`): before any file of the commit is written."""
        self._registry._check_lease_token(change)

    def record_takeover(self, fence: Fence) -> None:
        """Record a lease's takeover: raise the registry's highest token for ``fence.name``
        to ``fence.token`` by one commit that names no dataset and changes nothing else
        (FORMAT.md, "Lease takeovers"), so that from then on every commit under a lower
        token is refused, before the new holder has committed anything. A lower token than
        the one recorded is :class:`~lakelock.errors.StaleFenceError` (the fences never go
        back); the commit's other errors are the registry's (a lease that gets one is not
        acquired: :class:`~lakelock._lease.Lease`)."""
        registry = self._registry
        registry.commit_changes([takeover(fence, registry._new_commit_id())])


def _partition_is_nfc(path: str) -> bool:
    """Whether every value a partition path names (decoded) is Unicode NFC; a path that
    names none is left to the checks that refuse it."""
    try:
        values = [value for _, value in parse_partition_path(path)]
    except InvalidNameError:
        return True
    return all(value is None or unicodedata.is_normalized("NFC", value) for value in values)
