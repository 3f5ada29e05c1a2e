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


#: The environment variables the mesh-settings-from-env variant reads, one per mesh flag of the reference.
MESH_ENV = {"AGN_MESH_SITE": ("--mesh-site", "{site}"), "AGN_MESH_BIND": ("--mesh-bind", "{mesh_bind}"),
            "AGN_MESH_ADVERTISE": ("--mesh-advertise", "{mesh_advertise}"),
            "AGN_MESH_SEEDS": ("--mesh-seeds", "{mesh_seeds}"),
            "AGN_MESH_GATEWAY": ("--mesh-gateway", "{gateway_address}"),
            "AGN_MESH_ROUTING_CLUSTER": ("--mesh-routing-cluster", "{routing_cluster}"),
            "AGN_MESH_CLIENT_CERT": ("--mesh-client-cert", "{client_cert}"),
            "AGN_MESH_CLIENT_KEY": ("--mesh-client-key", "{client_key}"),
            "AGN_SWIM_PROBE_INTERVAL": ("--swim-probe-interval", "{probe_interval}"),
            "AGN_SWIM_PROBE_TIMEOUT": ("--swim-probe-timeout", "{probe_timeout}"),
            "AGN_SWIM_SUSPICION_MULT": ("--swim-suspicion-mult", "{suspicion_mult}")}


def _mesh_settings_from_env() -> None:
    import os

    from reference.operator import cli

    original = cli.main

    def main(argv: list[str] | None = None) -> int:
        """The reference with its mesh settings taken from the environment, as an operator that accepts no
        mesh flags would read them (the public operator reads its SWIM settings from environment variables)."""
        flags = [part for name, (flag, _) in MESH_ENV.items() if name in os.environ
                 for part in (flag, os.environ[name])]
        return original([*(argv if argv is not None else []), *flags])

    patch(cli, "main", main)


VARIANTS["mesh-settings-from-env"] = Variant(
    "mesh-settings-from-env",
    "takes its mesh settings (site, bind and advertised address, seeds, SWIM timing) only from environment "
    "variables, its descriptor saying so with operator.mesh_env: the spec says how operators of a mesh behave, "
    "not how they are configured", _mesh_settings_from_env, profiles=("mesh",))
DESCRIPTOR_FIELDS["mesh-settings-from-env"] = {
    "mesh_args": None, "mesh_env": {name: template for name, (_, template) in MESH_ENV.items()}}


def _hosting_read_as(keep: str) -> None:
    """The reference reading a provider's hosting site one way only: `selector` (GridSites its siteSelector
    matches, as the public operator does) or `site` (a plain spec.site, ignoring any siteSelector)."""
    import dataclasses

    from reference.operator.core import model

    for name in ("provider_from_resource", "tool_provider_from_resource"):
        original = getattr(model, name)

        def parse(obj: Mapping[str, Any], _original: Any = original) -> Any:
            spec = _original(obj)
            return dataclasses.replace(spec, site=None) if keep == "selector" else \
                dataclasses.replace(spec, site_selector={})

        patch(model, name, parse)


VARIANTS["hosting-site-by-selector"] = Variant(
    "hosting-site-by-selector",
    "learns a provider's hosting site only from the GridSites its spec.siteSelector matches, as both public "
    "operator versions do (no spec sentence names spec.site)", lambda: _hosting_read_as("selector"),
    profiles=("producer",))
VARIANTS["hosting-site-by-spec-site"] = Variant(
    "hosting-site-by-spec-site",
    "learns a provider's hosting site only from a plain spec.site, its descriptor saying so "
    "(operator.provider_site: site): the spec names no field for it", lambda: _hosting_read_as("site"),
    profiles=("producer",))
DESCRIPTOR_FIELDS["hosting-site-by-spec-site"] = {"provider_site": "site"}


def _status_written_on_change() -> None:
    original = sinks.DirSink.write_status

    def write_status(self: sinks.DirSink, network: Any, status: dict[str, Any]) -> None:
        """Keep each entry's renderedAt while its revision is unchanged, and write nothing when the status is
        then what is already there (as the public operator does)."""
        before = self.read_status(network.name).get("status") or {}
        previous = sinks.entries_by_gateway(before)
        for entry in status.get("overlayStatus") or []:
            old = previous.get((entry.get("gatewayName"), entry.get("gatewayNamespace"))) or {}
            if old.get("renderedRevision") == entry.get("renderedRevision") and "renderedAt" in old:
                entry["renderedAt"] = old["renderedAt"]
        if status == before:
            return
        original(self, network, status)

    patch(sinks.DirSink, "write_status", write_status)


VARIANTS["status-written-on-change"] = Variant(
    "status-written-on-change",
    "writes a network's status only when it changes, keeping renderedAt while the revision is unchanged, as the "
    "public grid operator does: the spec says only that the operator \"records rendered/distributed revision "
    "status\", not that every reconcile rewrites it", _status_written_on_change, profiles=("producer",))
