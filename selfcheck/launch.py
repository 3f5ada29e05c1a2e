"""Start the reference gateway with one named breakage applied.

    python -m selfcheck.launch --break NAME -c praxis.yaml [other agn-gateway arguments]

The breakage is applied first, then ``reference.gateway.cli.main`` runs with the remaining arguments, so
the broken gateway reads the same config and answers the same way as the real one except for the broken
behaviour. An unknown NAME exits 2 and lists the known ones. `launch` serves any table of gateway
breakages (selfcheck.provider_launch starts the broken provider gateways with it).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

from selfcheck.breakages import BREAKAGES, Breakage
from selfcheck.registry import run_applied


def launch(breakages: Mapping[str, Breakage], prog: str, argv: list[str] | None = None) -> int:
    """Apply the breakage ``--break`` names from `breakages`, then run the gateway with the other arguments."""
    return run_applied(prog, "gateway", "agn-gateway", "reference.gateway.cli:main", breakages, argv)


def main(argv: list[str] | None = None) -> int:
    return launch(BREAKAGES, "python -m selfcheck.launch", argv)


if __name__ == "__main__":
    sys.exit(main())
