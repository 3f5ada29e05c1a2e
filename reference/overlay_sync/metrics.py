"""The `grid_overlay_sync_*` metrics, on a registry of their own so several syncers can share a process.

Labels are closed vocabularies (sync outcomes, overlay rejection reasons); revisions never become labels.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from reference.overlay import REASONS

OUTCOMES = ("accepted", "unchanged", "rejected", "read_error", "write_error")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class SyncMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.syncs = Counter("grid_overlay_sync_syncs", "Sync attempts by outcome.", ["outcome"], registry=r)
        self.rejections = Counter(
            "grid_overlay_sync_rejections", "Overlays refused at validation, by reason.", ["reason"], registry=r
        )
        # The same refusals under the public sidecar's name; its reason labels are the validation reasons.
        self.validation_failures = Counter(
            "grid_overlay_sync_validation_failures", "Overlay updates that failed validation, by reason.", ["reason"],
            registry=r,
        )
        self.last_success = Gauge(
            "grid_overlay_sync_last_success_timestamp_seconds",
            "Unix time of the last sync that left the target holding the ConfigMap's revision.",
            registry=r,
        )
        self.last_write = Gauge(
            "grid_overlay_sync_last_write_timestamp_seconds",
            "Unix time of the last overlay file written.",
            registry=r,
        )
        self.generation = Gauge(
            "grid_overlay_sync_delivered_generation",
            "provenance.source_generation of the overlay being served (0 when unknown).",
            registry=r,
        )
        self.payload_bytes = Gauge(
            "grid_overlay_sync_payload_bytes", "Size of the overlay being served.", registry=r
        )
        self.ready = Gauge("grid_overlay_sync_ready", "1 once a valid overlay is in the target.", registry=r)
        self.degraded = Gauge(
            "grid_overlay_sync_degraded",
            "1 while the last good overlay is served because the latest ConfigMap could not be used.",
            registry=r,
        )
        for outcome in OUTCOMES:
            self.syncs.labels(outcome=outcome)
        for reason in sorted(REASONS):
            self.rejections.labels(reason=reason)

    def render(self) -> bytes:
        return generate_latest(self.registry)
