"""Which demo tests each breakage must make fail: gateway breakages (consumer and provider gateways alike)
and operator breakages, both from the tables the conformance judges use.

Together the two tables cover every demo test except the claims listed as not applicable, which no
implementation can fail.
"""

from __future__ import annotations

from tests.broken.targets import Targets, must_fail

__all__ = ["GATEWAY_TARGETS", "NOT_APPLICABLE_MARK", "OPERATOR_TARGETS", "SUITE"]

SUITE = "suites.demos"
#: The conformance ids of not-applicable claims carry this; they are listed, never judged.
NOT_APPLICABLE_MARK = "-NOT-APPLICABLE"

GATEWAY_TARGETS: dict[str, Targets] = {
    "last-group-first": must_fail("DEMO-COMBINED-SITE-LOCAL-FIRST"),
    "hop-without-client-cert": must_fail("DEMO-COMBINED-SITE-REMOTE-FALLBACK", "DEMO-COMBINED-SITE-OPERATOR-RESTARTS"),
    "vanished-binding-refused": must_fail("DEMO-COMBINED-SITE-SESSION-DURING-WITHDRAWAL"),
    "any-organization": must_fail("DEMO-COMBINED-SITE-HOP-MTLS", expect="outside the grid's organization"),
    "client-authorization-kept": must_fail("DEMO-COMBINED-SITE-CREDENTIAL-REPLACED", expect="provider token"),
    "weights-off": must_fail("DEMO-WEIGHTED-DYNAMIC-ROUTING-STATIC-SHARES", "DEMO-WEIGHTED-DYNAMIC-ROUTING-HOT-RELOAD",
                             expect="selection distribution does not match"),
    "reload-once": must_fail("DEMO-COMBINED-SITE-FAILBACK", "DEMO-CLOUD-BURST-RECOVERY"),
    "rr-all-groups": must_fail("DEMO-CLOUD-BURST-SITE-LOCAL-ROUND-ROBIN", "DEMO-CLOUD-BURST-EXTERNAL-OVERFLOW"),
    "local-site-preferred": must_fail("DEMO-DISTRIBUTED-TOKEN-RATE-LIMIT-ROTATION"),
    "rr-grid-cursor": must_fail("DEMO-DISTRIBUTED-TOKEN-RATE-LIMIT-LOCAL-TURNS", expect="interleaved with the other"),
    "epp-queried-per-request": must_fail("DEMO-DISTRIBUTED-TOKEN-RATE-LIMIT-ROUTING-LOCAL",
                                         expect="a lookup per request"),
}

OPERATOR_TARGETS: dict[str, Targets] = {
    "status-not-distributed": must_fail("DEMO-COMBINED-SITE-VERSIONED-OVERLAY", expect="distributed"),
    "weights-not-copied": must_fail("DEMO-WEIGHTED-DYNAMIC-ROUTING-STATIC-SHARES"),
    "same-region-as-cross-region": must_fail("DEMO-CLOUD-BURST-SITE-LOCAL-ROUND-ROBIN", expect="then its region's"),
    "pressure-ignored": must_fail("DEMO-CLOUD-BURST-QUEUE-ADMISSION", "DEMO-CLOUD-BURST-REGIONAL-FALLBACK"),
    "locality-before-admission": must_fail("DEMO-CLOUD-BURST-REGIONAL-FALLBACK", expect="must lead the restricted"),
    "pressure-latched": must_fail("DEMO-CLOUD-BURST-RECOVERY"),
    "selection-policy-dropped": must_fail("DEMO-DISTRIBUTED-TOKEN-RATE-LIMIT-ROTATION"),
}
