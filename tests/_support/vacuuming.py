"""Vacuum on a store that refuses every conditional delete, as the tests of such stores (the
embedded endpoint told to, LocalStack) check it."""

from __future__ import annotations

import pytest

from lakelock import Lake
from lakelock._layout import DATASETS_PREFIX
from lakelock._vacuum import VacuumReport, vacuum
from lakelock.errors import UnsupportedError

__all__ = ["HOUR", "vacuum_refused"]

HOUR = 3600.0


def vacuum_refused(lake: Lake, *, at: float, match: str | None = None) -> VacuumReport:
    """Vacuum of ``lake`` as at ``at`` (objects older than an hour, no retention check): its
    dry run's report; a real run is UnsupportedError (``match``: its message) and deletes
    nothing."""
    report = vacuum(lake.registry, enforce_retention=False, older_than=HOUR, clock=lambda: at)
    listed = {o.key for o in lake.store.list(DATASETS_PREFIX)}
    with pytest.raises(UnsupportedError, match=match):
        vacuum(
            lake.registry, enforce_retention=False, older_than=HOUR, dry_run=False, clock=lambda: at
        )
    assert {o.key for o in lake.store.list(DATASETS_PREFIX)} == listed
    return report
