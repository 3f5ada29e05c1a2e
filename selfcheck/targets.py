"""Which conformance tests each breakage must make fail, and how to select exactly those tests.

Targets are conformance ids as the report names them: ``ID`` for a plain test, ``ID[param]`` for one
parametrized case and ``ID[*]`` for every case of a parametrized test. ``TARGETS`` is the table of the
broken gateways (selfcheck/breakages.py); together they must cover every conformance test of the
consumer suite. The broken operators have their own table in selfcheck/operator_targets.py.

Run as ``python -m selfcheck.targets [PACKAGE]`` (from the repository root; PACKAGE defaults to the
consumer suite) to print, as JSON, every conformance id of the suite with the module and the pytest item
name that run it; the judge uses them to select exactly the target tests of a breakage.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["SUITE", "TARGETS", "SuiteTest", "Targets", "collect_ids", "expand", "keyword_expression", "load_ids",
           "modules", "must_fail"]

SUITE = "suites.consumer"
DID_NOT_RAISE = "DID NOT RAISE"


@dataclass(frozen=True)
class Targets:
    """The tests a breakage must fail, and how a failure for the right reason reads.

    `expect`: text every failure report must contain. `startup_failure`: the broken behaviour is a
    refusal to start (or, for an operator, to write the ConfigMap where the suite looks for it), so that
    is the expected symptom rather than a wrong reason. `slow`: the targets are slow tests (they wait out a
    default cadence of minutes), judged only when AGN_JUDGE_SLOW=1 and then with their full deadlines.
    `statistical`: a target judges a planned sample, and the breakage sits at the alternative the plan states
    its power against (0.99), so a correct suite misses it in about one run in a hundred; the judge then
    runs the targets once more, and reports the miss only when the second run misses as well (about 1e-4).
    """

    ids: tuple[str, ...]
    expect: str | None = None
    startup_failure: bool = False
    slow: bool = False
    statistical: bool = False


def must_fail(*ids: str, expect: str | None = None, startup_failure: bool = False, slow: bool = False,
              statistical: bool = False) -> Targets:
    """Targets written the way the tables read: the ids, then how their failures must read."""
    return Targets(ids, expect, startup_failure, slow, statistical)


_t = must_fail


TARGETS: dict[str, Targets] = {
    "accept-any-cold-start": _t("CONS-COLD-REJECT[*]", "CONS-COLD-REJECT-STRICT[*]", "CONS-COLD-REJECT-LIMITS[*]",
                                "CONS-COLD-REJECT-WEIGHTED[*]",
                                "CONS-COLD-EXPECTED-SCOPE[*]", "CONS-COLD-LEGACY-SCOPED",
                                "CONS-COLD-LEGACY-EMPTY", expect=DID_NOT_RAISE),
    "accept-wrong-digest": _t("CONS-RELOAD-REJECT[wrong-content-digest]", "CONS-RELOAD-REJECT[stale-digest-after-edit]",
                              "CONS-COLD-REJECT[wrong-content-digest]"),
    "refuse-legacy": _t("CONS-COLD-LEGACY-ACCEPT", expect="legacy_not_allowed", startup_failure=True),
    "empty-is-invalid": _t("CONS-404-EMPTY-AUTHORITATIVE"),
    "wrong-revision-header": _t("CONS-COLD-ACCEPT", "CONS-RELOAD-ACCEPT[*]"),
    "drop-lkg-on-reject": _t("CONS-RELOAD-REJECT[*]", "CONS-RELOAD-REJECT-STRICT[*]", "CONS-RELOAD-REJECT-LIMITS[*]",
                             "CONS-RELOAD-REJECT-WEIGHTED[*]",
                             "CONS-RELOAD-SCOPE[*]", "CONS-RELOAD-LEGACY-SCOPED",
                             "CONS-CLUSTERS-ALLOWLIST", "CONS-RELOAD-FILE-REMOVED"),
    "slow-reload": _t("CONS-RELOAD-DEADLINE"),
    "reload-once": _t("CONS-RELOAD-SEQUENCE", "CONS-RELOAD-AFTER-REJECT"),
    "stuck-after-reject": _t("CONS-RELOAD-AFTER-REJECT"),
    "ignore-allowlist": _t("CONS-CLUSTERS-ALLOWLIST"),
    "unchanged-swaps": _t("CONS-REV-UNCHANGED-NO-SWAP"),
    "stale-revision": _t("CONS-HOP-CONSISTENT-SNAPSHOT"),
    "ignore-groups": _t("CONS-SEL-ROUND-ROBIN", "CONS-SEL-ROUND-ROBIN-FALLBACK", "CONS-SEL-RANDOM",
                        "CONS-SEL-WEIGHTED[*]", "CONS-GEN-AFFINITY"),
    "last-group-first": _t("CONS-SEL-ROUND-ROBIN", "CONS-SEL-RANDOM", "CONS-GEN-ROUTING", "CONS-GEN-AFFINITY"),
    "existing-only-eligible": _t("CONS-SEL-DETERMINISTIC-DEFAULT", "CONS-GROUP-FALLBACK-EXISTING-ONLY",
                                 "CONS-ADMISSION-EXISTING-ONLY-NEW", "CONS-AFFINITY-EXISTING-ONLY",
                                 "CONS-SEL-ROUND-ROBIN-FALLBACK", "CONS-GEN-ROUTING", "CONS-GEN-AFFINITY"),
    "none-eligible": _t("CONS-GROUP-FALLBACK-NONE", "CONS-ADMISSION-NONE-NEVER", "CONS-AFFINITY-FAILOVER-EXCLUDED",
                        "CONS-GEN-ROUTING", "CONS-GEN-AFFINITY"),
    "binding-crosses-capabilities": _t("CONS-AFFINITY-PER-CAPABILITY"),
    "session-gauge-counts-providers": _t("CONS-METRICS-SESSION-TABLE-ENTRIES"),
    "reload-aborts-in-flight": _t("CONS-RELOAD-IN-FLIGHT"),
    "declared-clusters-as-allowlist": _t("CONS-RELOAD-UNDECLARED-CLUSTER-WITHOUT-LIST"),
    "clusters-not-checked-at-startup": _t("CONS-CLUSTERS-ALLOWLIST-STARTUP"),
    "random-modes-skip-affinity": _t("CONS-AFFINITY-WITH-RANDOM", "CONS-AFFINITY-WITH-WEIGHTED", "CONS-GEN-AFFINITY"),
    "retry-on-5xx": _t("CONS-GROUP-FALLBACK-NO-RETRY"),
    "stale-excluded": _t("CONS-STALE-LAST-RESORT", "CONS-STALE-PRODUCER-ORDER", "CONS-GEN-ROUTING",
                         "CONS-GEN-AFFINITY"),
    "fresh-first": _t("CONS-STALE-PRODUCER-ORDER", "CONS-GEN-ROUTING", "CONS-GEN-AFFINITY"),
    "rr-all-groups": _t("CONS-SEL-ROUND-ROBIN", "CONS-SEL-ROUND-ROBIN-FALLBACK", "CONS-GEN-AFFINITY"),
    "weights-off": _t("CONS-SEL-WEIGHTED[*]"),
    "random-biased": _t("CONS-SEL-RANDOM"),
    "deterministic-picks-last": _t("CONS-SEL-DETERMINISTIC", "CONS-GEN-ROUTING", "CONS-GEN-AFFINITY"),
    "policy-without-groups-applies": _t("CONS-SEL-POLICY-WITHOUT-GROUPS", "CONS-GEN-ROUTING", "CONS-GEN-AFFINITY"),
    "affinity-overrides-admission": _t("CONS-AFFINITY-FAILOVER-EXCLUDED", "CONS-GEN-AFFINITY"),
    "static-reversed": _t("CONS-STATIC-DETERMINISTIC"),
    "cookie-first-of-header": _t("CONS-AFFINITY-COOKIE-AMONG-OTHERS"),
    "static-empty-accepted": _t("CONS-STATIC-EMPTY"),
    "static-clusters-unchecked": _t("CONS-STATIC-UNDECLARED-CLUSTER"),
    "rr-least-request": _t("CONS-SEL-ROUND-ROBIN-CONCURRENT"),
    "overlay-clusters-validated-at-start": _t("CONS-COLD-UNDECLARED-CLUSTER-NOT-VALIDATED", startup_failure=True),
    "local-site-preferred": _t("CONS-SEL-CROSS-SITE-GROUP[*]", "CONS-SEL-CROSS-SITE-GROUP-WEIGHTED[*]",
                               "CONS-GEN-ROUTING", "CONS-GEN-AFFINITY"),
    "draws-ignore-admission": _t("CONS-ADMISSION-DRAWS-SKIP-INELIGIBLE[*]",
                                 "CONS-ADMISSION-DRAWS-SKIP-INELIGIBLE-WEIGHTED[*]", "CONS-GEN-ROUTING",
                                 "CONS-GEN-AFFINITY"),
    "reload-off-by-default": _t("CONS-RELOAD-DEFAULT-ENABLED"),
    "malformed-envelope-as-legacy": _t("CONS-COLD-NO-LEGACY-FALLBACK"),
    "static-unknown-fields-ignored": _t("CONS-STATIC-UNKNOWN-FIELD"),
    "static-weights-honoured": _t("CONS-STATIC-NO-WEIGHTED"),
    "no-affinity": _t("CONS-AFFINITY-HEADER-REUSE", "CONS-AFFINITY-EXISTING-ONLY", "CONS-AFFINITY-FAILOVER-GONE",
                      "CONS-AFFINITY-COOKIE", "CONS-AFFINITY-WITH-ROUND-ROBIN", "CONS-METRICS-SERIES",
                      "CONS-GEN-AFFINITY"),
    "no-cookie": _t("CONS-AFFINITY-COOKIE"),
    "bind-unkeyed": _t("CONS-AFFINITY-NO-KEY", "CONS-GEN-ROUTING", "CONS-GEN-AFFINITY"),
    "no-ttl": _t("CONS-AFFINITY-TTL"),
    "failover-no-rebind": _t("CONS-AFFINITY-FAILOVER-GONE"),
    "vanished-binding-refused": _t("CONS-AFFINITY-FAILOVER-GONE", "CONS-GEN-AFFINITY"),
    "no-strip-hop": _t("CONS-HOP-SET-FROM-SNAPSHOT", "CONS-HOP-STRIPPED-NON-HOP", "CONS-HOP-REQUEST-ID-FRESH"),
    "fixed-request-id": _t("CONS-HOP-REQUEST-ID-FRESH"),
    "wrong-default-stable-id": _t("CONS-HOP-DEFAULT-STABLE-ID"),
    "forward-credential": _t("CONS-HOP-NO-CREDENTIAL"),
    "no-model-validation": _t("CONS-400-INVALID-MODEL[*]", "CONS-400-MODEL-LIMITS[*]"),
    "short-model-limit": _t("CONS-400-MODEL-LIMITS[257-bytes]"),
    "unknown-model-fallback": _t("CONS-404-UNKNOWN-MODEL", "CONS-GEN-ROUTING", "CONS-GEN-AFFINITY"),
    "kind-agnostic": _t("CONS-404-OTHER-KIND"),
    "missing-model-default": _t("CONS-MISSING-MODEL-NOT-ROUTED"),
    "ignore-skip-paths": _t("CONS-SKIP-PATHS"),
    "boundary-less-skip": _t("CONS-SKIP-PATHS"),
    "no-management-cluster": _t("CONS-MANAGEMENT-CLUSTER"),
    "ignore-mcp": _t("CONS-MCP-TOOL-ROUTING"),
    "metrics-miscount": _t("CONS-METRICS-SERIES"),
    "metrics-no-reload-count": _t("CONS-METRICS-RELOADS"),
    "metrics-label-leak": _t("CONS-METRICS-CLOSED-LABELS"),
    "hop-without-client-cert": _t("CONS-HOP-MTLS", expect="listens for mTLS only"),
    # ---- hop headers, skip paths, MCP and metrics strength
    "hop-strip-case-sensitive": _t("CONS-HOP-MIXED-CASE-SPOOF", expect="a non-hop cluster must receive no"),
    "bound-request-id": _t("CONS-HOP-REQUEST-ID-FRESH-BOUND", expect="each request of one session needs its own id"),
    "validate-before-skip": _t("CONS-SKIP-PATHS-BEFORE-LOOKUP", expect="neither validated nor routed by model"),
    "blank-tool-looked-up": _t("CONS-MCP-BLANK-TOOL", expect="a blank tool name"),
    "model-over-mcp": _t("CONS-MCP-TOOL-OVER-MODEL", expect="must match the tool"),
    "failover-counted-as-reuse": _t("CONS-METRICS-SESSION-FAILOVER", expect="a failover is counted as one"),
    "snapshot-gauge-admitted-only": _t("CONS-METRICS-SNAPSHOT-CANDIDATES", expect="the gauge says"),
    # ---- selection and reload strength
    "rr-shared-cursor": _t("CONS-SEL-ROUND-ROBIN-PER-CAPABILITY", expect="its requests interleaved with the other"),
    "epp-queried-per-request": _t("CONS-SEL-NO-REQUEST-TIME-METRICS[*]", expect="a lookup per request"),
    "inject-first-reference": _t("CONS-CRED-INJECT-SELECTED", expect="must receive its own candidate's token"),
    "inject-token-per-cluster": _t("CONS-CRED-RELOAD-SELECTS-CONFIGURED-TOKEN", "CONS-CRED-PROJECTED-NEW-SECRET",
                                   expect="not the first"),
    "credential-file-per-request": _t("CONS-CRED-FILE-READ-AT-CONSTRUCTION", expect="must still be served"),
    "projected-startup-only": _t("CONS-CRED-PROJECTED-NEW-SECRET", expect="Secret the overlay selects"),
    "inject-provider-route-only": _t("CONS-CRED-INJECT-SELECTED", "CONS-CRED-API-FALLBACK", expect="token"),
    "local-site-fixed": _t("CONS-RELOAD-LOCAL-SITE"),
    "filter-duration-always": _t("CONS-METRICS-FILTER-DURATION", expect="still exports"),
    "preset-cluster-overridden": _t("CONS-PRESET-CLUSTER-PRESERVED", expect="must keep the router's cluster"),
    "rr-grid-cursor": _t("CONS-SEL-ROUND-ROBIN-PER-GATEWAY", expect="alternating with the other gateway"),
    "two-groups-searched": _t("CONS-GROUP-FALLBACK-DEEP", expect="provider-c serves every new request"),
    "omitted-policy-round-robin": _t("CONS-SEL-GROUPS-WITHOUT-POLICY", expect="are selected deterministically"),
    "weights-as-percentages": _t("CONS-SEL-WEIGHTED[1000-100]", expect="selection distribution does not match"),
    "empty-with-mode-503": _t("CONS-404-EMPTY-EVERY-MODE[*]", expect="rejects the model with 404; got 503"),
    "unchanged-vs-last-read": _t("CONS-REV-UNCHANGED-AFTER-REJECT", expect="broke its cycle"),
}


def expand(patterns: Iterable[str], known: Iterable[str], suite: str = SUITE) -> list[str]:
    """The conformance ids `patterns` name among `known` (the ids of `suite`); ValueError for one naming none."""
    known_ids = list(known)
    out: list[str] = []
    for pattern in patterns:
        if pattern.endswith("[*]"):
            prefix = pattern[:-2]
            matched = [test_id for test_id in known_ids if test_id.startswith(prefix)]
        else:
            matched = [pattern] if pattern in known_ids else []
        if not matched:
            raise ValueError(f"target {pattern!r} names no conformance test of {suite}")
        out.extend(test_id for test_id in matched if test_id not in out)
    return out


@dataclass(frozen=True)
class SuiteTest:
    """Where a conformance test lives: its module (importable name) and its pytest item name."""

    module: str
    name: str


def keyword_expression(ids: Iterable[str], tests: Mapping[str, SuiteTest]) -> str:
    """A pytest ``-k`` expression selecting exactly the items that run `ids`.

    A test function whose cases are all selected is named once without its parameters.
    """
    wanted = set(ids)
    by_function: dict[str, list[str]] = {}
    for test_id, test in tests.items():
        by_function.setdefault(test.name.partition("[")[0], []).append(test_id)
    terms: list[str] = []
    for function, cases in sorted(by_function.items()):
        chosen = [case for case in cases if case in wanted]
        if not chosen:
            continue
        if len(chosen) == len(cases):
            terms.append(function)
        else:
            terms.extend(tests[case].name for case in sorted(chosen))
    return " or ".join(terms)


def modules(ids: Iterable[str], tests: Mapping[str, SuiteTest]) -> list[str]:
    """The suite modules that hold `ids`, so a run imports only what it runs."""
    return sorted({tests[test_id].module for test_id in ids})


class _Collector:
    """pytest plugin object: the conformance id of every collected item, with its module and name."""

    def __init__(self) -> None:
        self.tests: dict[str, SuiteTest] = {}

    def pytest_collection_finish(self, session: Any) -> None:
        for item in session.items:
            marker = item.get_closest_marker("conformance")
            if marker is None:
                continue
            test_id = str(marker.kwargs["id"])
            callspec = getattr(item, "callspec", None)
            if callspec is not None:
                test_id = f"{test_id}[{callspec.id}]"
            self.tests[test_id] = SuiteTest(item.module.__name__, item.name)


def collect_ids(package: str = SUITE) -> dict[str, SuiteTest]:
    """Collect `package` with pytest in this process: conformance id -> where the test lives."""
    import pytest

    collector = _Collector()
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "--pyargs", package],
                           plugins=[collector])
    if code != 0:
        raise RuntimeError(f"collecting {package} failed (pytest exit code {code}):\n{captured.getvalue()}")
    return collector.tests


def load_ids(text: str) -> dict[str, SuiteTest]:
    """Read what ``main`` prints back into SuiteTest values."""
    return {test_id: SuiteTest(**fields) for test_id, fields in json.loads(text).items()}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1:
        print("usage: python -m selfcheck.targets [PACKAGE]", file=sys.stderr)
        return 2
    try:
        tests = collect_ids(args[0] if args else SUITE)
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    json.dump({test_id: dataclasses.asdict(test) for test_id, test in tests.items()}, sys.stdout, indent=1,
              sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
