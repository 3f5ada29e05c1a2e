"""Which demo tests each breakage must make fail: gateway breakages (consumer and provider gateways alike)
and operator breakages, both from the tables the conformance judges use.

Together the two tables cover every demo test except the claims listed as not applicable, which no
implementation can fail.
"""

from __future__ import annotations

from selfcheck.targets import Targets, must_fail

__all__ = ["GATEWAY_TARGETS", "NOT_APPLICABLE_MARK", "OPERATOR_TARGETS", "SUITE"]

SUITE = "suites.demos"
#: The conformance ids of not-applicable claims carry this; they are listed, never judged.
NOT_APPLICABLE_MARK = "-NOT-APPLICABLE"

GATEWAY_TARGETS: dict[str, Targets] = {
    "last-group-first": must_fail("DEMO-COMBINED-SITE-LOCAL-FIRST", "DEMO-GLB-DEMO-ACTIVE-ACTIVE",
                                  "DEMO-WORKLOAD-INFERENCE-WORKLOADS-SERVED"),
    "hop-without-client-cert": must_fail("DEMO-COMBINED-SITE-REMOTE-FALLBACK", "DEMO-COMBINED-SITE-OPERATOR-RESTARTS"),
    "vanished-binding-refused": must_fail("DEMO-COMBINED-SITE-SESSION-DURING-WITHDRAWAL"),
    "any-organization": must_fail("DEMO-COMBINED-SITE-HOP-MTLS", "DEMO-GLB-DEMO-BOUNDARY-PEERS",
                                  expect="outside the grid's organization"),
    "client-authorization-kept": must_fail("DEMO-COMBINED-SITE-CREDENTIAL-REPLACED",
                                           "DEMO-GLB-DEMO-BOUNDARY-CREDENTIALS",
                                           "DEMO-WORKLOAD-INFERENCE-PROVIDER-BOUNDARY", expect="provider token"),
    "weights-off": must_fail("DEMO-WEIGHTED-DYNAMIC-ROUTING-STATIC-SHARES", "DEMO-WEIGHTED-DYNAMIC-ROUTING-HOT-RELOAD",
                             expect="selection distribution does not match"),
    "reload-once": must_fail("DEMO-COMBINED-SITE-FAILBACK", "DEMO-CLOUD-BURST-RECOVERY",
                             "DEMO-LLMD-POOL-METRICS-RECOVERY", "DEMO-LLMD-POOL-METRICS-HOT-RELOAD",
                             "DEMO-GLB-DEMO-PROVIDER-FAILBACK", "DEMO-GLB-DEMO-HOT-RELOAD",
                             "DEMO-WORKLOAD-INFERENCE-FAILOVER"),
    "rr-all-groups": must_fail("DEMO-CLOUD-BURST-SITE-LOCAL-ROUND-ROBIN", "DEMO-CLOUD-BURST-EXTERNAL-OVERFLOW"),
    "local-site-preferred": must_fail("DEMO-DISTRIBUTED-TOKEN-RATE-LIMIT-ROTATION"),
    "rr-grid-cursor": must_fail("DEMO-DISTRIBUTED-TOKEN-RATE-LIMIT-LOCAL-TURNS", expect="interleaved with the other"),
    "epp-queried-per-request": must_fail("DEMO-DISTRIBUTED-TOKEN-RATE-LIMIT-ROUTING-LOCAL",
                                         expect="a lookup per request"),
    "no-affinity": must_fail("DEMO-GLB-DEMO-SEPARATE-AFFINITY", expect="keeps its provider binding"),
    "bind-unkeyed": must_fail("DEMO-GLB-DEMO-SEPARATE-AFFINITY"),
    "client-cert-not-verified": must_fail("DEMO-GLB-DEMO-BOUNDARY-PEERS", "DEMO-WORKLOAD-INFERENCE-PROVIDER-BOUNDARY",
                                          expect="without a client certificate"),
    "unknown-candidate-routed": must_fail("DEMO-GLB-DEMO-TWO-EAST-PROVIDERS"),
    "no-strip-hop": must_fail("DEMO-ROUTE53-EDGE-ENTRY-INDEPENDENT-SELECTION", "DEMO-WORKLOAD-INFERENCE-ATTRIBUTION"),
    "hop-headers-forwarded": must_fail("DEMO-WORKLOAD-INFERENCE-ATTRIBUTION", expect="consumes the hop's headers"),
    "provider-revision-from-client": must_fail("DEMO-WORKLOAD-INFERENCE-ATTRIBUTION",
                                               expect="x-ai-provider-routing-revision"),
}

OPERATOR_TARGETS: dict[str, Targets] = {
    "status-not-distributed": must_fail("DEMO-COMBINED-SITE-VERSIONED-OVERLAY",
                                        "DEMO-WORKLOAD-INFERENCE-OVERLAY-CONVERGES", expect="distributed"),
    "weights-not-copied": must_fail("DEMO-WEIGHTED-DYNAMIC-ROUTING-STATIC-SHARES"),
    "dynamic-as-static": must_fail("DEMO-WEIGHTED-DYNAMIC-ROUTING-DYNAMIC-WEIGHTS"),
    "same-region-as-cross-region": must_fail("DEMO-CLOUD-BURST-SITE-LOCAL-ROUND-ROBIN", expect="then its region's"),
    "pressure-ignored": must_fail("DEMO-CLOUD-BURST-QUEUE-ADMISSION", "DEMO-CLOUD-BURST-REGIONAL-FALLBACK"),
    "locality-before-admission": must_fail("DEMO-CLOUD-BURST-REGIONAL-FALLBACK", expect="must lead the restricted"),
    "pressure-latched": must_fail("DEMO-CLOUD-BURST-RECOVERY"),
    "selection-policy-dropped": must_fail("DEMO-DISTRIBUTED-TOKEN-RATE-LIMIT-ROTATION"),
    "score-ascending": must_fail("DEMO-LLMD-POOL-METRICS-OPERATOR-SCORES",
                                 "DEMO-LLMD-POOL-METRICS-PRESSURE-SHIFTS-TRAFFIC",
                                 "DEMO-LLMD-POOL-METRICS-KV-CACHE-PRESSURE"),
    "scrape-once": must_fail("DEMO-LLMD-POOL-METRICS-FORCED-REFRESH", "DEMO-LLMD-POOL-METRICS-TLS-STALE-CACHE"),
    "remote-metrics-ignored": must_fail("DEMO-LLMD-POOL-METRICS-OPERATOR-SCORES"),
    "tls-fails-open": must_fail("DEMO-LLMD-POOL-METRICS-TLS-STALE-CACHE"),
    "timestamp-in-digest": must_fail("DEMO-LLMD-POOL-METRICS-HOT-RELOAD", "DEMO-LLMD-POOL-METRICS-FORCED-REFRESH"),
    "unavailable-kept": must_fail("DEMO-WORKLOAD-INFERENCE-FAILOVER"),
    "unhealthy-kept": must_fail("DEMO-WORKLOAD-INFERENCE-HEALTH-ENFORCED"),
    "no-eligibility-gate": must_fail("DEMO-ROUTE53-EDGE-ENTRY-RESIDENCY"),
    "trust-revocation-ignored": must_fail("DEMO-ROUTE53-EDGE-ENTRY-RESIDENCY"),
    "discovered-name-reversed": must_fail("DEMO-WORKLOAD-INFERENCE-THREE-CANDIDATES"),
    "site-cluster-announced": must_fail("DEMO-GLB-DEMO-TWO-EAST-PROVIDERS", "DEMO-WORKLOAD-INFERENCE-THREE-CANDIDATES"),
}
