"""The judged profiles: for each suite, its breakages, their targets and how a broken component plugs in.

A profile here is what `agn-conformance self-check` and the project's judge tests run alike: the suite
package, the table of breakages with the tests each must make fail, the descriptor sections that start
the broken component (as a vendor's component is started) and how a component that never came up reads,
so such a failure is not taken for the suite seeing a breakage.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterable
from typing import Any

from harness.impl import load_impl, reference_document
from selfcheck import demo_targets, mesh_targets, operator_targets, provider_targets, serving_targets, targets
from selfcheck.judge import ROOT, Profile, broken_gateway, reference_gateway
from selfcheck.targets import Targets

__all__ = ["CONSUMER", "DEMOS_GATEWAY", "DEMOS_OPERATOR", "MESH", "PRODUCER", "PROFILES", "PROVIDER", "SERVING",
           "SUITE_PROFILES"]

_SOURCE = {"PYTHONPATH": str(ROOT)}


def _broken_gateway_parts(launcher: str, breakages: str) -> tuple[Callable[[str], dict[str, Any]],
                                                                   Callable[[], Iterable[str]]]:
    """A gateway profile's `components` and `registered`: the gateway `launcher` starts with a breakage
    from the `breakages` module, and that module's BREAKAGES (imported when first asked for)."""

    def components(breakage: str) -> dict[str, Any]:
        return {"gateway": broken_gateway(launcher, breakage, breakages)}

    def registered() -> Iterable[str]:
        return importlib.import_module(breakages).BREAKAGES  # type: ignore[no-any-return]

    return components, registered


# ------------------------------------------------------------------------------------------ consumer


_CONSUMER_COMPONENTS, _CONSUMER_REGISTERED = _broken_gateway_parts("selfcheck.launch", "selfcheck.breakages")


CONSUMER = Profile(
    name="consumer",
    suite=targets.SUITE,
    component="gateway",
    targets=targets.TARGETS,
    components=_CONSUMER_COMPONENTS,
    startup_failures=("GatewayStartFailed: ",),
    launcher="selfcheck.launch",
    launch_args=("-c", "praxis.yaml"),
    registered=_CONSUMER_REGISTERED,
    cannot_start_targets=Targets(("CONS-HOP-NO-CREDENTIAL", "CONS-404-UNKNOWN-MODEL")),
    cannot_start_test="test_gateway_that_cannot_start_is_no_verdict",
    cannot_start_symptom="did not fail inside the test body",
    # Runs that take longest start first, so the parallel runs finish close together.
    slow_first=("drop-lkg-on-reject", "ignore-groups", "wrong-revision-header", "weights-off", "accept-wrong-digest",
                "reload-once", "accept-any-cold-start", "random-biased", "slow-reload"),
)


# ------------------------------------------------------------------------------------------ producer


def _producer_components(breakage: str) -> dict[str, Any]:
    """The reference gateway, and the operator and overlay-sync with the breakage applied to whichever of
    the two it breaks (selfcheck/operator_breakages.py or selfcheck/sync_breakages.py)."""
    from selfcheck.sync_breakages import BREAKAGES as SYNC_BREAKAGES

    sync = dict(reference_document()["overlay_sync"])
    operator: dict[str, Any] = dict(reference_document()["operator"])
    if breakage in SYNC_BREAKAGES:
        sync["command"] = ["{python}", "-m", "selfcheck.sync_launch", "--break", breakage, *sync["command"][3:]]
        sync["env"] = dict(_SOURCE)
    else:
        operator = {"command": ["{python}", "-m", "selfcheck.operator_launch", "--break", breakage, "run",
                                "--manifests", "{manifests}", "--out", "{out}", "--poll", "0.1", "--metrics-ca",
                                "{metrics_ca}"], "env": dict(_SOURCE),
                    "dynamic_weights": operator["dynamic_weights"], "signals_args": operator["signals_args"]}
    return {"gateway": reference_gateway(), "operator": operator, "overlay_sync": sync}


def _producer_registered() -> Iterable[str]:
    from selfcheck.operator_breakages import BREAKAGES
    from selfcheck.sync_breakages import BREAKAGES as SYNC_BREAKAGES

    return {**BREAKAGES, **SYNC_BREAKAGES}


