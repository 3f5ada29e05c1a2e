"""Which provider conformance tests each broken provider gateway must make fail.

Targets are conformance ids as the report names them (``ID``, ``ID[param]``, ``ID[*]``; see
selfcheck/targets.py). Together the breakages of selfcheck/provider_breakages.py must cover every
conformance test of the provider suite, the extended credential sources included. A target is listed
only where the breakage certainly changes what the test asserts. ``startup_failure`` marks the breakage
whose symptom is a provider gateway that refuses to start.
"""

from __future__ import annotations

from selfcheck.targets import DID_NOT_RAISE, Targets, must_fail

__all__ = ["SUITE", "TARGETS"]

SUITE = "suites.provider"

TARGETS: dict[str, Targets] = {
    # listener mTLS and peer_identity_trust
    "client-cert-not-verified": must_fail("PROV-MTLS-NO-CLIENT-CERT", "PROV-MTLS-OTHER-CA", "PROV-MTLS-EXPIRED",
                                          expect="must be refused"),
    "any-organization": must_fail("PROV-TRUST-WRONG-ORGANIZATION", "PROV-TRUST-ENTRY-ALL-FIELDS",
                                  expect="must be refused"),
    "organization-case-insensitive": must_fail("PROV-TRUST-ORGANIZATION-EXACT", expect="must be refused"),
    "entry-any-field": must_fail("PROV-TRUST-UNLISTED-DIGEST", "PROV-TRUST-ENTRY-ALL-FIELDS", expect="must be refused"),
    "trust-after-routing": must_fail("PROV-TRUST-BEFORE-ROUTING[*]", expect="must get 403 from peer_identity_trust"),
    # provider_route
    "hop-headers-forwarded": must_fail("PROV-HOP-SPOOF-THROUGH-EDGE", "PROV-HOP-CONSUMED", "PROV-HOP-HEADER-CASE[*]",
                                       "PROV-HOP-SPOOF-CASE-COPY[*]", expect="x-ai-routing-* reached the backend"),
    "session-pins-route": must_fail("PROV-HOP-NO-AFFINITY", expect="must be served by"),
    "hop-headers-exact-case": must_fail("PROV-HOP-HEADER-CASE[*]", "PROV-HOP-SPOOF-CASE-COPY[*]",
                                        expect="x-ai-routing-* reached the backend"),
    "revision-not-checked": must_fail("PROV-HOP-MALFORMED-REVISION[*]", "PROV-ROUTE-STATUS[malformed-revision]",
                                      expect="must be refused"),
    # routed by model: the last route of MODEL (the spoof target's backend) serves every request for it
    "unknown-candidate-routed": must_fail("PROV-HOP-UNKNOWN-CANDIDATE[*]", "PROV-TRUST-TRUSTED-PEER[*]",
                                          "PROV-HOP-SPOOF-THROUGH-EDGE", "PROV-CRED-CLIENT-AUTH-REPLACED",
                                          "PROV-HOP-CANDIDATE-EXACT",
                                          "PROV-ROUTE-STATUS[unknown-candidate]",
                                          "PROV-ROUTE-STATUS[missing-candidate]", expect="backend=model-b1"),
    "candidate-case-insensitive": must_fail("PROV-HOP-CANDIDATE-EXACT", expect="must be refused"),
    "model-case-insensitive": must_fail("PROV-ROUTE-MODEL-EXACT", expect="must be refused"),
    # the fake backend answers a path outside its model API with an uncounted 200 echo
    "path-prefix-match": must_fail("PROV-ROUTE-PATH-EXACT[*]", expect="must be refused"),
    "request-id-not-required": must_fail("PROV-HOP-MISSING-REQUEST-ID", "PROV-ROUTE-STATUS[missing-request-id]",
                                         expect="must be refused"),
    "route-checks-skipped": must_fail("PROV-ROUTE-MODEL-MISMATCH[*]", "PROV-ROUTE-PATH-MISMATCH",
                                      "PROV-ROUTE-MISSING-MODEL", "PROV-ROUTE-STATUS[missing-model]",
                                      "PROV-ROUTE-STATUS[model-mismatch]", "PROV-ROUTE-STATUS[path-mismatch]",
                                      expect="200 backend=model-b2"),
    # still refused, with another status than the public provider_route's
    "route-refusals-forbidden": must_fail("PROV-ROUTE-STATUS[missing-model]", "PROV-ROUTE-STATUS[model-mismatch]",
                                          "PROV-ROUTE-STATUS[path-mismatch]", expect="got 403"),
    "hop-refusals-bad-request": must_fail("PROV-ROUTE-STATUS[unknown-candidate]",
                                          "PROV-ROUTE-STATUS[missing-candidate]",
                                          "PROV-ROUTE-STATUS[missing-request-id]",
                                          "PROV-ROUTE-STATUS[malformed-revision]", expect="got 400"),
    # both tests send x-ai-provider-routing-revision: eeee...e (64) as the client
    "provider-revision-from-client": must_fail("PROV-HOP-SPOOF-THROUGH-EDGE", "PROV-HOP-CONSUMED", expect="e" * 64),
    # credentials
    "client-authorization-kept": must_fail("PROV-CRED-CLIENT-AUTH-REPLACED",
                                           "PROV-CRED-NO-CLIENT-AUTH-WITHOUT-CREDENTIAL",
                                           "PROV-CRED-UNRESOLVED-NO-LEAK[*]", "PROV-CRED-DUPLICATE-CLIENT-AUTH[*]",
                                           expect="client-supplied-secret"),
    "credential-replaces-first-authorization": must_fail("PROV-CRED-DUPLICATE-CLIENT-AUTH[*]",
                                                         expect="client-second-secret"),
    # the twin of the unresolved-reference test gets a token injected, which is logged
    "token-logged": must_fail("PROV-CRED-NO-LEAK", "PROV-CRED-ENV-SOURCE", "PROV-CRED-VALUE-SOURCE",
                              "PROV-CRED-UNRESOLVED-NO-LEAK[*]"),
    "credential-fallback": must_fail("PROV-CRED-UNRESOLVED-NO-LEAK[*]", "PROV-CRED-FAIL-CLOSED[*]",
                                     expect="has no configured token"),
    "credential-miss-logs-known": must_fail("PROV-CRED-UNRESOLVED-NO-LEAK[*]", expect="the provider gateway's log"),
    "credential-miss-fail-open": must_fail("PROV-CRED-FAIL-CLOSED[*]", expect="must get 503"),
    "credential-unknown-field-accepted": must_fail("PROV-CRED-UNKNOWN-FIELD-REJECTED[*]", expect=DID_NOT_RAISE),
    # the consumer's provider hop
    "upstream-server-not-verified": must_fail("PROV-HOP-PROVIDER-CERT-VERIFIED[*]", expect="the request was served"),
    # startup validation
    "startup-rules-not-enforced": must_fail("PROV-START-CLIENT-CERT-REQUIRED[*]", "PROV-START-TRUST-FIRST[*]",
                                            expect=DID_NOT_RAISE),
    "provider-instance-limit": must_fail("PROV-START-VALID-PROVIDER", expect="provider gateways per host",
                                         startup_failure=True),
}
