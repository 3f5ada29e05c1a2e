"""The reference validator against the public vectors, the harness oracle, and fuzzed input."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness import contract
from reference.overlay import REASONS, OverlayRejected, canonical_digest, parse_overlay

VECTORS = Path(__file__).resolve().parents[2] / "shared" / "vectors" / "overlay-contract" / "v1"
SCOPE = contract.ScopeSpec("net", "gw", "ns", "site-a")


def _manifest() -> dict[str, Any]:
    if not (VECTORS / "manifest.json").exists():
        return {}
    return dict(json.loads((VECTORS / "manifest.json").read_text())["fixtures"])


def _outcome(data: bytes, **kwargs: Any) -> tuple[str, str | None]:
    try:
        overlay = parse_overlay(data, **kwargs)
    except OverlayRejected as exc:
        return "reject", exc.reason
    return ("accept" if overlay.format == "envelope" else "accept_legacy"), overlay.revision


@pytest.mark.skipif(not _manifest(), reason=f"public overlay-contract vectors not present at {VECTORS}")
@pytest.mark.parametrize("name", sorted(_manifest()) or ["none"])
def test_public_vector(name: str) -> None:
    expected = _manifest()[name]
    outcome, detail = _outcome((VECTORS / name).read_bytes())
    assert outcome == expected["expected"], f"{name}: {outcome} ({detail})"
    if outcome == "reject":
        assert detail == expected["reason"]
    elif "revision" in expected:
        assert detail == expected["revision"]


@pytest.mark.skipif(not _manifest(), reason=f"public overlay-contract vectors not present at {VECTORS}")
def test_oracle_digest_agrees_with_public_vectors() -> None:
    for name, expected in _manifest().items():
        if expected["expected"] == "accept":
            doc = json.loads((VECTORS / name).read_bytes())
            assert contract.digest(doc["overlay"]) == expected["revision"]


def _base() -> dict[str, Any]:
    return contract.envelope([contract.candidate("m", "site-a", "c1"), contract.candidate("m", "site-b", "c2")], SCOPE)


@pytest.mark.parametrize("case", contract.rejection_cases(_base()), ids=lambda c: c.name)
def test_reference_rejects_every_oracle_rejection(case: contract.Case) -> None:
    outcome, reason = _outcome(case.data)
    assert outcome == "reject", f"{case.name}: {case.why}"
    assert reason in REASONS


@pytest.mark.parametrize("case", contract.rejection_cases(_base()), ids=lambda c: c.name)
def test_reference_accepts_every_twin_with_its_revision(case: contract.Case) -> None:
    """Each rejection's twin differs from it only in the fault, so the reference must take it."""
    assert case.twin is not None and case.spec, case.name
    outcome, revision = _outcome(case.twin)
    assert (outcome, revision) == ("accept", case.twin_revision), f"{case.name}: twin {outcome} ({revision})"


def test_core_rejections_cite_the_spec_and_public_code_rules_are_extended() -> None:
    for case in contract.rejection_cases(_base()):
        if case.feature is None:
            assert contract.PUBLIC_CODE not in case.spec and '"' in case.spec, f"{case.name} quotes no spec sentence"
        elif case.feature == contract.WEIGHTED:  # the spec's weight rule, judged only where the mode is claimed
            assert case.spec == contract.WEIGHT_RULE, case.name
        else:
            assert case.feature in (contract.STRICT, contract.LIMITS) and case.spec == contract.PUBLIC_CODE, case.name


def test_a_weight_under_another_mode_is_accepted() -> None:
    """The spec defines traffic_weight for weightedRandom and forbids it nowhere else."""
    doc = _base()
    doc["overlay"]["selection_policy"] = {"mode": "roundRobin"}
    for c in doc["overlay"]["candidates"]:
        c.update(selection_group=0, traffic_weight=5)
    contract.seal(doc)
    assert _outcome(contract.encode(doc)) == ("accept", contract.revision_of(doc))


@pytest.mark.parametrize("case", contract.acceptance_cases(_base()) + contract.legacy_cases(
    "site-a", [contract.candidate("m", "site-a", "c1")]), ids=lambda c: c.name)
def test_reference_accepts_what_oracle_accepts(case: contract.Case) -> None:
    outcome, revision = _outcome(case.data)
    assert outcome == case.expected, case.name
    if case.revision is not None:
        assert revision == case.revision


def test_reference_and_oracle_digests_agree() -> None:
    doc = contract.envelope([contract.candidate("m", "s", "c", selection_group=0, rank=0, fresh=False)], SCOPE,
                            selection_mode="roundRobin")
    assert canonical_digest(doc["overlay"]) == contract.digest(doc["overlay"])


@pytest.mark.parametrize("field", ["gateway", "namespace", "network", "local_site"])
def test_expected_scope_mismatch(field: str) -> None:
    expected = SCOPE.as_dict()
    expected[field] = "other"
    assert _outcome(contract.encode(_base()), expected_scope=expected) == ("reject", "scope_mismatch")
    assert _outcome(contract.encode(_base()), expected_scope=SCOPE.as_dict())[0] == "accept"


