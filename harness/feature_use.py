"""Which extended features a test asked of the implementation, recorded as the Grid API is used.

A core test must pass every implementation of its profile, including one that declines every extended
feature; a test that publishes a weightedRandom overlay, starts a gateway whose config sets cookie affinity
or applies a GridNetwork with the kvCachePressure strategy cannot. Reading suites for such uses is review;
this module makes it a fact of each run: the Grid API notes what each test's inputs ask for (the selection
mode of every overlay it writes, the extended config keys of every gateway it starts or sends to, the
policies of every resource it applies), the plugin carries the set to the report (``featuresUsed``), and
the project's own tests fail a core test that used an extended feature of its profile, or an extended test
that used one other than its own (see `allowed`).

Notes are only made while a conformance test runs (setup, call and teardown: a gateway a fixture starts
counts for the test that asked for it); elsewhere `note` does nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from harness.features import DEMOS, EXTENDED_BY_PROFILE, EXTENDED_FEATURES, REQUIRES

__all__ = ["REQUIRES", "allowed", "current", "note", "note_all", "note_overlay", "note_resources", "overlay_features",
           "recording", "resource_features", "violations"]


#: The features noted during the running test: feature -> how it was first used. A module-level value, like
#: the timeline's: threads a test starts note into it too, and xdist runs tests in separate processes.
_current: dict[str, str] | None = None


def current() -> dict[str, str] | None:
    return _current


@contextmanager
def recording(target: dict[str, str]) -> Iterator[dict[str, str]]:
    """Note into `target` for the duration of the block (the plugin wraps each conformance test's phases)."""
    global _current
    previous, _current = _current, target
    try:
        yield target
    finally:
        _current = previous


def note(feature: str, how: str) -> None:
    """The running test used extended `feature` (`how` says by what input); nothing outside a test."""
    if feature not in EXTENDED_FEATURES:
        raise ValueError(f"{feature!r} is not an extended feature (known: {', '.join(sorted(EXTENDED_FEATURES))})")
    if _current is not None:
        _current.setdefault(feature, how)


def note_all(features: Mapping[str, str]) -> None:
    """Note each of `features` (feature -> by what input) for the running test."""
    for feature, how in features.items():
        note(feature, how)


def overlay_features(data: bytes | Mapping[str, Any] | None) -> dict[str, str]:
    """The extended features an overlay (envelope or legacy payload, as bytes or parsed) asks a gateway for.

    Bytes that are not a JSON object ask for nothing: they are refused whatever the gateway supports.
    """
    if data is None:
        return {}
    doc: Any = data
    if isinstance(data, bytes):
        try:
            doc = json.loads(data)
        except ValueError:
            return {}
    if not isinstance(doc, Mapping):
        return {}
    body = doc.get("overlay", doc)
    policy = body.get("selection_policy") if isinstance(body, Mapping) else None
    mode = policy.get("mode") if isinstance(policy, Mapping) else None
    if mode == "weightedRandom":
        return {"weightedRandom": "an overlay with selection_policy.mode weightedRandom"}
    return {}


def note_overlay(data: bytes | Mapping[str, Any] | None) -> None:
    note_all(overlay_features(data))


def resource_features(obj: Mapping[str, Any]) -> dict[str, str]:
    """The extended features a grid resource asks an operator for, by the fields it sets."""
    kind = obj.get("kind")
    spec = obj.get("spec") or {}
    name = f"{kind} {(obj.get('metadata') or {}).get('name', '?')}"
    out: dict[str, str] = {}
    if kind == "GridNetwork":
        if (spec.get("scoringPolicy") or {}).get("strategy") == "kvCachePressure":
            out["kvCachePressure"] = f"{name}: scoringPolicy.strategy kvCachePressure"
        if (spec.get("admissionPolicy") or {}).get("mode") == "stabilized":
            out["stabilizedAdmission"] = f"{name}: admissionPolicy.mode stabilized"
        if any(isinstance(ref, Mapping) and ref.get("consumerConfig") for ref in spec.get("gatewayRefs") or ()):
            out["generatedConsumerConfig"] = f"{name}: a gateway reference with consumerConfig"
    elif kind == "InferenceProvider":
        if (spec.get("metricsConfig") or {}).get("tls"):
            out["tlsMetrics"] = f"{name}: metricsConfig.tls"
    elif kind == "AgentToolProvider":
        out["toolCandidates"] = f"{name}: an AgentToolProvider"
    return out


def note_resources(objects: Iterable[Mapping[str, Any]]) -> None:
    for obj in objects:
        note_all(resource_features(obj))


def allowed(level: str, feature: str, profile_extended: frozenset[str]) -> frozenset[str]:
    """The extended features of the profile (`profile_extended`) a test of `level` and `feature` may use:
    none for core, its own (and what it requires) for extended, any for a demo claim (a demo shows whatever
    its guide section does)."""
    if level == "core":
        return frozenset()
    if level == "extended":
        return frozenset({feature}) | REQUIRES.get(feature, frozenset())
    if feature in DEMOS:
        return profile_extended
    raise ValueError(f"unknown level {level!r}")


def violations(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """What is wrong with the features each test used, over a report's ``results`` rows: a core test that used
    an extended feature of its profile, an extended test that used one other than its own. Features outside
    the test's profile are the business of another component (a producer test's overlay mode is the
    operator's output, judged by the producer's features), so they are not counted."""
    problems = []
    for row in rows:
        profile = str(row.get("profile"))
        extended = EXTENDED_BY_PROFILE.get(profile, frozenset())
        used = set(row.get("featuresUsed") or ()) & extended
        extra = sorted(used - allowed(str(row.get("level")), str(row.get("feature")), extended))
        if extra:
            problems.append(f"{row.get('id')} ({row.get('level')} {row.get('feature')}) used the extended "
                            f"feature{'s' if len(extra) > 1 else ''} {', '.join(extra)}")
    return problems
