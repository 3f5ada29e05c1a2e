"""Envelope and legacy validation through the running gateway: cold start and hot reload.

Every rejection is judged twice, at cold start and on reload, from one list of cases, so both paths are
held to the same rules. Each case carries its twin, the minimally different overlay the gateway must
accept: a refusal counts only when the same gateway takes the twin. Rules that only the public Praxis
AI code gives are extended features (strictOverlayValidation, exactValueLimits), so a gateway that
follows the spec alone can decline them; the weight rules sit under weightedRandom, whose overlays a
gateway without that mode refuses twin and all.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from harness import contract
from harness.backends.local import GatewayStartFailed
from harness.grid import Gateway, Site
from harness.suite_support import ReloadProbe

SPEC = "routing-architecture-and-overlay-contract: Routing overlay format, Revision semantics"
COLD = "; intelligent-route-filter: \"Invalid cold-start envelopes fail filter construction.\""
RELOAD = "; intelligent-route-filter: \"Unreadable or invalid files retain the previous snapshot.\""
#: The statements a refusal judges on each path, besides those of its case (contract.Case.statements).
COLD_STATEMENTS = ("IR-ENVELOPE-COLD-START-FAILS", "OC-LIFECYCLE-COLD-START-FAILS-CLOSED",
                   "IR-ENVELOPE-LIFECYCLE-ACCEPTED", "OC-FORMAT-ENVELOPE-AUTHORITATIVE")
RELOAD_STATEMENTS = ("IR-RELOAD-INVALID-RETAINS", "IR-ENVELOPE-RELOAD-RETAINS-LKG", "OC-LIFECYCLE-INVALID-UPDATE-LKG",
                     "OC-DELIVERY-INVALID-LKG", "RG-RELOAD-INVALID-LKG", "IR-ENVELOPE-LIFECYCLE-ACCEPTED")
BASE_MODEL = "validation-model"
#: Conformance id suffix and feature of a case, by the feature that gates it (None: core).
_LEVELS: dict[str | None, tuple[str, str, str]] = {
    None: ("", "core", "overlayValidation"),
    contract.STRICT: ("-STRICT", "extended", contract.STRICT),
    contract.LIMITS: ("-LIMITS", "extended", contract.LIMITS),
    contract.WEIGHTED: ("-WEIGHTED", "extended", contract.WEIGHTED),
}


@functools.lru_cache(maxsize=4)
def _rejections(scope: contract.ScopeSpec) -> dict[str, contract.Case]:
    base = contract.envelope(
        [contract.candidate(BASE_MODEL, scope.local_site, cluster) for cluster in ("provider-a", "provider-b")], scope)
    return {case.name: case for case in contract.rejection_cases(base)}


def _case(site: Site, name: str) -> contract.Case:
    return _rejections(site.scope)[name]


def _params(prefix: str, path: str, statements: tuple[str, ...]) -> list[Any]:
    """One parameter per rejection case, each marked with its own id, level, feature and rule, and with the
    statements of its case and of the path (`statements`)."""
    out = []
    # names, features and rules do not depend on the scope; the site's own is used when the test runs
    for case in _rejections(contract.ScopeSpec("n", "g", "ns", "s")).values():
        suffix, level, feature = _LEVELS[case.feature]
        marker = pytest.mark.conformance(id=prefix + suffix, profile="consumer", level=level, feature=feature,
                                         spec=case.spec + path, statements=[*case.statements, *statements])
        out.append(pytest.param(case.name, id=case.name, marks=marker))
    return out


class ColdStarts:
    """Starts gateways on an overlay and remembers what each twin did, so a twin shared by several cases
    starts once per module."""

    def __init__(self, start: Callable[..., Gateway], stop: Callable[[Gateway], Any]) -> None:
        self._start = start
        self._stop = stop
        self._twins: dict[tuple[str, bytes], str | None] = {}

    def refused(self, variant: str, data: bytes, what: str) -> GatewayStartFailed:
        with pytest.raises(GatewayStartFailed) as failure:
            gateway = self._start(variant, data)
            self._stop(gateway)
        assert failure.value.exit_code not in (None, 0), f"a gateway with {what} must exit non-zero; it {failure.value}"
        return failure.value

    def serves(self, variant: str, data: bytes, model: str, what: str) -> str | None:
        """Start on `data` and return the revision it serves for `model` (None for legacy), or fail naming why."""
        key = (variant, data)
        if key not in self._twins:
            try:
                gateway = self._start(variant, data)
            except GatewayStartFailed as exc:
                pytest.fail(f"the twin ({what}) must start, or the refusal cannot be told from refusing everything; "
                            f"it did not: {exc}")
            try:
                reply = gateway.request(model)
                assert reply.status == 200, f"the twin ({what}) started but answers {reply.describe()}"
                self._twins[key] = reply.forwarded_headers.get(gateway.revision_header)
            finally:
                self._stop(gateway)
        return self._twins[key]


@pytest.fixture(scope="module")
def cold(site: Site) -> Iterator[ColdStarts]:
    started: list[Gateway] = []

    def start(variant: str, data: bytes) -> Gateway:
        gateway = site.start_gateway(variant, data)
        started.append(gateway)
        return gateway

    def stop(gateway: Gateway) -> None:
        started.remove(gateway)
        site.stop_gateway(gateway)

    yield ColdStarts(start, stop)
    for gateway in list(started):
        site.stop_gateway(gateway)


@pytest.mark.conformance(
    id="CONS-COLD-ACCEPT", profile="consumer", level="core", feature="overlayValidation", spec=SPEC,
    statements=["IR-MODES-OVERLAY-ENVELOPE", "OC-INTRO-PRAXIS-CONSUMES", "OC-FORMAT-ENVELOPE-AUTHORITATIVE",
                "OC-EDGE-SAME-PATH", "RG-INTRO-PRAXIS-LOCAL-CHOICE", "OC-PROVENANCE-NOT-AUTHORIZATION"],
)
def test_valid_envelope_at_cold_start_serves_its_revision(site: Site, fresh_gateway: Any) -> None:
    """A valid envelope serves its revision. Its provenance names this harness, not AGN's operator: a gateway
    that took provenance for an authorization credential would refuse it."""
    doc = site.envelope([site.candidate("provider-a", BASE_MODEL), site.candidate("provider-b", BASE_MODEL)])
    gateway = fresh_gateway("core", contract.encode(doc))
    assert gateway.serving_revision(BASE_MODEL) == contract.revision_of(doc)


@pytest.mark.parametrize("case_name", _params("CONS-COLD-REJECT", COLD, COLD_STATEMENTS))
def test_invalid_envelope_at_cold_start_fails_startup(site: Site, cold: ColdStarts, case_name: str) -> None:
    case = _case(site, case_name)
    assert case.twin is not None
    cold.refused("core", case.data, f"a {case_name} overlay ({case.why})")
    served = cold.serves("core", case.twin, BASE_MODEL, f"{case_name} fixed")
    assert served == case.twin_revision, f"the twin of {case_name} serves {served}, not {case.twin_revision}"


def _scoped(site: Site, field: str | None) -> dict[str, Any]:
    scope = site.scope.as_dict()
    if field is not None:
        scope[field] = "someone-else"
    return contract.envelope([site.candidate("provider-a", BASE_MODEL)], contract.ScopeSpec(**scope))


@pytest.mark.conformance(
    id="CONS-COLD-EXPECTED-SCOPE",
    profile="consumer",
    level="core",
    feature="scope",
    spec="overlay contract, Scope and provenance: \"Praxis AI deployments configure the scope they expect and reject "
         "a validly encoded overlay intended for a different gateway.\"" + COLD,
    statements=["OC-SCOPE-WRONG-GATEWAY-REJECTED", "OC-SCOPE-BINDS", "IR-ENVELOPE-COLD-START-FAILS",
                "OC-LIFECYCLE-COLD-START-FAILS-CLOSED", "IR-ENVELOPE-LIFECYCLE-ACCEPTED", "OC-EDGE-IDENTICAL-ROUTE"],
)
@pytest.mark.parametrize("field", ["gateway", "namespace"])
def test_cold_start_with_another_gateways_scope_fails(site: Site, cold: ColdStarts, field: str) -> None:
    cold.refused("core", contract.encode(_scoped(site, field)), f"an overlay scoped to another {field}")
    twin = _scoped(site, None)
    assert cold.serves("core", contract.encode(twin), BASE_MODEL, "the same overlay in the gateway's own scope") == \
        contract.revision_of(twin)


@pytest.mark.conformance(
    id="CONS-COLD-LEGACY-ACCEPT",
    profile="consumer",
    level="core",
    feature="legacyPayload",
    spec="intelligent-route-filter: candidates are loaded from an overlay file (routing-overlay.json envelope or "
         "legacy routing-config.json); legacy payloads are refused only when expected_overlay_scope is configured",
    statements=["IR-MODES-OVERLAY"],
)
def test_legacy_payload_at_cold_start_serves(site: Site, fresh_gateway: Any) -> None:
    legacy = contract.legacy([site.candidate("provider-b", BASE_MODEL)], site.spec.name)
    gateway = fresh_gateway("legacy", contract.encode(legacy))
    reply = gateway.request(BASE_MODEL)
    assert reply.status == 200 and reply.backend == "provider-b", reply.describe()
    assert "x-ai-routing-revision" not in reply.forwarded_headers, "legacy payloads carry no revision"


@pytest.mark.conformance(
    id="CONS-COLD-LEGACY-SCOPED",
    profile="consumer",
    level="core",
    feature="scope",
    spec="intelligent-route-filter: \"When expected_overlay_scope is configured, legacy payloads are rejected so "
         "scope validation cannot be bypassed.\"" + COLD,
    statements=["IR-ENVELOPE-SCOPE-REJECTS-LEGACY", "OC-SCOPE-REQUIRES-ENVELOPE", "IR-ENVELOPE-COLD-START-FAILS",
                "OC-LIFECYCLE-COLD-START-FAILS-CLOSED"],
)
def test_legacy_payload_refused_when_scope_expected(site: Site, cold: ColdStarts) -> None:
    candidates = [site.candidate("provider-b", BASE_MODEL)]
    cold.refused("core", contract.encode(contract.legacy(candidates, site.spec.name)),
                 "a legacy payload while a scope is expected")
    twin = contract.envelope(candidates, site.scope)
    assert cold.serves("core", contract.encode(twin), BASE_MODEL, "the same candidates as an envelope") == \
        contract.revision_of(twin)


@pytest.mark.conformance(
    id="CONS-COLD-LEGACY-EMPTY",
    profile="consumer",
    level="core",
    feature="legacyPayload",
    spec="intelligent-route-filter, Selection: \"Static candidate lists and legacy flat overlays remain non-empty.\"",
    statements=["IR-SELECTION-STATIC-LEGACY-NON-EMPTY", "OC-LIFECYCLE-COLD-START-FAILS-CLOSED"],
)
def test_empty_legacy_payload_fails_startup(site: Site, cold: ColdStarts) -> None:
    cold.refused("legacy", contract.encode(contract.legacy([], site.spec.name)), "an empty legacy payload")
    twin = contract.legacy([site.candidate("provider-a", BASE_MODEL)], site.spec.name)
    cold.serves("legacy", contract.encode(twin), BASE_MODEL, "a legacy payload with one candidate")


@pytest.mark.conformance(
    id="CONS-COLD-NO-LEGACY-FALLBACK",
    profile="consumer",
    level="core",
    feature="legacyPayload",
    spec="intelligent-route-filter, Envelope contract: \"Any reserved envelope field selects strict envelope parsing; "
         "malformed envelopes never fall back to legacy.\"",
    statements=["IR-ENVELOPE-NO-LEGACY-FALLBACK", "OC-LIFECYCLE-COLD-START-FAILS-CLOSED"],
)
def test_legacy_payload_with_an_envelope_field_is_parsed_as_an_envelope(site: Site, cold: ColdStarts) -> None:
    """A valid legacy payload plus schema_version (a reserved envelope field) is a malformed envelope: refused.

    The gateway expects no scope, so the same payload without schema_version (the twin) serves as legacy.
    Fails if a document that fails envelope parsing is retried, or detected, as a legacy payload.
    """
    twin = contract.legacy([site.candidate("provider-b", BASE_MODEL)], site.spec.name)
    cold.refused("legacy", contract.encode({**twin, "schema_version": contract.SCHEMA_VERSION}),
                 "a legacy payload carrying schema_version and no other envelope field")
    cold.serves("legacy", contract.encode(twin), BASE_MODEL, "the same legacy payload without schema_version")


# ------------------------------------------------------------------------------------------------ reload


@pytest.fixture(scope="module")
def prior(site: Site) -> dict[str, Any]:
    """What serves before each reload case: candidates no case or twin carries in this order, so a bad
    overlay that was accepted shows as a changed revision even without the reload counter."""
    return contract.envelope([site.candidate("provider-c", BASE_MODEL), site.candidate("provider-a", BASE_MODEL)],
                             site.scope)


def _reject_then_twin(gw: Gateway, reloads: ReloadProbe, prior: dict[str, Any], bad: bytes | dict[str, Any],
                      twin: bytes | dict[str, Any], twin_revision: str, what: str) -> None:
    """`bad` leaves the prior snapshot serving; then its twin serves, so the refusal was for its fault."""
    revision = contract.revision_of(prior)
    if gw.serving_revision(BASE_MODEL) != revision:
        gw.publish(prior, BASE_MODEL)
    before = reloads.snapshot()
    gw.write_overlay(bad)
    reloads.wait(before, "rejected")
    served = gw.serving_revision(BASE_MODEL)
    assert served == revision, f"after an invalid reload ({what}) the gateway serves {served}, not {revision}"
    gw.write_overlay(twin)
    gw.wait_serving(twin_revision, BASE_MODEL, what=f"the twin ({what} fixed) to serve")


@pytest.mark.parametrize("case_name", _params("CONS-RELOAD-REJECT", RELOAD, RELOAD_STATEMENTS))
def test_invalid_reload_keeps_last_known_good(gw: Gateway, reloads: ReloadProbe, prior: dict[str, Any],
                                              case_name: str, site: Site) -> None:
    case = _case(site, case_name)
    assert case.twin is not None and case.twin_revision is not None
    _reject_then_twin(gw, reloads, prior, case.data, case.twin, case.twin_revision, f"{case_name}: {case.why}")


@pytest.mark.conformance(
    id="CONS-RELOAD-ACCEPT",
    profile="consumer",
    level="core",
    feature="overlayValidation",
    spec="intelligent-route-filter: \"Unknown additive envelope, provenance, and candidate fields are accepted for "
         "forward compatibility\"; overlay contract: \"Timestamps, provenance, Kubernetes metadata, and envelope "
         "annotations are not part of the semantic payload.\"",
    statements=["IR-ENVELOPE-UNKNOWN-FIELDS-ACCEPTED", "OC-FIELDS-OVERLAY-FORWARD-COMPATIBLE",
                "OC-FORMAT-ENVELOPE-AUTHORITATIVE"],
)
@pytest.mark.parametrize("case_name", ["valid", "unknown-additive-fields", "unknown-candidate-field"])
def test_acceptable_variants_reload_to_their_revision(gw: Gateway, site: Site, model: str, case_name: str) -> None:
    doc = site.envelope([site.candidate("provider-c", model), site.candidate("provider-a", model)])
    case = next(c for c in contract.acceptance_cases(doc) if c.name == case_name)
    gw.write_overlay(case.data)
    assert case.revision is not None
    gw.wait_serving(case.revision, model)


@pytest.mark.conformance(
    id="CONS-RELOAD-AFTER-REJECT",
    profile="consumer",
    level="core",
    feature="hotReload",
    spec="intelligent-route-filter, Hot reload: \"Unreadable or invalid files retain the previous snapshot.\"; a "
         "later valid file is \"atomically swapped in when its semantic revision changes\"",
    statements=["IR-RELOAD-SWAP-ON-REVISION-CHANGE", "RG-RELOAD-NEW-AFTER-VALIDATION",
                "OC-DELIVERY-PRAXIS-VALIDATES-SWAPS", "RG-RELOAD-PRAXIS-SWAPS", "OC-EDGE-ATOMIC-SWAP",
                "RG-NEED-HOT-RELOAD"],
)
def test_valid_reload_after_rejection_is_served(gw: Gateway, site: Site, model: str, reloads: ReloadProbe) -> None:
    gw.publish(site.envelope([site.candidate("provider-a", model)]), model)
    before = reloads.snapshot()
    gw.write_overlay(b"{not json")
    reloads.wait(before, "rejected")
    newer = site.envelope([site.candidate("provider-b", model)])
    gw.publish(newer, model)
    assert gw.request(model).backend == "provider-b"


@pytest.mark.conformance(
    id="CONS-RELOAD-SCOPE",
    profile="consumer",
    level="core",
    feature="scope",
    spec="overlay contract, Scope and provenance: \"reject a validly encoded overlay intended for a different "
         "gateway\"" + RELOAD,
    statements=["OC-SCOPE-WRONG-GATEWAY-REJECTED", "OC-SCOPE-BINDS", "IR-RELOAD-INVALID-RETAINS",
                "IR-ENVELOPE-RELOAD-RETAINS-LKG", "OC-LIFECYCLE-INVALID-UPDATE-LKG", "OC-DELIVERY-INVALID-LKG",
                "RG-RELOAD-INVALID-LKG", "IR-ENVELOPE-LIFECYCLE-ACCEPTED", "OC-EDGE-IDENTICAL-ROUTE"],
)
@pytest.mark.parametrize("field", ["gateway", "namespace", "network", "local_site"])
def test_reload_for_another_scope_is_rejected(gw: Gateway, site: Site, reloads: ReloadProbe,
                                              prior: dict[str, Any], field: str) -> None:
    scope = site.scope.as_dict()
    scope[field] = "elsewhere"
    candidates = [site.candidate("provider-b", BASE_MODEL)]
    twin = contract.envelope(candidates, site.scope)
    _reject_then_twin(gw, reloads, prior, contract.envelope(candidates, contract.ScopeSpec(**scope)), twin,
                      contract.revision_of(twin), f"an overlay scoped to another {field}")


@pytest.mark.conformance(
    id="CONS-RELOAD-LEGACY-SCOPED",
    profile="consumer",
    level="core",
    feature="scope",
    spec="intelligent-route-filter: \"When expected_overlay_scope is configured, legacy payloads are rejected so "
         "scope validation cannot be bypassed.\"" + RELOAD,
    statements=["IR-ENVELOPE-SCOPE-REJECTS-LEGACY", "OC-SCOPE-REQUIRES-ENVELOPE", "IR-RELOAD-INVALID-RETAINS",
                "IR-ENVELOPE-RELOAD-RETAINS-LKG", "OC-LIFECYCLE-INVALID-UPDATE-LKG", "OC-DELIVERY-INVALID-LKG",
                "RG-RELOAD-INVALID-LKG"],
)
def test_legacy_reload_rejected_when_scope_expected(gw: Gateway, site: Site, reloads: ReloadProbe,
                                                    prior: dict[str, Any]) -> None:
    candidates = [site.candidate("provider-b", BASE_MODEL)]
    twin = contract.envelope(candidates, site.scope)
    _reject_then_twin(gw, reloads, prior, contract.legacy(candidates, site.spec.name), twin,
                      contract.revision_of(twin), "a legacy payload while a scope is expected")
