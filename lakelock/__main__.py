"""``python -m lakelock``: the command line (same as the ``lakelock`` script)."""

from __future__ import annotations

import sys

from lakelock.cli import main

if __name__ == "__main__":
    sys.exit(main())
