"""lakelock: many writers, one S3 data lake, no coordinator but S3's conditional requests."""

from __future__ import annotations

from lakelock import errors

__all__ = [
    "errors",
]

__version__ = "0.1.0"
