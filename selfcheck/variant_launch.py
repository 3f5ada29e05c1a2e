"""Start the reference gateway built as one named conformant variant.

    python -m selfcheck.variant_launch --variant NAME -c praxis.yaml [other agn-gateway arguments]

The variant (selfcheck/variants.py) is applied first, then ``reference.gateway.cli.main`` runs with the
remaining arguments. An unknown NAME exits 2 and lists the known ones.
"""

from __future__ import annotations

import sys

from selfcheck.registry import run_applied
from selfcheck.variants import VARIANTS


def main(argv: list[str] | None = None) -> int:
    return run_applied("python -m selfcheck.variant_launch", "gateway", "agn-gateway", "reference.gateway.cli:main",
                       VARIANTS, argv, flag="--variant", what="variant")


if __name__ == "__main__":
    sys.exit(main())
