"""``python -m selfcheck``: what ``agn-conformance self-check`` runs (see selfcheck.command)."""

from __future__ import annotations

import sys

from selfcheck.command import main

if __name__ == "__main__":
    sys.exit(main())
