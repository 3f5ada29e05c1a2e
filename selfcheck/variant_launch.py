"""Start the reference gateway built as one named conformant variant.

    python -m selfcheck.variant_launch --variant NAME -c praxis.yaml [other agn-gateway arguments]

The variant (selfcheck/variants.py) is applied first, then ``reference.gateway.cli.main`` runs with the
remaining arguments. An unknown NAME exits 2 and lists the known ones.
"""

from __future__ import annotations

import sys

from selfcheck.registry import apply_from_argv
from selfcheck.variants import VARIANTS

EXIT_USAGE = 2


def main(argv: list[str] | None = None) -> int:
    rest = apply_from_argv("python -m selfcheck.variant_launch", "gateway", "agn-gateway", VARIANTS, argv,
                           flag="--variant", what="variant")
    if rest is None:
        return EXIT_USAGE
    from reference.gateway.cli import main as gateway_main

    return gateway_main(rest)


if __name__ == "__main__":
    sys.exit(main())
