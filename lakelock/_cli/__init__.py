"""The ``lakelock`` command line, one module per command (the entry point is
:mod:`lakelock.cli`): each parses its options, calls the library and prints what it returns.
Shared pieces: :mod:`._common` (S3 options, errors, tables), :mod:`._progress` (the progress
bar)."""
