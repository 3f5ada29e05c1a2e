"""Which suite tests exercise each reference module that implements spec behaviour.

A mutant of a module is judged by these tests only: the reference runs in subprocesses started from the
editable install, so the mutated file on disk is what they import. Paths are relative to the checkout.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MODULES", "Target"]


@dataclass(frozen=True)
class Target:
    """The suite package and the test modules of it that exercise a reference module."""

    suite: str
    test_modules: tuple[str, ...]


_CONSUMER_SELECTION = ("test_selection", "test_affinity", "test_requests")

MODULES: dict[str, Target] = {
    "reference/overlay/validate.py": Target("suites.consumer", ("test_overlay_validation", "test_requests")),
    "reference/overlay/digest.py": Target("suites.consumer", ("test_overlay_validation",)),
    "reference/gateway/filters/intelligent_route.py": Target("suites.consumer",
                                                             (*_CONSUMER_SELECTION, "test_extended",
                                                              "test_credentials")),
    "reference/gateway/selection.py": Target("suites.consumer", _CONSUMER_SELECTION),
    "reference/gateway/snapshot.py": Target("suites.consumer", _CONSUMER_SELECTION),
    "reference/gateway/affinity.py": Target("suites.consumer", ("test_affinity",)),
    "reference/gateway/routing_input.py": Target("suites.consumer", ("test_requests", "test_extended")),
    "reference/gateway/reload.py": Target("suites.consumer", ("test_reload", "test_overlay_validation")),
    "reference/gateway/snapshot_store.py": Target("suites.consumer", ("test_reload", "test_overlay_validation")),
    "reference/gateway/hop_headers.py": Target("suites.consumer", ("test_hop_headers",)),
    "reference/gateway/filters/peer_identity_trust.py": Target("suites.provider", ("test_peer_trust",)),
    "reference/gateway/filters/provider_route.py": Target("suites.provider",
                                                          ("test_hop_consumption", "test_peer_trust")),
    "reference/gateway/filters/credential_inject.py": Target("suites.provider", ("test_credentials",)),
    "reference/operator/core/ordering.py": Target("suites.producer", ("test_ordering",)),
    "reference/operator/core/admission.py": Target("suites.producer", ("test_admission",)),
    "reference/operator/core/scoring.py": Target("suites.producer", ("test_scoring",)),
    "reference/operator/core/candidates.py": Target("suites.producer", ("test_ordering", "test_envelope")),
    "reference/operator/scrape.py": Target("suites.producer", ("test_scoring", "test_admission")),
    "reference/operator/mesh/sites.py": Target("suites.mesh", ("test_eligibility", "test_failure")),
}
