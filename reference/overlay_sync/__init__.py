"""overlay-sync: the sidecar that delivers routing overlays from the ConfigMap to the gateway.

It watches the ConfigMap the operator renders, validates each envelope with the shared overlay contract
(size bound, schema, scope, digest), projects accepted revisions into the gateway's overlay directory the
way kubelet projects a ConfigMap (`..data` symlink swap), keeps the last good file when a revision is
refused, and reports readiness and `grid_overlay_sync_*` metrics.
"""

from reference.files import current_bytes, project
from reference.overlay_sync.source import ConfigMapSource, FileConfigMapSource, SourceError
from reference.overlay_sync.sync import OUTCOMES, OverlaySyncer, SyncResult

__all__ = [
    "OUTCOMES",
    "ConfigMapSource",
    "FileConfigMapSource",
    "OverlaySyncer",
    "SourceError",
    "SyncResult",
    "current_bytes",
    "project",
]
