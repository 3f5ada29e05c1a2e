"""Which mesh conformance tests each mesh breakage (tests/broken/mesh_breakages.py) must make fail.

Together the targets cover every test of the mesh suite. The partition test is listed where a breakage
changes what it sees; where network namespaces are unavailable it is skipped, and the judge then counts
only the targets that ran.
"""

from __future__ import annotations

from tests.broken.targets import Targets, must_fail

__all__ = ["SUITE", "TARGETS"]

SUITE = "suites.mesh"

TARGETS: dict[str, Targets] = {
    "no-eligibility-gate": must_fail("MESH-GATE-ABSENT-BEFORE-ACTIVE", "MESH-GATE-PRESENT-AFTER-ACTIVE",
                                     "MESH-TRUST-MISMATCH-KEEPS-OUT"),
    "pins-not-compared": must_fail("MESH-TRUST-MISMATCH-KEEPS-OUT"),
    "first-pin-only": must_fail("MESH-TRUST-ROTATION-SECOND-PIN"),
    "self-echo-kept": must_fail("MESH-NO-SELF-ECHO"),
    "network-filter-missing": must_fail("MESH-WRONG-NETWORK-ABSENT"),
    "degraded-dropped-at-once": must_fail("MESH-FAILURE-DETECTION-BOUNDED", "MESH-STALE-TTL-EVICTION",
                                          "MESH-PARTITION-DEGRADE-EVICT-HEAL"),
    "stale-never-evicted": must_fail("MESH-STALE-TTL-EVICTION", "MESH-PARTITION-DEGRADE-EVICT-HEAL"),
    "slow-failure-detection": must_fail("MESH-FAILURE-DETECTION-BOUNDED"),
    "leave-as-crash": must_fail("MESH-LEAVE-REMOVES-AT-ONCE"),
    "discovered-name-reversed": must_fail("MESH-PROPAGATION-TRANSITIVE", "MESH-GATE-ABSENT-BEFORE-ACTIVE",
                                          "MESH-TRUST-ROTATION-SECOND-PIN"),
    "provider-cluster-announced": must_fail("MESH-GATE-PRESENT-AFTER-ACTIVE", "MESH-REMOTE-REQUEST-SERVED"),
}