def _operator_launched() -> Iterable[str]:
    """The breakages selfcheck/operator_launch knows (the sidecar's have a launcher of their own)."""
    from selfcheck.operator_breakages import BREAKAGES

    return BREAKAGES


PRODUCER = Profile(
    name="producer",
    suite=operator_targets.SUITE,
    component="operator",
    targets=operator_targets.TARGETS,
    components=_producer_components,
    # The operator exited, or never wrote the ConfigMap the suite waits for (every render failed).
    startup_failures=("OperatorExited: the operator exited", "last seen: no ConfigMap yet"),
    launcher="selfcheck.operator_launch",
    launch_args=("run", "--manifests", ".", "--out", "out"),
    registered=_producer_registered,
    launched=_operator_launched,
    cannot_start_targets=Targets(("PROD-CRED-REFERENCE", "PROD-ORD-TIE-BREAK")),
    cannot_start_test="test_operator_that_cannot_start_is_no_verdict",
    cannot_start_symptom="the operator failed to start",
    # Runs whose targets wait out a deadline start first, so the parallel runs finish close together.
    slow_first=("weight-bound-exclusive", "status-not-distributed", "scrape-once", "invalid-not-reported",
                "access-selector-ignored", "first-gateway-only", "one-perspective", "long-name-truncated-wrong",
                "configmap-named-after-network", "legacy-key-frozen", "hysteresis-ignored", "stale-sample-reused"),
)


# ------------------------------------------------------------------------------------------ provider

PROVIDER_LAUNCHER = "selfcheck.provider_launch"


_PROVIDER_COMPONENTS, _PROVIDER_REGISTERED = _broken_gateway_parts(PROVIDER_LAUNCHER, "selfcheck.provider_breakages")


PROVIDER = Profile(
    name="provider",
    suite=provider_targets.SUITE,
    component="gateway",
    targets=provider_targets.TARGETS,
    components=_PROVIDER_COMPONENTS,
    startup_failures=("GatewayStartFailed: ",),
    launcher=PROVIDER_LAUNCHER,
    launch_args=("-c", "praxis.yaml"),
    registered=_PROVIDER_REGISTERED,
    cannot_start_targets=Targets(("PROV-HOP-MISSING-REQUEST-ID", "PROV-ROUTE-PATH-MISMATCH")),
    cannot_start_test="test_provider_gateway_that_cannot_start_is_no_verdict",
    cannot_start_symptom="did not fail inside the test body",
    # Runs that start gateways of their own inside the tests start first, so parallel runs finish together.
    slow_first=("startup-rules-not-enforced", "credential-unknown-field-accepted", "token-logged",
                "unknown-candidate-routed", "provider-instance-limit"),
)


# ---------------------------------------------------------------------------------------------- mesh

MESH_LAUNCHER = "selfcheck.operator_launch"


def _mesh_components(breakage: str) -> dict[str, Any]:
    reference = load_impl("reference")
    operator = reference.operator
    if operator is None or operator.mesh_args is None:
        raise RuntimeError("the reference descriptor's operator has no mesh arguments")
    # the reference command is {python} -m reference.operator run ...: keep its arguments after the module
    command = ["{python}", "-m", MESH_LAUNCHER, "--break", breakage, *operator.argv_template[3:]]
    return {
        "gateway": reference_gateway(),
        "operator": {"command": command, "env": dict(_SOURCE), "mesh_args": list(operator.mesh_args),
                     **({"dynamic_weights": dict(operator.dynamic_weights)} if operator.dynamic_weights else {}),
                     **({"signals_args": list(operator.signals_args)} if operator.signals_args else {})},
    }


def _mesh_registered() -> Iterable[str]:
    from selfcheck.mesh_breakages import BREAKAGES

    return BREAKAGES


