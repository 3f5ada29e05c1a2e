"""Conformant variants of the reference operator: each makes the other choice where the spec leaves one open.

Like the gateway variants (selfcheck/variants.py), each is a monkeypatch applied before the operator starts
(``python -m selfcheck.operator_variant_launch --variant NAME run ...``) and names the sentence, or the
silence, that leaves its choice open; every core producer test must pass it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference.operator import scrape, sinks
from selfcheck.registry import patch
from selfcheck.variants import Variant

__all__ = ["DESCRIPTOR_FIELDS", "VARIANTS"]

VARIANTS: dict[str, Variant] = {}
#: What a variant's descriptor says of it in its operator section, beyond its command.
DESCRIPTOR_FIELDS: dict[str, dict[str, Any]] = {}


def _rename(entry: Mapping[str, Any], old: str, new: str) -> dict[str, Any]:
    return {(new if key == old else key): value for key, value in entry.items()}


def _status_public_shape() -> None:
    def status_body(network: Any, entries: list[dict[str, Any]]) -> dict[str, Any]:
        return {"observedGeneration": network.generation,
                "routingMapStatus": [_rename(e, "gatewayNamespace", "namespace") for e in entries]}

    def entries_by_gateway(status: Mapping[str, Any] | None) -> dict[tuple[Any, Any], dict[str, Any]]:
        listed = (status or {}).get("routingMapStatus") or []
        return {(e.get("gatewayName"), e.get("namespace")): _rename(e, "namespace", "gatewayNamespace")
                for e in listed if isinstance(e, dict)}

    patch(sinks, "status_body", status_body)
    patch(sinks, "entries_by_gateway", entries_by_gateway)


VARIANTS["status-public-shape"] = Variant(
    "status-public-shape",
    "records each gateway's revisions in status.routingMapStatus, naming the gateway's namespace `namespace`, as the "
    "public grid operator's newest release does: the spec says only that the operator \"records rendered/distributed "
    "revision status\"", _status_public_shape, profiles=("producer",))


def _metrics_endpoint_spelling() -> None:
    original = scrape.ScrapeTarget.from_resource.__func__  # type: ignore[attr-defined]

    def from_resource(cls: type[scrape.ScrapeTarget], obj: Mapping[str, Any]) -> scrape.ScrapeTarget | None:
        spec = obj.get("spec") or {}
        config = spec.get("metricsConfig")
        if isinstance(config, Mapping) and "endpoint" in config:  # this operator knows only metricsEndpoint
            obj = {**obj, "spec": {**spec, "metricsConfig": {k: v for k, v in config.items() if k != "endpoint"}}}
        return original(cls, obj)  # type: ignore[no-any-return]

    patch(scrape.ScrapeTarget, "from_resource", classmethod(from_resource))


VARIANTS["metrics-endpoint-spelling"] = Variant(
    "metrics-endpoint-spelling",
    "reads a provider's metrics URL only as metricsConfig.metricsEndpoint, the spelling of the routing guide's "
    "examples (provider-scoring's prose writes metricsConfig.endpoint); its descriptor says so "
    "(operator.metrics_endpoint_key)", _metrics_endpoint_spelling, profiles=("producer",))
DESCRIPTOR_FIELDS["metrics-endpoint-spelling"] = {"metrics_endpoint_key": "metricsEndpoint"}


def _overlay_named_otherwise() -> None:
    from reference.operator.core import configmap

    original = configmap.configmap_name

    def named(network: str, gateway: str, kind: str = "grid-overlay") -> str:
        name = original(network, gateway, kind)
        return "routing-map-" + name.removeprefix("grid-overlay-") if kind == "grid-overlay" else name

    patch(configmap, "configmap_name", named)
    patch(sinks, "configmap_name", named)


VARIANTS["overlay-named-otherwise"] = Variant(
    "overlay-named-otherwise",
    "names the overlay ConfigMap routing-map-{network}-{gateway}: the spec names the ConfigMap's keys "
    "(routing-overlay.json, routing-config.json) and its grid.praxis.fast annotations, not its name",
    _overlay_named_otherwise, profiles=("producer",))
