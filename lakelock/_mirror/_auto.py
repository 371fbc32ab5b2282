"""Keeping the views current after each commit, off the commit's critical path.

``Lake(..., mirror=("iceberg", "delta"))`` builds its registry as a :class:`MirroringRegistry`:
every commit that succeeds (and changed something) hands the datasets it changed to one
background thread, which mirrors them (:func:`~lakelock._mirror._run.mirror`). The commit
never waits for it and never sees its errors: they are logged (logger ``lakelock.mirror``)
and the next commit, or an explicit ``lake.mirror``, catches up, since a mirror always
continues from where the view is. Requests for a dataset already waiting are merged.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from lakelock._registry import Change, CommitResult, Registry
from lakelock._registry._fencing import FENCE_ONLY

__all__ = ["AutoMirror", "MirroringRegistry"]

logger = logging.getLogger("lakelock.mirror")


class AutoMirror:
    """One background thread mirroring the datasets it is given (module docstring)."""

    def __init__(self, registry: Registry, formats: tuple[str, ...]) -> None:
        self.registry = registry
        self.formats = formats
        self.errors = 0
        self._pending: set[str] = set()
        self._busy = False
        self._closed = False
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def schedule(self, datasets: Sequence[str]) -> None:
        with self._changed:
            if self._closed:
                return
            self._pending.update(datasets)
            if self._thread is None and self._pending:
                self._thread = threading.Thread(
                    target=self._run, name="lakelock-mirror", daemon=True
                )
                self._thread.start()
            self._changed.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until nothing is waiting or being mirrored; ``False`` on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._pending and not self._busy, timeout)

    def finish(self) -> None:
        """Mirror what is scheduled, then end the thread before returning (the next commit
        starts another)."""
        while True:
            # A commit that scheduled a mirror while an earlier finish ended the thread found
            # that thread and started none, and the thread left without it: start one.
            self.schedule(())
            self.wait()
            with self._changed:
                thread, self._thread = self._thread, None
                self._changed.notify_all()
            if thread is not None:
                thread.join()
            with self._changed:
                if not self._pending or self._closed:
                    return

    def close(self) -> None:
        """Stop after the mirror in progress (pending ones are dropped: the views catch up
        at the next mirror)."""
        with self._changed:
            self._closed = True
            self._pending.clear()
            self._changed.notify_all()

    def _run(self) -> None:
        from lakelock._mirror._run import mirror  # noqa: PLC0415 - _run imports this module's users

        me = threading.current_thread()
        while True:
            with self._changed:
                # Ended (finish) once another thread or none is the mirroring one.
                self._changed.wait_for(
                    lambda: self._pending or self._closed or self._thread is not me
                )
                if self._closed or self._thread is not me:
                    return
                datasets = sorted(self._pending)
                self._pending.clear()
                self._busy = True
            try:
                for dataset in datasets:
                    try:
                        mirror(self.registry, dataset, self.formats)
                    except Exception:  # a view is never worth a failed commit
                        self.errors += 1
                        logger.exception("mirroring dataset %r failed", dataset)
            finally:
                with self._changed:
                    self._busy = False
                    self._changed.notify_all()


class MirroringRegistry(Registry):
    """A :class:`Registry` whose successful commits schedule a mirror of what they changed."""

    def __init__(self, *args: Any, mirror: tuple[str, ...], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.auto_mirror = AutoMirror(self, mirror)

    def commit_changes(self, changes: Sequence[Change]) -> CommitResult:
        result = super().commit_changes(changes)
        # Taking or releasing a write lock, or recording a lease's takeover, changes no
        # dataset: nothing to mirror.
        changed = [c.dataset for c in changes if c.operation not in FENCE_ONLY]
        if changed and not result.empty and not result.already_committed:
            self.auto_mirror.schedule(changed)
        return result

    def close(self) -> None:
        """The views its commits scheduled brought up to date, then what a registry ends
        (:meth:`Registry.close`)."""
        self.auto_mirror.finish()
        super().close()
