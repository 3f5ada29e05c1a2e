"""Start the reference gateway with one named breakage applied.

    python -m selfcheck.launch --break NAME -c praxis.yaml [other agn-gateway arguments]

The breakage is applied first, then ``reference.gateway.cli.main`` runs with the remaining arguments, so
the broken gateway reads the same config and answers the same way as the real one except for the broken
behaviour. An unknown NAME exits 2 and lists the known ones. `launch` serves any table of gateway
breakages (selfcheck.provider_launch starts the broken provider gateways with it).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping

from selfcheck.breakages import BREAKAGES, Breakage

EXIT_USAGE = 2


def launch(breakages: Mapping[str, Breakage], prog: str, argv: list[str] | None = None) -> int:
    """Apply the breakage ``--break`` names from `breakages`, then run the gateway with the other arguments."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run the reference gateway with one behaviour deliberately broken.",
        epilog="Arguments other than --break go to agn-gateway unchanged.",
        allow_abbrev=False,
    )
    parser.add_argument("--break", dest="breakage", required=True, metavar="NAME",
                        help="the breakage to apply: " + ", ".join(sorted(breakages)))
    args, rest = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    if args.breakage not in breakages:
        print(f"{parser.prog}: unknown breakage {args.breakage!r}; known breakages: "
              + ", ".join(sorted(breakages)), file=sys.stderr)
        return EXIT_USAGE
    breakages[args.breakage].apply()
    from reference.gateway.cli import main as gateway_main

    return gateway_main(rest)


def main(argv: list[str] | None = None) -> int:
    return launch(BREAKAGES, "python -m selfcheck.launch", argv)


if __name__ == "__main__":
    sys.exit(main())
