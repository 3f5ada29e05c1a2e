"""`python -m reference.overlay_sync` runs the agn-overlay-sync command."""

from reference.overlay_sync.cli import main

raise SystemExit(main())
