"""Start the reference operator with one named breakage applied.

    python -m selfcheck.operator_launch --break NAME run --manifests DIR --out DIR [other agn-operator arguments]

The breakage (a producer breakage of selfcheck/operator_breakages.py or a mesh breakage of
selfcheck/mesh_breakages.py) is applied first, then ``reference.operator.cli.main`` runs with the
remaining arguments, so the broken operator reads the same resources and writes the same outputs as the
real one except for the broken behaviour. An unknown NAME exits 2 and lists the known ones.
"""

from __future__ import annotations

import sys

from selfcheck.mesh_breakages import BREAKAGES as MESH_BREAKAGES
from selfcheck.operator_breakages import BREAKAGES as PRODUCER_BREAKAGES
from selfcheck.registry import run_applied

BREAKAGES = {**PRODUCER_BREAKAGES, **MESH_BREAKAGES}

def main(argv: list[str] | None = None) -> int:
    return run_applied("python -m selfcheck.operator_launch", "operator", "agn-operator", "reference.operator.cli:main",
                       BREAKAGES, argv)


if __name__ == "__main__":
    sys.exit(main())
