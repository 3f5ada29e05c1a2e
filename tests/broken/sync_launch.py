"""Start the reference overlay-sync with one named breakage applied.

    python -m tests.broken.sync_launch --break NAME [agn-overlay-sync arguments]

The breakage (tests/broken/sync_breakages.py) is applied first, then ``reference.overlay_sync.cli.main``
runs with the remaining arguments. An unknown NAME exits 2 and lists the known ones.
"""

from __future__ import annotations

import argparse
import sys

from tests.broken.sync_breakages import BREAKAGES

EXIT_USAGE = 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.broken.sync_launch",
        description="Run the reference overlay-sync with one behaviour deliberately broken.",
        epilog="Arguments other than --break go to agn-overlay-sync unchanged.",
        allow_abbrev=False,
    )
    parser.add_argument("--break", dest="breakage", required=True, metavar="NAME",
                        help="the breakage to apply: " + ", ".join(sorted(BREAKAGES)))
    args, rest = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    if args.breakage not in BREAKAGES:
        print(f"{parser.prog}: unknown breakage {args.breakage!r}; known breakages: "
              + ", ".join(sorted(BREAKAGES)), file=sys.stderr)
        return EXIT_USAGE
    BREAKAGES[args.breakage].apply()
    from reference.overlay_sync.cli import main as sync_main

    return sync_main(rest)


if __name__ == "__main__":
    sys.exit(main())