def test_legacy_refused_when_scope_expected() -> None:
    legacy = contract.encode(contract.legacy([contract.candidate("m", "s", "c")], "site-a"))
    assert _outcome(legacy, expected_scope={"network": "net"}) == ("reject", "legacy_not_allowed")


def test_cluster_allowlist() -> None:
    assert _outcome(contract.encode(_base()), allowed_clusters=["c1"]) == ("reject", "unknown_cluster")
    assert _outcome(contract.encode(_base()), allowed_clusters=["c1", "c2"])[0] == "accept"


def test_stable_id_defaults_and_uniqueness() -> None:
    overlay = parse_overlay(contract.encode(_base()))
    assert overlay.candidates[0].stable_id == "inference_model/m/site-a/c1"
    long_doc = contract.envelope([contract.candidate("m" * 250, "site-a", "c1")], SCOPE)
    long_id = parse_overlay(contract.encode(long_doc)).candidates[0].stable_id
    assert long_id is not None and long_id.startswith("sha256:") and len(long_id) == 71
    dup = contract.envelope([contract.candidate("m", "a", "c1", stable_id="x"),
                             contract.candidate("m", "b", "c2", stable_id="x")], SCOPE)
    assert _outcome(contract.encode(dup)) == ("reject", "duplicate_candidate")


def test_group_fallback_structure_is_accepted() -> None:
    doc = contract.envelope([
        contract.candidate("m", "a", "c1", selection_group=0, admission_state="existing_only"),
        contract.candidate("m", "b", "c2", selection_group=1),
        contract.candidate("other", "b", "c2"),
    ], SCOPE, selection_mode="roundRobin")
    assert _outcome(contract.encode(doc))[0] == "accept"


# --- fuzzing: only clean accept or reject, never another exception ------------------------------

_json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20),
)
_json = st.recursive(_json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)), max_leaves=20)
_keys = st.sampled_from(["schema_version", "revision", "content_digest", "scope", "provenance", "overlay",
                         "candidates", "local_site", "network", "selection_policy", "kind", "name", "site",
                         "cluster", "selection_group", "traffic_weight", "admission_state", "credential",
                         "stable_id", "value", "algorithm", "mode", "fresh"])


def _mutate(doc: Any, data: st.DataObject) -> Any:
    """Replace a random sub-value of the document with random JSON, or drop a key."""
    if isinstance(doc, dict) and doc:
        key = data.draw(st.sampled_from(sorted(doc)))
        action = data.draw(st.integers(0, 3))
        if action == 0:
            doc.pop(key)
        elif action == 1:
            doc[key] = data.draw(_json)
        elif action == 2:
            doc[data.draw(_keys)] = data.draw(_json)
        else:
            doc[key] = _mutate(doc[key], data)
    elif isinstance(doc, list) and doc:
        index = data.draw(st.integers(0, len(doc) - 1))
        doc[index] = _mutate(doc[index], data) if data.draw(st.booleans()) else data.draw(_json)
    else:
        return data.draw(_json)
    return doc


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzzed_envelopes_are_cleanly_accepted_or_rejected(data: st.DataObject) -> None:
    doc = _mutate(json.loads(contract.encode(_base())), data)
    if data.draw(st.booleans()):
        doc = contract.seal(doc) if _sealable(doc) else doc
    try:
        raw = json.dumps(doc).encode()
    except (TypeError, ValueError):
        return
    outcome, detail = _outcome(raw)
    if outcome == "reject":
        assert detail in REASONS


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_fuzzed_bytes_are_cleanly_rejected(raw: bytes) -> None:
    outcome, detail = _outcome(raw)
    assert outcome in ("accept", "accept_legacy") or detail in REASONS


def _sealable(doc: Any) -> bool:
    try:
        contract.seal(json.loads(json.dumps(doc)))
    except Exception:
        return False
    return True


def test_non_finite_and_huge_numbers_are_clean_rejections() -> None:
    base = contract.encode(_base())
    assert _outcome(base.replace(b'"fresh": true', b'"fresh": Infinity', 1)) == ("reject", "invalid_json")
    doc = _base()
    doc["overlay"]["candidates"][0]["extra"] = 2**60
    assert _outcome(contract.encode(doc))[1] == "non_canonical_value"
    doc["overlay"]["candidates"][0]["extra"] = math.pi
    contract.seal(doc)
    assert _outcome(contract.encode(doc))[0] == "accept"


@pytest.mark.parametrize("value", [[], {}, ["inference_model"], {"kind": "x"}])
@pytest.mark.parametrize("field", ["kind", "admission_state"])
def test_unhashable_enum_values_are_clean_rejections(field: str, value: Any) -> None:
    """A list or object where a name is expected is an invalid candidate, never a crash of the validator."""
    doc = _base()
    doc["overlay"]["candidates"][0][field] = value
    contract.seal(doc)
    assert _outcome(contract.encode(doc)) == ("reject", "invalid_candidate")
