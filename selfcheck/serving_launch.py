"""Start the reference gateway with one named serving breakage applied.

    python -m selfcheck.serving_launch --break NAME -c praxis.yaml [other agn-gateway arguments]

The same launcher as ``selfcheck.launch``, over the grid_site_route breakages
(selfcheck/serving_breakages.py). The serving suite starts its grid gateway with this command.
"""

from __future__ import annotations

import sys

from selfcheck.launch import launch
from selfcheck.serving_breakages import BREAKAGES


def main(argv: list[str] | None = None) -> int:
    return launch(BREAKAGES, "python -m selfcheck.serving_launch", argv)


if __name__ == "__main__":
    sys.exit(main())
