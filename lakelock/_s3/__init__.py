"""The S3 adapter: every request lakelock makes goes through :class:`ObjectStore` (but the
doctor's probes, which must see the store's raw answers).

Writes state their precondition explicitly (obstore's ``PutMode``) and return the new ETag:

============  =======================  ==============================================
mode          header                   outcome when the precondition does not hold
============  =======================  ==============================================
``"create"``  ``If-None-Match: *``     :class:`AlreadyExistsError` (412)
``IfMatch``   ``If-Match: <etag>``     :class:`PreconditionFailedError` (412),
                                       :class:`NotFoundError` (404: key missing)
``"overwrite"``  none                  (unconditional; lakelock itself never uses it on
                                       protected prefixes)
============  =======================  ==============================================

The rooms of the adapter:

- :mod:`._store`: :class:`ObjectStore` itself: writes (single request, multipart, server-side
  copy), conditional deletes, reads, listings, and the retry of conflicts and throttling;
- :mod:`._classify`: what an S3 answer means (one typed error per failure), and a dead
  endpoint failing fast;
- :mod:`._resolve`: lost acknowledgements: a write retried into a 412 against itself, or
  whose outcome is unknown, is read back to learn whether it landed;
- :mod:`._probe`: which conditional delete a store honours, found once per store;
- :mod:`._features`: the S3 features lakelock needs of a store, one probe each, and
  :mod:`._doctor` one run of them (``lakelock doctor``): scratch, cleanup, verdict;
- :mod:`._continue`: ``Expect: 100-continue`` only for bodies of 2 MiB and more (a small
  write does not wait a round trip for permission to send its body);
- :mod:`._types`: what the adapter takes and returns (preconditions, write results, object
  descriptions, bodies read in parts, request counts); what its callers need of it is
  re-exported here.
"""

from lakelock._s3._classify import CONNECT_ATTEMPTS, Call, classify, fail_fast_on_dead_endpoints
from lakelock._s3._probe import ConditionalDelete
from lakelock._s3._store import MIB, MIN_PART_SIZE, ObjectStore
from lakelock._s3._types import (
    WRITE_ID_KEY,
    IfMatch,
    ListedObject,
    ObjectHead,
    PutMode,
    PutResult,
    new_write_id,
)

__all__ = [
    "CONNECT_ATTEMPTS",
    "MIB",
    "MIN_PART_SIZE",
    "WRITE_ID_KEY",
    "Call",
    "ConditionalDelete",
    "IfMatch",
    "ListedObject",
    "ObjectHead",
    "ObjectStore",
    "PutMode",
    "PutResult",
    "classify",
    "fail_fast_on_dead_endpoints",
    "new_write_id",
]
