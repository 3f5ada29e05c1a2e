"""Which provider conformance tests each broken provider gateway must make fail.

Targets are conformance ids as the report names them (``ID``, ``ID[param]``, ``ID[*]``; see
tests/broken/targets.py). Together the breakages of tests/broken/provider_breakages.py must cover every
conformance test of the provider suite, the extended credential sources included. A target is listed
only where the breakage certainly changes what the test asserts. ``startup_failure`` marks the breakage
whose symptom is a provider gateway that refuses to start.
"""

from __future__ import annotations

from tests.broken.targets import DID_NOT_RAISE, Targets, must_fail

__all__ = ["SUITE", "TARGETS"]

SUITE = "suites.provider"

TARGETS: dict[str, Targets] = {
    # listener mTLS and peer_identity_trust
    "client-cert-not-verified": must_fail("PROV-MTLS-NO-CLIENT-CERT", "PROV-MTLS-OTHER-CA", "PROV-MTLS-EXPIRED",
                                          expect="must be refused"),
    "any-organization": must_fail("PROV-TRUST-WRONG-ORGANIZATION", "PROV-TRUST-ENTRY-ALL-FIELDS",
                                  expect="must be refused"),
    "entry-any-field": must_fail("PROV-TRUST-UNLISTED-DIGEST", "PROV-TRUST-ENTRY-ALL-FIELDS", expect="must be refused"),
    "trust-after-routing": must_fail("PROV-TRUST-BEFORE-ROUTING[*]", "PROV-HOP-UNKNOWN-CANDIDATE[unknown]"),
    # provider_route
    "hop-headers-forwarded": must_fail("PROV-HOP-SPOOF-THROUGH-EDGE", "PROV-HOP-CONSUMED",
                                       expect="x-ai-routing-* reached the backend"),
    "revision-not-checked": must_fail("PROV-HOP-MALFORMED-REVISION[*]", expect="must give 403"),
    # routed by model: the last route of MODEL (the spoof target's backend) serves every request for it
    "unknown-candidate-routed": must_fail("PROV-HOP-UNKNOWN-CANDIDATE[*]", "PROV-TRUST-TRUSTED-PEER[*]",
                                          "PROV-HOP-SPOOF-THROUGH-EDGE", "PROV-CRED-CLIENT-AUTH-REPLACED",
                                          expect="backend=model-b1"),
    "request-id-not-required": must_fail("PROV-HOP-MISSING-REQUEST-ID", expect="must give 403"),
    "route-checks-skipped": must_fail("PROV-ROUTE-MODEL-MISMATCH[*]", "PROV-ROUTE-PATH-MISMATCH",
                                      "PROV-ROUTE-MISSING-MODEL", expect="200 backend=model-b2"),
    # both tests send x-ai-provider-routing-revision: eeee...e (64) as the client
    "provider-revision-from-client": must_fail("PROV-HOP-SPOOF-THROUGH-EDGE", "PROV-HOP-CONSUMED", expect="e" * 64),
    # credentials
    "client-authorization-kept": must_fail("PROV-CRED-CLIENT-AUTH-REPLACED",
                                           "PROV-CRED-NO-CLIENT-AUTH-WITHOUT-CREDENTIAL",
                                           expect="client-supplied-secret"),
    "token-logged": must_fail("PROV-CRED-NO-LEAK", "PROV-CRED-ENV-SOURCE", "PROV-CRED-VALUE-SOURCE"),
    "credential-unknown-field-accepted": must_fail("PROV-CRED-UNKNOWN-FIELD-REJECTED[*]", expect=DID_NOT_RAISE),
    # startup validation
    "startup-rules-not-enforced": must_fail("PROV-START-CLIENT-CERT-REQUIRED[*]", "PROV-START-TRUST-FIRST[*]",
                                            expect=DID_NOT_RAISE),
    "provider-instance-limit": must_fail("PROV-START-VALID-PROVIDER", expect="provider gateways per host",
                                         startup_failure=True),
}
