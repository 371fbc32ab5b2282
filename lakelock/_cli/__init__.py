"""The ``lakelock`` command line, one module per command (the entry point is
:mod:`lakelock.cli`). Shared pieces: :mod:`._common` (S3 options, errors, tables),
:mod:`._progress` (the progress bar); ``doctor``'s probes are in :mod:`._probes`."""
