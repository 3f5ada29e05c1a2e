"""Start the reference overlay-sync with one named breakage applied.

    python -m selfcheck.sync_launch --break NAME [agn-overlay-sync arguments]

The breakage (selfcheck/sync_breakages.py) is applied first, then ``reference.overlay_sync.cli.main``
runs with the remaining arguments. An unknown NAME exits 2 and lists the known ones.
"""

from __future__ import annotations

import sys

from selfcheck.registry import apply_from_argv
from selfcheck.sync_breakages import BREAKAGES

EXIT_USAGE = 2


def main(argv: list[str] | None = None) -> int:
    rest = apply_from_argv("python -m selfcheck.sync_launch", "overlay-sync", "agn-overlay-sync", BREAKAGES, argv)
    if rest is None:
        return EXIT_USAGE
    from reference.overlay_sync.cli import main as sync_main

    return sync_main(rest)


if __name__ == "__main__":
    sys.exit(main())
