"""``Fence``: the fencing token a registry commit carries, from a lease or a path-lock grant.

A lease's fence (``Lease.fence``) names the lease and carries its token; a grant of the
distributed path lock (``PathLockHandle.fence``) also carries the grant's paths. The registry
checks both (:mod:`lakelock._registry._fencing`): it refuses a lease token lower than the
highest it has recorded for that name, and a grant token lower than that of a recorded grant
whose paths conflict with these. On the bottom floor so that the lease and the lock can build
one without importing the registry.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from lakelock._jsonfields import MAX_INT
from lakelock.errors import InvalidArgumentError

__all__ = ["Fence"]


@dataclass(frozen=True)
class Fence:
    """A fencing token that a commit carries. Without paths (a lease) the registry refuses a
    token lower than the highest it has seen for ``name``; with the ``read``/``write`` paths of
    a path-lock grant, one lower than that of a recorded conflicting grant."""

    name: str
    token: int
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # A fence spelt by hand (``fence=("lease:x", token)``) is checked before any commit
        # carries it: the registry records its token in the root, which every process parses,
        # so a token of the wrong type or out of JSON's integer range written there would
        # make the whole lake unreadable (RegistryCorruptError) for every reader and writer.
        if not isinstance(self.name, str) or not self.name:
            raise InvalidArgumentError(
                self.name, "a fence's name is a non-empty str ('lease:<name>')", what="fence"
            )
        token = self.token
        if not isinstance(token, int) or isinstance(token, bool) or not 0 <= token < MAX_INT:
            raise InvalidArgumentError(
                token, f"a fencing token is a whole number from 0 to {MAX_INT - 1}", what="fence"
            )
        for paths in (self.read, self.write):
            if not isinstance(paths, tuple) or not all(isinstance(p, str) for p in paths):
                raise InvalidArgumentError(
                    paths, "a fence's paths are a tuple of str", what="fence"
                )
        # NFC, as lease and dataset names are: a name spelt by hand, ``fence=("lease:x",
        # token)``, is the lease's own however its accents were typed.
        object.__setattr__(self, "name", unicodedata.normalize("NFC", self.name))

    @property
    def hierarchical(self) -> bool:
        return bool(self.read or self.write)
