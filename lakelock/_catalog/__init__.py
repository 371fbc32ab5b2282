"""An Iceberg REST catalog over a lake (``lakelock catalog``), which takes commits.

One namespace per lake, one table per dataset; loading a table answers the dataset's current
Iceberg view (:meth:`lakelock.Lake.mirror`), mirrored first when the registry is ahead of it;
an engine's commit is one lakelock commit. :mod:`._protocol` is the spec's part that is served
(pure), :mod:`._commits` reads an engine's commit as a lakelock commit, :mod:`._service` what
the catalog answers from the lake, :mod:`._server` the HTTP server.
"""

from lakelock._catalog._protocol import ENDPOINTS, CatalogError
from lakelock._catalog._server import CatalogServer
from lakelock._catalog._service import DEFAULT_NAMESPACE, LakeCatalog, LoadedTable, MirroredView

__all__ = [
    "DEFAULT_NAMESPACE",
    "ENDPOINTS",
    "CatalogError",
    "CatalogServer",
    "LakeCatalog",
    "LoadedTable",
    "MirroredView",
]
