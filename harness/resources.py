"""Builders for grid resources (grid.praxis.fast/v1alpha1) in the shape the CRDs define.

Suites describe a scenario with these and hand the objects to the control plane; each builder
returns a plain dict, so a test can still change any field before applying it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

API_VERSION = "grid.praxis.fast/v1alpha1"
DEFAULT_GATEWAY = "edge-gateway"
DEFAULT_NAMESPACE = "agn-system"

#: The EPP pool series the fake backends expose; resources map their signals to these names.
QUEUE_METRIC = "inference_pool_average_queue_size"
KV_METRIC = "inference_pool_average_kv_cache_utilization"
READY_METRIC = "inference_pool_ready_pods"
SIGNAL_METRICS = {"queueDepth": QUEUE_METRIC, "kvCacheUtilization": KV_METRIC, "healthy": READY_METRIC}


def _object(kind: str, name: str, spec: dict[str, Any], status: Mapping[str, Any] | None = None,
            labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if labels:
        metadata["labels"] = dict(labels)
    obj: dict[str, Any] = {"apiVersion": API_VERSION, "kind": kind, "metadata": metadata, "spec": spec}
    if status:
        obj["status"] = dict(status)
    return obj


def gateway_ref(local_site: str, name: str = DEFAULT_GATEWAY, namespace: str = DEFAULT_NAMESPACE) -> dict[str, str]:
    return {"name": name, "namespace": namespace, "localSiteName": local_site}


def grid_network(name: str, gateway_refs: Sequence[Mapping[str, str]], *, routing: str | None = None,
                 scoring: str | None = None, selection: str | None = None, static_placement: bool = False,
                 refresh: str | None = "300s", admission: Mapping[str, Any] | None = None,
                 **extra: Any) -> dict[str, Any]:
    """A GridNetwork; omitted policies stay omitted so the operator's defaults are what is judged."""
    spec: dict[str, Any] = {"gatewayRefs": [dict(ref) for ref in gateway_refs]}
    if routing:
        spec["routingPolicy"] = routing
    if scoring:
        spec["scoringPolicy"] = {"strategy": scoring}
    if selection:
        spec["selectionPolicy"] = {"mode": selection}
    if static_placement:
        spec["placementPolicy"] = {"strategy": "static"}
    if refresh:
        spec["metricsRefreshInterval"] = refresh
    if admission is not None:
        spec["admissionPolicy"] = dict(admission)
    spec.update(extra)
    return _object("GridNetwork", name, spec)


def stabilized(enter: float = 0.85, exit_: float = 0.70, failures: int = 2, successes: int = 2,
               minimum: str = "1s", hold_down: str = "1s", missing: str = "existingOnly") -> dict[str, Any]:
    """A stabilized admissionPolicy with short durations, as the suites use them."""
    return {"mode": "stabilized", "missingMetrics": missing, "pressure": {
        "enterThreshold": enter, "exitThreshold": exit_, "failureThreshold": failures,
        "successThreshold": successes, "minimumStateDuration": minimum, "recoveryHoldDown": hold_down}}


def grid_site(name: str, network: str, *, region: str | None = None, zone: str | None = None,
              phase: str = "Active", labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"gridNetworkRef": network}
    if region:
        spec["region"] = region
    if zone:
        spec["zone"] = zone
    return _object("GridSite", name, spec, {"phase": phase}, labels)


def metrics_config(base_url: str, pool: str, *, queue_capacity: int | None = 10,
                   signals: Sequence[str] = ("queueDepth", "kvCacheUtilization", "healthy"),
                   stale_seconds: int | None = None, timeout: str = "1s", tls: bool = False) -> dict[str, Any]:
    """A metricsConfig scraping `base_url`/metrics for the series of `pool`."""
    config: dict[str, Any] = {"endpoint": base_url, "path": "/metrics", "timeout": timeout, "poolName": pool,
                              "signalNames": {signal: SIGNAL_METRICS[signal] for signal in signals}}
    if queue_capacity is not None:
        config["queueCapacity"] = queue_capacity
    if stale_seconds is not None:
        config["staleMetricsSeconds"] = stale_seconds
    if tls:
        config["tls"] = {"caSecretRef": {"name": "metrics-ca", "namespace": DEFAULT_NAMESPACE}}
    return config


def inference_provider(name: str, network: str, *, site: str, cluster: str, models: Sequence[str],
                       endpoint: str = "http://provider.invalid:8000", metrics: Mapping[str, Any] | None = None,
                       capacity_weight: int | None = None, phase: str | None = None,
                       credential: Mapping[str, str] | None = None,
                       site_selector: Mapping[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"gridNetworkRef": network, "providerKind": "self_hosted", "backendKind": "local",
                            "endpoint": endpoint, "clusterName": cluster, "site": site,
                            "models": [{"name": model} for model in models]}
    if metrics is not None:
        spec["metricsConfig"] = dict(metrics)
    if capacity_weight is not None:
        spec["capacityWeight"] = capacity_weight
    if credential is not None:
        spec["auth"] = {"strategy": "bearer_token", "secretRef": dict(credential)}
    if site_selector is not None:
        spec["accessPolicy"] = {"siteSelector": {"matchLabels": dict(site_selector)}}
    spec.update(extra)
    return _object("InferenceProvider", name, spec, {"phase": phase} if phase else None)


#: An MCP endpoint nothing listens on (the discard port of loopback): a tool provider whose status the
#: suite writes itself is probed in vain, with no name to resolve and no traffic off the machine.
CLOSED_MCP_ENDPOINT = "http://127.0.0.1:9/mcp"


def tool_provider(name: str, network: str, *, cluster: str, allow: Sequence[str], discovered: Sequence[str],
                  endpoint: str = CLOSED_MCP_ENDPOINT, site: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"gridNetworkRef": network, "endpoint": endpoint, "clusterName": cluster,
                            "tools": [{"name": tool} for tool in allow]}
    if site:
        spec["site"] = site
    return _object("AgentToolProvider", name, spec, {"phase": "Available", "discoveredTools": list(discovered)})


def secret(name: str, namespace: str, data: Mapping[str, str]) -> dict[str, Any]:
    """A Secret as the operator's resource directory would hold it (stringData, never base64 tricks)."""
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
            "type": "Opaque", "stringData": dict(data)}
