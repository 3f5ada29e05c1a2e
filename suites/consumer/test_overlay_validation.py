"""Envelope and legacy validation through the running gateway: cold start and hot reload."""

from __future__ import annotations

from typing import Any

import pytest

from harness import contract
from harness.backends.local import GatewayStartFailed
from harness.grid import Gateway, Site
from harness.suite_support import ReloadProbe

SPEC = "routing-architecture-and-overlay-contract: Routing overlay format, Revision semantics"
BASE_MODEL = "validation-model"


def _base(site: Site) -> dict[str, Any]:
    return site.envelope([site.candidate("provider-a", BASE_MODEL), site.candidate("provider-b", BASE_MODEL)])


def _cases(site_scope: contract.ScopeSpec) -> list[contract.Case]:
    base = contract.envelope(
        [contract.candidate(BASE_MODEL, "site-a", cluster) for cluster in ("provider-a", "provider-b")],
        site_scope,
    )
    return contract.rejection_cases(base)


# The case names are fixed by harness.contract; the scope only fills in values.
_NAMES = [c.name for c in _cases(contract.ScopeSpec("n", "g", "ns", "s"))]
COLD_REJECT = [
    "missing-schema-version",
    "unsupported-schema-version",
    "revision-not-object",
    "wrong-content-digest",
    "revision-disagrees",
    "scope-network-mismatch",
    "scope-local-site-mismatch",
    "credential-unknown-field",
    "nan-literal",
    "huge-integer",
    "unknown-selection-mode",
]


def _case(site: Site, name: str) -> contract.Case:
    return next(c for c in contract.rejection_cases(_base(site)) if c.name == name)


@pytest.fixture(scope="module")
def startable(site: Site) -> None:
    """Control for the cold-start rejections: the same variants start with a valid overlay.

    Without it a gateway that cannot start at all would pass every "must fail startup" test.
    """
    for variant, doc in (
        ("core", _base(site)),
        ("legacy", contract.legacy([site.candidate("provider-a", "m")], site.spec.name)),
    ):
        gateway = site.start_gateway(variant, contract.encode(doc))
        site.stop_gateway(gateway)


@pytest.mark.conformance(
    id="CONS-COLD-ACCEPT", profile="consumer", level="core", feature="overlayValidation", spec=SPEC
)
def test_valid_envelope_at_cold_start_serves_its_revision(site: Site, fresh_gateway: Any) -> None:
    doc = _base(site)
    gateway = fresh_gateway("core", contract.encode(doc))
    assert gateway.serving_revision(BASE_MODEL) == contract.revision_of(doc)


@pytest.mark.conformance(
    id="CONS-COLD-REJECT",
    profile="consumer",
    level="core",
    feature="overlayValidation",
    spec=SPEC + "; invalid cold-start envelopes fail filter construction",
)
@pytest.mark.parametrize("case_name", COLD_REJECT)
def test_invalid_envelope_at_cold_start_fails_startup(
    site: Site, startable: None, fresh_gateway: Any, case_name: str
) -> None:
    case = _case(site, case_name)
    with pytest.raises(GatewayStartFailed) as failure:
        fresh_gateway("core", case.data)
    assert failure.value.exit_code not in (None, 0), (
        f"gateway with a {case_name} overlay ({case.why}) must exit non-zero; it {failure.value}"
    )


@pytest.mark.conformance(
    id="CONS-COLD-EXPECTED-SCOPE",
    profile="consumer",
    level="core",
    feature="scope",
    spec="Scope and provenance: reject an overlay intended for a different gateway",
)
@pytest.mark.parametrize("field", ["gateway", "namespace"])
def test_cold_start_with_another_gateways_scope_fails(
    site: Site, startable: None, fresh_gateway: Any, field: str
) -> None:
    scope = site.scope.as_dict()
    scope[field] = "someone-else"
    doc = contract.envelope([site.candidate("provider-a", BASE_MODEL)], contract.ScopeSpec(**scope))
    with pytest.raises(GatewayStartFailed):
        fresh_gateway("core", contract.encode(doc))


