"""Start the reference overlay-sync with one named breakage applied.

    python -m selfcheck.sync_launch --break NAME [agn-overlay-sync arguments]

The breakage (selfcheck/sync_breakages.py) is applied first, then ``reference.overlay_sync.cli.main``
runs with the remaining arguments. An unknown NAME exits 2 and lists the known ones.
"""

from __future__ import annotations

import sys

from selfcheck.registry import run_applied
from selfcheck.sync_breakages import BREAKAGES


def main(argv: list[str] | None = None) -> int:
    return run_applied("python -m selfcheck.sync_launch", "overlay-sync", "agn-overlay-sync",
                       "reference.overlay_sync.cli:main", BREAKAGES, argv)


if __name__ == "__main__":
    sys.exit(main())
