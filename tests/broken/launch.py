"""Start the reference gateway with one named breakage applied.

    python -m tests.broken.launch --break NAME -c praxis.yaml [other agn-gateway arguments]

The breakage is applied first, then ``reference.gateway.cli.main`` runs with the remaining arguments, so
the broken gateway reads the same config and answers the same way as the real one except for the broken
behaviour. An unknown NAME exits 2 and lists the known ones.
"""

from __future__ import annotations

import argparse
import sys

from tests.broken.breakages import BREAKAGES, apply

EXIT_USAGE = 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.broken.launch",
        description="Run the reference gateway with one behaviour deliberately broken.",
        epilog="Arguments other than --break go to agn-gateway unchanged.",
        allow_abbrev=False,
    )
    parser.add_argument("--break", dest="breakage", required=True, metavar="NAME",
                        help="the breakage to apply: " + ", ".join(sorted(BREAKAGES)))
    args, rest = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    if args.breakage not in BREAKAGES:
        print(f"{parser.prog}: unknown breakage {args.breakage!r}; known breakages: "
              + ", ".join(sorted(BREAKAGES)), file=sys.stderr)
        return EXIT_USAGE
    apply(args.breakage)
    from reference.gateway.cli import main as gateway_main

    return gateway_main(rest)


if __name__ == "__main__":
    sys.exit(main())