@pytest.mark.conformance(
    id="CONS-COLD-LEGACY-ACCEPT",
    profile="consumer",
    level="core",
    feature="legacyPayload",
    spec="Legacy routing-config.json payload is accepted when no scope is expected",
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
    spec="Enabling expected scope requires the envelope format",
)
def test_legacy_payload_refused_when_scope_expected(site: Site, startable: None, fresh_gateway: Any) -> None:
    legacy = contract.legacy([site.candidate("provider-b", BASE_MODEL)], site.spec.name)
    with pytest.raises(GatewayStartFailed):
        fresh_gateway("core", contract.encode(legacy))


@pytest.mark.conformance(
    id="CONS-COLD-LEGACY-EMPTY",
    profile="consumer",
    level="core",
    feature="legacyPayload",
    spec="Static candidate lists and legacy flat overlays remain non-empty",
)
def test_empty_legacy_payload_fails_startup(site: Site, startable: None, fresh_gateway: Any) -> None:
    with pytest.raises(GatewayStartFailed):
        fresh_gateway("legacy", contract.encode(contract.legacy([], site.spec.name)))


@pytest.fixture(scope="module")
def baseline(gw: Gateway, site: Site) -> str:
    """A valid revision serving BASE_MODEL that every reload-rejection case must leave in place."""
    return gw.publish(_base(site), BASE_MODEL)


@pytest.mark.conformance(
    id="CONS-RELOAD-REJECT",
    profile="consumer",
    level="core",
    feature="overlayValidation",
    spec="Invalid reloads retain the same-process last-known-good snapshot",
)
@pytest.mark.parametrize("case_name", _NAMES)
def test_invalid_reload_keeps_last_known_good(
    gw: Gateway, reloads: ReloadProbe, baseline: str, case_name: str, site: Site
) -> None:
    if gw.serving_revision(BASE_MODEL) != baseline:
        gw.publish(_base(site), BASE_MODEL)
    case = _case(site, case_name)
    before = reloads.snapshot()
    gw.write_overlay(case.data)
    reloads.wait(before, "rejected")
    served = gw.serving_revision(BASE_MODEL)
    assert served == baseline, f"after an invalid reload ({case.why}) the gateway serves {served}, not {baseline}"


@pytest.mark.conformance(
    id="CONS-RELOAD-ACCEPT",
    profile="consumer",
    level="core",
    feature="overlayValidation",
    spec="Unknown additive fields are accepted; timestamps are not part of the revision",
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
    spec="Hot reload keeps working after a rejected update",
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
    spec="Scope: a validly encoded overlay for another gateway is rejected on reload",
)
@pytest.mark.parametrize("field", ["gateway", "namespace", "network", "local_site"])
def test_reload_for_another_scope_is_rejected(
    gw: Gateway, site: Site, model: str, reloads: ReloadProbe, field: str
) -> None:
    revision = gw.publish(site.envelope([site.candidate("provider-a", model)]), model)
    scope = site.scope.as_dict()
    scope[field] = "elsewhere"
    other = contract.envelope([site.candidate("provider-b", model)], contract.ScopeSpec(**scope))
    before = reloads.snapshot()
    gw.write_overlay(other)
    reloads.wait(before, "rejected")
    assert gw.serving_revision(model) == revision


@pytest.mark.conformance(
    id="CONS-RELOAD-LEGACY-SCOPED",
    profile="consumer",
    level="core",
    feature="scope",
    spec="With expected_overlay_scope, legacy payloads are rejected",
)
def test_legacy_reload_rejected_when_scope_expected(gw: Gateway, site: Site, model: str, reloads: ReloadProbe) -> None:
    revision = gw.publish(site.envelope([site.candidate("provider-a", model)]), model)
    before = reloads.snapshot()
    gw.write_overlay(contract.legacy([site.candidate("provider-b", model)], site.spec.name))
    reloads.wait(before, "rejected")
    assert gw.serving_revision(model) == revision
