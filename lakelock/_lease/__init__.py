"""Leases: a named, fenced lease over one S3 object, for leader election across machines.

``_core`` holds the document and every state transition (pure: no I/O, no clock); ``_shell``
the :class:`Lease` that wraps them in S3 compare-and-swaps. The pieces leases share with the
distributed path lock (the owner, expiry predicates, document reader, heartbeat) are in
:mod:`lakelock._holding`; server time is :mod:`lakelock._clock`.
"""

from __future__ import annotations

from lakelock._lease._core import LeaseDoc, parse_lease
from lakelock._lease._shell import Lease, LeaseOptions, read_leases

__all__ = ["Lease", "LeaseDoc", "LeaseOptions", "parse_lease", "read_leases"]
