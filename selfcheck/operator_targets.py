"""Which producer conformance tests each operator breakage must make fail.

Targets are conformance ids as the report names them (``ID``, ``ID[param]``, ``ID[*]``; see
selfcheck/targets.py). Together the breakages of selfcheck/operator_breakages.py must cover every
conformance test of the producer suite. A target is listed only where the breakage certainly changes what
the test asserts; where waiting for the right overlay is the only way a test can see a breakage (a missing
ConfigMap, a status that never arrives) the run takes that test's full wait. ``startup_failure`` marks the
breakages whose symptom is a ConfigMap missing where the suite looks for it, which otherwise means that the
broken operator could not render at all.
"""

from __future__ import annotations

from selfcheck.targets import Targets, must_fail

__all__ = ["SUITE", "TARGETS"]

SUITE = "suites.producer"

TARGETS: dict[str, Targets] = {
    # ordering and groups
    "locality-before-admission": must_fail("PROD-ORD-ADMISSION-FIRST[*]"),
    "freshness-ignored": must_fail("PROD-ORD-FRESHNESS[*]", "PROD-GRP-GEO-BOUNDARIES"),
    "score-ascending": must_fail("PROD-ORD-GEO-SCORE-WITHIN-TIER", "PROD-ORD-SCORE-FIRST-CROSS-SITE",
                                 "PROD-SCORE-QUEUE-DEPTH[*]", "PROD-SCORE-QUEUE-CAPACITY", "PROD-SCORE-KV-RERANK",
                                 "PROD-METRICS-POOL-FILTER"),
    "tie-break-reversed": must_fail("PROD-ORD-TIE-BREAK", "PROD-SCORE-QUEUE-CLAMP"),
    "score-splits-groups": must_fail("PROD-GRP-SCORES-NEVER-SPLIT", "PROD-GRP-SCORE-FIRST-SHARED",
                                     "PROD-ORD-GEO-SCORE-WITHIN-TIER"),
    "ranks-per-capability": must_fail("PROD-ORD-RANKS"),
    "ranks-before-dedup": must_fail("PROD-ORD-RANKS-AFTER-DEDUP"),
    "groups-across-capabilities": must_fail("PROD-GRP-PER-CAPABILITY"),
    # locality
    "zone-without-region": must_fail("PROD-ORD-ZONE-NEEDS-REGION", "PROD-ORD-GEO-TIERS"),
    "same-region-as-cross-region": must_fail("PROD-ORD-GEO-TIERS", "PROD-ORD-ZONE-NEEDS-REGION"),
    "missing-region-matches": must_fail("PROD-ORD-UNKNOWN-GEOGRAPHY"),
    "own-site-needs-geography": must_fail("PROD-ORD-LOCAL-SITE-BY-NAME"),
    # exclusion and access
    "api-provider-dropped": must_fail("PROD-API-PROVIDER-CANDIDATE"),
    "no-metrics-all-fresh": must_fail("PROD-ORD-NO-METRICS-POLICY"),
    "malformed-interval-defaulted": must_fail("PROD-RECONCILE-MALFORMED-INTERVAL[*]",
                                              expect="must fail the reconciliation"),
    "distributed-when-rendered": must_fail("PROD-STATUS-APPLY-FAILURE", expect="must stay the distributed"),
    "consumer-config-verbatim": must_fail("PROD-CONSUMER-CONFIG-GENERATED", expect="keep overlay-only fields"),
    "consumer-config-kept": must_fail("PROD-CONSUMER-CONFIG-INFERENCE-ONLY", expect="to be removed"),
    "unavailable-kept": must_fail("PROD-ORD-UNAVAILABLE-EXCLUDED"),
    "unhealthy-kept": must_fail("PROD-ORD-UNAVAILABLE-EXCLUDED", "PROD-ADM-INSTANT-UNHEALTHY-EXCLUDED[*]",
                                "PROD-ADM-STAB-HARD-FAILURE[*]"),
    "access-fails-open": must_fail("PROD-ACCESS-UNKNOWN-SITE-FAILS-CLOSED", "PROD-TOOL-ACCESS-UNKNOWN-SITE"),
    "access-selector-ignored": must_fail("PROD-ACCESS-SITE-SELECTOR", "PROD-ACCESS-UNKNOWN-SITE-FAILS-CLOSED",
                                         "PROD-TOOL-ACCESS-POLICY", "PROD-TOOL-ACCESS-UNKNOWN-SITE"),
    # tool candidates
    "tools-allowlist-ignored": must_fail("PROD-TOOL-ALLOWLIST"),
    "tool-allowlist-undiscovered": must_fail("PROD-TOOL-ALLOWLIST"),
    "tool-unavailable-kept": must_fail("PROD-TOOL-UNAVAILABLE-EXCLUDED"),
    "tool-access-ignored": must_fail("PROD-TOOL-ACCESS-POLICY", "PROD-TOOL-ACCESS-UNKNOWN-SITE"),
    # reconcile cadences (slow tests: judged with AGN_JUDGE_SLOW=1)
    "no-default-interval": must_fail("PROD-RECONCILE-DEFAULT-300", slow=True),
    "tls-cadence-uncapped": must_fail("PROD-RECONCILE-TLS-DEFAULT-60[*]", "PROD-RECONCILE-TLS-MAX-60[*]", slow=True),
    "tls-cap-default-only": must_fail("PROD-RECONCILE-TLS-MAX-60[*]", slow=True),
    "tools-admitted-by-pool": must_fail("PROD-TOOL-NO-INFERENCE-SIGNALS"),
    "tools-scored-by-pool": must_fail("PROD-TOOL-NO-INFERENCE-SIGNALS"),
    "tools-capacity-weighted": must_fail("PROD-TOOL-NO-INFERENCE-SIGNALS"),
    # envelope and ConfigMap
    "timestamp-in-digest": must_fail("PROD-ENV-CONTRACT", "PROD-ENV-REVISION-STABLE", "PROD-ENV-PROVENANCE-GENERATION",
                                     "PROD-CRED-ROTATION-KEEPS-REVISION"),
    "generation-fixed": must_fail("PROD-ENV-PROVENANCE-GENERATION"),
    "configmap-rewritten": must_fail("PROD-ENV-REVISION-STABLE"),
    "long-name-truncated-wrong": must_fail("PROD-ENV-EXT-CONFIGMAP-NAME-LONG", startup_failure=True),
    "configmap-named-after-network": must_fail("PROD-ENV-EXT-CONFIGMAP-NAME", startup_failure=True),
    "legacy-key-frozen": must_fail("PROD-ENV-REVISION-CHANGES[*]"),
    "legacy-key-missing": must_fail("PROD-ENV-CONFIGMAP-KEYS"),
    "selection-policy-dropped": must_fail("PROD-ENV-CONTRACT", "PROD-ENV-SELECTION-POLICY[deterministic]",
                                          "PROD-ENV-SELECTION-POLICY[roundRobin]", "PROD-ENV-SELECTION-POLICY[random]",
                                          "PROD-ENV-SELECTION-POLICY[weightedRandom]"),
    "default-mode-invented": must_fail("PROD-ENV-SELECTION-POLICY[omitted]"),
    "first-gateway-only": must_fail("PROD-ENV-MULTI-GATEWAY", startup_failure=True),
    "one-perspective": must_fail("PROD-ENV-MULTI-GATEWAY-PERSPECTIVE"),
    # status and resources
    "status-not-distributed": must_fail("PROD-STATUS-DISTRIBUTED", "PROD-ENV-REVISION-STABLE",
                                        "PROD-E2E-REVISION-STAGES"),
    "candidate-count-providers": must_fail("PROD-STATUS-CANDIDATE-COUNT"),
    "invalid-not-reported": must_fail("PROD-RES-INVALID-REJECTED[*]"),
    # credentials and weights
    "credential-dropped": must_fail("PROD-CRED-REFERENCE"),
    "token-leak": must_fail("PROD-CRED-NO-TOKEN"),
    "weights-not-copied": must_fail("PROD-WEIGHT-STATIC", "PROD-WEIGHT-RANGE-ENDS"),
    "dynamic-as-static": must_fail("PROD-WEIGHT-DYNAMIC"),
    "weight-bound-exclusive": must_fail("PROD-WEIGHT-RANGE-ENDS", "PROD-RES-INVALID-REJECTED[capacity-weight-1001]",
                                        "PROD-RES-INVALID-REJECTED[capacity-weight-too-large]"),
    "weight-bound-1001": must_fail("PROD-RES-INVALID-REJECTED[capacity-weight-1001]"),
    "weights-always": must_fail("PROD-WEIGHT-ABSENT-WITHOUT-STATIC[*]"),
    "weights-from-mode": must_fail("PROD-WEIGHT-WEIGHTED-NEEDS-STATIC"),
    # scoring
    "neutral-zero": must_fail("PROD-METRICS-MISSING-NEUTRAL[*]", "PROD-METRICS-NAN-DISCARDED",
                              "PROD-METRICS-PLAINTEXT-FAILURE-NEUTRAL"),
    "no-metrics-scored": must_fail("PROD-SCORE-NO-METRICS-NEUTRAL[*]", "PROD-GRP-NO-METRICS-NO-PREFERENCE"),
    "queue-capacity-ignored": must_fail("PROD-SCORE-QUEUE-CAPACITY", "PROD-SCORE-QUEUE-DEPTH[*]"),
    "no-clamp": must_fail("PROD-SCORE-QUEUE-CLAMP"),
    "nan-kept": must_fail("PROD-METRICS-NAN-DISCARDED", "PROD-METRICS-NAN-HEALTH-ABSENT"),
    "health-nan-as-zero": must_fail("PROD-METRICS-NAN-HEALTH-ABSENT"),
    "health-non-finite-kept": must_fail("PROD-METRICS-NAN-HEALTH-ABSENT"),
    # metrics scraping
    "stale-sample-reused": must_fail("PROD-METRICS-STALE-WINDOW", "PROD-METRICS-PLAINTEXT-FAILURE-NEUTRAL",
                                     "PROD-METRICS-TLS-FAILS-CLOSED[*]"),
    "stale-sample-dropped": must_fail("PROD-METRICS-STALE-WINDOW", "PROD-METRICS-TLS-FAILS-CLOSED[*]"),
    "stale-window-from-failure": must_fail("PROD-METRICS-STALE-WINDOW"),
    "tier-names-hyphenated": must_fail("PROD-ORD-TIER-NAMES"),
    "plaintext-fails-closed": must_fail("PROD-METRICS-PLAINTEXT-FAILURE-NEUTRAL"),
    "tls-fails-open": must_fail("PROD-METRICS-TLS-FAILS-CLOSED[*]", "PROD-METRICS-TLS-NO-SAMPLE-EXCLUDED[*]"),
    "spec-tls-ignored": must_fail("PROD-METRICS-TLS-FAILS-CLOSED[spec-tls]",
                                  "PROD-METRICS-TLS-NO-SAMPLE-EXCLUDED[spec-tls]"),
    "metrics-ca-ignored": must_fail("PROD-METRICS-TLS-SCRAPED", "PROD-METRICS-TLS-FAILS-CLOSED[*]",
                                    "PROD-METRICS-TLS-NO-SAMPLE-EXCLUDED[*]"),
    "scrape-once": must_fail("PROD-SCORE-QUEUE-RERANK", "PROD-SCORE-KV-RERANK", "PROD-METRICS-TLS-SCRAPED",
                             "PROD-E2E-METRIC-MOVES-TRAFFIC"),
    "pool-filter-ignored": must_fail("PROD-METRICS-POOL-FILTER"),
    "signal-names-ignored": must_fail("PROD-METRICS-SIGNAL-NAMES"),
    # admission
    "pressure-ignored": must_fail("PROD-ADM-INSTANT-PRESSURE[*]", "PROD-ORD-ADMISSION-FIRST[*]"),
    "pressure-latched": must_fail("PROD-ADM-INSTANT-RECOVERY"),
    "hysteresis-ignored": must_fail("PROD-ADM-STAB-ENTER-COUNT", "PROD-ADM-STAB-EXIT-HOLD-DOWN",
                                    "PROD-ADM-STAB-EXIT-COUNT", "PROD-ADM-STAB-RELAPSE-RESTARTS-RECOVERY"),
    "recovery-kept-on-relapse": must_fail("PROD-ADM-STAB-RELAPSE-RESTARTS-RECOVERY"),
    "hold-down-ignored": must_fail("PROD-ADM-STAB-EXIT-HOLD-DOWN"),
    "missing-metrics-ignored": must_fail("PROD-ADM-STAB-MISSING-EXISTING-ONLY[*]", "PROD-ADM-STAB-MISSING-EXCLUDED[*]"),
    "sample-counted-twice": must_fail("PROD-ADM-STAB-SAMPLE-ONCE"),
    "pressure-defaults-own": must_fail("PROD-ADM-STAB-DEFAULT-PRESSURE"),
    "minimum-state-default-zero": must_fail("PROD-ADM-STAB-DEFAULT-MINIMUM-STATE"),
    "not-configured-as-missing": must_fail("PROD-ADM-STAB-NOT-CONFIGURED[*]"),
    "missing-default-excluded": must_fail("PROD-ADM-STAB-MISSING-DEFAULT"),
    "recovery-defaults-own": must_fail("PROD-ADM-STAB-DEFAULT-RECOVERY"),
    "queue-capacity-assumed": must_fail("PROD-METRICS-DESTINATION-RATIO"),
    "strategy-cached": must_fail("PROD-SCORE-STRATEGY-CHANGE"),
    "local-phase-filtered": must_fail("PROD-ORD-LOCAL-NOT-PHASE-FILTERED[*]"),
    "stale-cache-wins": must_fail("PROD-METRICS-STALE-FRESH-WINS"),
    # tool discovery
    "tools-not-probed": must_fail("PROD-TOOL-DISCOVERY-PROBES", expect="discovered from"),
    "tools-probed-once": must_fail("PROD-TOOL-DISCOVERY-PROBES", expect="once the server lists alpha and gamma"),
    "tool-status-not-recorded": must_fail("PROD-TOOL-DISCOVERY-PROBES", expect="to record the discovered tools"),
    # overlay-sync (selfcheck/sync_breakages.py)
    "sync-digest-unchecked": must_fail("PROD-SYNC-INVALID-KEEPS-LKG[wrong-content-digest]",
                                       "PROD-SYNC-INVALID-KEEPS-LKG[stale-digest-after-edit]",
                                       "PROD-SYNC-READY-ONCE-SERVING", expect="invalid envelope"),
    "sync-scope-unchecked": must_fail("PROD-SYNC-INVALID-KEEPS-LKG[foreign-scope]", expect="invalid envelope"),
    "sync-in-place-write": must_fail("PROD-SYNC-ATOMIC-REPLACE", expect="in place"),
    "sync-deletes-on-reject": must_fail("PROD-SYNC-INVALID-KEEPS-LKG[*]", expect="invalid envelope"),
    "sync-ready-at-start": must_fail("PROD-SYNC-READY-ONCE-SERVING", expect="invalid envelope"),
    "sync-first-only": must_fail("PROD-SYNC-DELIVERS-EACH-REVISION", expect="the next revision"),
    "sync-healthy-after-refusal": must_fail("PROD-SYNC-METRICS", expect="ready and degraded"),
    "stale-cache-kept-across-restart": must_fail("PROD-METRICS-STALE-CACHE-PER-PROCESS",
                                                 expect="the new process has no cached sample"),
    "admission-kept-across-restart": must_fail("PROD-ADM-STAB-RESTART-RESETS-COUNT",
                                               expect="forced reconcile after the restart"),
    "periodic-ignored": must_fail("PROD-RECONCILE-PERIODIC[*]"),
    "providers-across-networks": must_fail("PROD-RENDER-PER-NETWORK[*]", "PROD-RENDER-PER-NETWORK-TOOLS[*]"),
    "signal-name-falls-back": must_fail("PROD-METRICS-SIGNAL-NAME-UNMATCHED"),
    "kv-scored-squared": must_fail("PROD-SCORE-KV-FORMULA"),
    "admission-reads-queue": must_fail("PROD-ADM-KV-SIGNAL"),
    "tools-keyed-by-name": must_fail("PROD-TOOL-SAME-NAME-AS-PROVIDER"),
    "minimum-state-on-entry-only": must_fail("PROD-ADM-STAB-EXIT-MINIMUM-STATE"),
    "scores-as-weights": must_fail("PROD-GRP-SCORES-NOT-WEIGHTS"),
    "interval-whole-seconds-only": must_fail("PROD-RECONCILE-PERIODIC[1500ms]"),
    # signals endpoint
    "signals-in-flight-concluded": must_fail("PROD-SIGNALS-RELAY"),
    "signals-without-client-certificates": must_fail("PROD-SIGNALS-MTLS"),
}
