"""``python -m reference.gateway -c praxis.yaml``."""

import sys

from reference.gateway.cli import main

sys.exit(main())
