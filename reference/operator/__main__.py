"""`python -m reference.operator` runs the `agn-operator` command."""

import sys

from reference.operator.cli import main

sys.exit(main())
