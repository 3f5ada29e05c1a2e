"""Start the reference operator built as one named conformant variant.

    python -m selfcheck.operator_variant_launch --variant NAME run --manifests DIR --out DIR [other arguments]

The variant (selfcheck/operator_variants.py) is applied first, then ``reference.operator.cli.main`` runs with
the remaining arguments. An unknown NAME exits 2 and lists the known ones.
"""

from __future__ import annotations

import sys

from selfcheck.operator_variants import VARIANTS
from selfcheck.registry import run_applied


def main(argv: list[str] | None = None) -> int:
    return run_applied("python -m selfcheck.operator_variant_launch", "operator", "agn-operator",
                       "reference.operator.cli:main", VARIANTS, argv, flag="--variant", what="variant")


if __name__ == "__main__":
    sys.exit(main())
