"""Start the reference gateway with one named provider breakage applied.

    python -m selfcheck.provider_launch --break NAME -c praxis.yaml [other agn-gateway arguments]

The same launcher as ``selfcheck.launch``, over the provider breakages (selfcheck/provider_breakages.py).
The provider suite starts both site-a's consumer gateway and site-b's provider gateways with this command.
"""

from __future__ import annotations

import sys

from selfcheck.launch import launch
from selfcheck.provider_breakages import BREAKAGES


def main(argv: list[str] | None = None) -> int:
    return launch(BREAKAGES, "python -m selfcheck.provider_launch", argv)


if __name__ == "__main__":
    sys.exit(main())
