"""Start the reference operator with one named breakage applied.

    python -m tests.broken.operator_launch --break NAME run --manifests DIR --out DIR [other agn-operator arguments]

The breakage (a producer breakage of tests/broken/operator_breakages.py or a mesh breakage of
tests/broken/mesh_breakages.py) is applied first, then ``reference.operator.cli.main`` runs with the
remaining arguments, so the broken operator reads the same resources and writes the same outputs as the
real one except for the broken behaviour. An unknown NAME exits 2 and lists the known ones.
"""

from __future__ import annotations

import argparse
import sys

from tests.broken.mesh_breakages import BREAKAGES as MESH_BREAKAGES
from tests.broken.operator_breakages import BREAKAGES as PRODUCER_BREAKAGES

BREAKAGES = {**PRODUCER_BREAKAGES, **MESH_BREAKAGES}

EXIT_USAGE = 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.broken.operator_launch",
        description="Run the reference operator with one behaviour deliberately broken.",
        epilog="Arguments other than --break go to agn-operator unchanged.",
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
    from reference.operator.cli import main as operator_main

    return operator_main(rest)


if __name__ == "__main__":
    sys.exit(main())
