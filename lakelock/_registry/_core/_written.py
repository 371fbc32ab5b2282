"""When the files a commit registers from elsewhere were written (docs/FORMAT.md, rule 10).

A file lakelock writes knows when the server wrote it (``DataFile.written_at``: the ``Date``
of its PUT's answer less the PUT's duration), and rule 10 holds its commit to the lake's
vacuum floor by it. A file written by another process and registered with
``registry.commit`` (by an engine, by Spark's executors, whose files reach the driver as
JSON, by a run that was killed and re-run, or read back from the registry) comes without
one, and vacuum deletes such a file, while no version references it, once it is older
than its window. So before such a commit is prepared each of these files is looked up in
the store: its ``LastModified`` (the server's clock, truncated to the second, which only
makes the file look older) becomes its write time, and rule 10 refuses the commit if that
is too old (``ObjectTooOldError``). A file that is not there refuses it before anything is
written (``NotFoundError``): vacuum may have deleted it, or it was never written, and a
version referencing it would be damaged.

One listing of the key itself per file (a key sorts before every longer key it begins),
sent together; the store layer retries them as it retries every read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from lakelock._registry._changes import Change
from lakelock._registry._core._requests import List, Listing, Parallel, Steps
from lakelock.errors import NotFoundError

__all__ = ["unknown_writes", "with_write_times"]


def unknown_writes(changes: Sequence[Change]) -> list[str]:
    """The keys of the files ``changes`` add without a write time, each once, in order."""
    return list(dict.fromkeys(f.key for c in changes for f in c.add if f.written_at is None))


def with_write_times(changes: Sequence[Change], *, bucket: str) -> Steps:
    """``changes`` with every file of :func:`unknown_writes` given its ``LastModified`` as
    its write time (returns a list). Raises :class:`NotFoundError` for a file that is not
    in the store, and a lookup's own error once the store layer gave up on it: nothing has
    been written then."""
    keys = unknown_writes(changes)
    if not keys:
        return list(changes)
    answers = yield Parallel(tuple(List(key, max_keys=1) for key in keys))
    written: dict[str, float] = {}
    for key, answer in zip(keys, answers, strict=True):
        if isinstance(answer, BaseException):
            raise answer
        assert isinstance(answer, Listing)
        found = answer.objects[0] if answer.objects else None
        if found is None or found.key != key:
            raise NotFoundError(
                f"{key} is not in the bucket: a commit cannot register a data file that does "
                "not exist (vacuum deletes an unreferenced file once it is older than its "
                "window), so nothing was committed (write the data again and commit that)",
                bucket=bucket,
                key=key,
                operation="ListObjectsV2",
                status=404,
            )
        written[key] = found.last_modified.timestamp()
    return [
        replace(
            c,
            add=tuple(
                replace(f, written_at=written[f.key]) if f.key in written else f for f in c.add
            ),
        )
        if any(f.key in written for f in c.add)
        else c
        for c in changes
    ]