MESH = Profile(
    name="mesh",
    suite=mesh_targets.SUITE,
    component="operator",
    targets=mesh_targets.TARGETS,
    components=_mesh_components,
    # An operator that exited, or a mesh that never formed: the broken operator could not take part.
    startup_failures=("OperatorExited: the operator exited", "every operator to see every other site alive"),
    launcher=MESH_LAUNCHER,
    launch_args=("run", "--manifests", ".", "--out", "out"),
    registered=_mesh_registered,
    cannot_start_targets=Targets(("MESH-NO-SELF-ECHO", "MESH-LEAVE-REMOVES-AT-ONCE")),
    cannot_start_test="test_operator_that_cannot_join_is_no_verdict",
    # the mesh forms in fixture setup, so operators that never start fail there, outside every test body
    cannot_start_symptom="did not fail inside the test body",
    # the partition test needs network namespaces (root); elsewhere it skips and the other targets judge
    may_skip=frozenset({"MESH-PARTITION-DEGRADE-EVICT-HEAL"}),
    # Runs that crash or cut sites start meshes of their own: start them first.
    slow_first=("remote-nonfinite-as-number", "degraded-dropped-at-once", "discovered-name-reversed",
                "tools-not-gossiped", "first-pin-only", "stale-never-evicted", "slow-failure-detection",
                "leave-as-crash"),
)


# --------------------------------------------------------------------------------------------- demos

DEMO_LAUNCHER = "selfcheck.demo_launch"


def _demo_gateway_components(breakage: str) -> dict[str, Any]:
    """The broken gateway with the reference operator and its mesh arguments (every demo site runs one)."""
    operator = reference_document()["operator"]
    if "mesh_args" not in operator:
        raise RuntimeError("the reference descriptor's operator has no mesh arguments")
    return {"gateway": broken_gateway(DEMO_LAUNCHER, breakage, DEMO_LAUNCHER), "operator": dict(operator)}


def _demo_gateway_registered() -> list[str]:
    from selfcheck.demo_launch import BREAKAGES

    return sorted(BREAKAGES)


DEMOS_GATEWAY = dataclasses.replace(
    PROVIDER, name="demos-gateway", suite=demo_targets.SUITE, targets=demo_targets.GATEWAY_TARGETS,
    components=_demo_gateway_components, launcher=DEMO_LAUNCHER, registered=_demo_gateway_registered,
    launched=None, cannot_start_targets=Targets(("DEMO-COMBINED-SITE-LOCAL-FIRST",)), cannot_start_test="",
    # reload-once's targets are seven demos of a minute or so between them; hop-without-client-cert's include
    # the run that restarts every operator.
    slow_first=("reload-once", "hop-without-client-cert", "rr-all-groups"),
)

DEMOS_OPERATOR = dataclasses.replace(MESH, name="demos-operator", suite=demo_targets.SUITE,
                                     targets=demo_targets.OPERATOR_TARGETS, may_skip=frozenset(),
                                     slow_first=("score-ascending", "scrape-once", "pressure-ignored",
                                                 "site-cluster-announced"))

# ------------------------------------------------------------------------------------------- serving

SERVING_LAUNCHER = "selfcheck.serving_launch"


_SERVING_COMPONENTS, _SERVING_REGISTERED = _broken_gateway_parts(SERVING_LAUNCHER, "selfcheck.serving_breakages")


SERVING = Profile(
    name="serving",
    suite=serving_targets.SUITE,
    component="gateway",
    targets=serving_targets.TARGETS,
    components=_SERVING_COMPONENTS,
    startup_failures=("GatewayStartFailed: ",),
    launcher=SERVING_LAUNCHER,
    launch_args=("-c", "praxis.yaml"),
    registered=_SERVING_REGISTERED,
    cannot_start_targets=Targets(("SERV-EXT-NO-MODEL-REFUSED", "SERV-CEILING-FLOOR")),
    cannot_start_test="test_grid_gateway_that_cannot_start_is_no_verdict",
    # the grid gateway starts inside each test body, so one that never starts fails there
    cannot_start_symptom="the gateway failed to start",
    # Runs whose targets wait out shedding windows or watch a decay start first.
    slow_first=("never-releases", "shed-as-503", "sheds-at-once", "shed-without-retry-after", "first-draw-wins",
                "ceiling-never-decays"),
)


#: Every judged profile by name.
PROFILES: dict[str, Profile] = {p.name: p for p in (CONSUMER, PRODUCER, PROVIDER, MESH, DEMOS_GATEWAY,
                                                    DEMOS_OPERATOR, SERVING)}
#: The judged profiles of each conformance profile (the demos are judged by gateway and operator breakages).
SUITE_PROFILES: dict[str, tuple[Profile, ...]] = {
    "consumer": (CONSUMER,), "producer": (PRODUCER,), "provider": (PROVIDER,), "mesh": (MESH,),
    "demos": (DEMOS_GATEWAY, DEMOS_OPERATOR), "serving": (SERVING,),
}
