"""Start the reference gateway with one named consumer or provider breakage applied.

    python -m selfcheck.demo_launch --break NAME -c praxis.yaml [other agn-gateway arguments]

The demos start consumer and provider gateways from one descriptor command, so a demo is judged against
either kind of breakage: the gateway breakages (selfcheck/breakages.py) and the provider ones
(selfcheck/provider_breakages.py) together.
"""

from __future__ import annotations

import sys

from selfcheck.breakages import BREAKAGES as CONSUMER_BREAKAGES
from selfcheck.launch import launch
from selfcheck.provider_breakages import BREAKAGES as PROVIDER_BREAKAGES

BREAKAGES = {**CONSUMER_BREAKAGES, **PROVIDER_BREAKAGES}


def main(argv: list[str] | None = None) -> int:
    return launch(BREAKAGES, "python -m selfcheck.demo_launch", argv)


if __name__ == "__main__":
    sys.exit(main())
