"""Iceberg and Delta views of a dataset's versions (``lake.mirror``): :mod:`._run` brings a
view up to date, :mod:`._versions` finds the versions to mirror and what each changed,
:mod:`._delta` and :mod:`._iceberg` write each format, :mod:`._series` the search for a
view's newest version, :mod:`._auto` the background mirroring after commits, :mod:`._vacuum`
which view objects vacuum keeps. The views' keys are :mod:`lakelock._layout`'s."""

from __future__ import annotations

from lakelock._layout import VIEWS_PREFIX
from lakelock._mirror._run import FORMATS, MirrorResult, check_formats, mirror

__all__ = ["FORMATS", "VIEWS_PREFIX", "MirrorResult", "check_formats", "mirror"]
