"""The consumer Praxis config the operator generates beside an overlay (`gatewayRefs[].consumerConfig`).

The routing architecture says the operator generates the consumer Praxis config, including the
credential_inject section for direct API-provider routes; the routing guide says that config is
model-oriented: it parses a model field, projects only inference_model candidates, and a tool-only
overlay cannot produce it (a previously generated one is removed). The generated static
intelligent_route candidates drop the overlay-only fields (stable_id, admission_state, selection_tier,
rank, generated_at), and no token value is ever written: credential_inject reads mounted files.

The object's name, its `praxis.yaml` key and the endpoint topology input follow the public grid
operator (crates/operator/src/resources/consumer_config.rs); the spec does not name them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from reference.operator.core.model import ClusterEndpoint, ConsumerConfigSpec

DATA_KEY = "praxis.yaml"
MODEL_HEADER = "X-Model"
INFERENCE = "inference_model"
#: What an inline static candidate may carry; everything else in an overlay candidate stays there.
STATIC_FIELDS = ("kind", "name", "site", "cluster", "fresh")


@dataclass(frozen=True)
class ConsumerConfigOutput:
    """The generated ConfigMap of one gateway reference, or None when none may exist (then it is removed)."""

    name: str
    namespace: str
    configmap: dict[str, Any] | None
    problem: str | None = None


def render_consumer_config(overlay: Mapping[str, Any], spec: ConsumerConfigSpec, *, network: str, gateway: str,
                           namespace: str) -> ConsumerConfigOutput:
    """The consumer config for `overlay` (the rendered overlay body), or why there is none."""
    inference = [c for c in overlay.get("candidates") or [] if c.get("kind") == INFERENCE]
    if not inference:
        return ConsumerConfigOutput(spec.config_map_name, namespace, None)
    endpoints = {e.cluster: e for e in spec.cluster_endpoints}
    clusters = list(dict.fromkeys(str(c["cluster"]) for c in inference))
    missing = [name for name in clusters if name not in endpoints]
    if missing:
        problem = f"consumerConfig.clusterEndpoints has no entry for candidate clusters {missing}"
        return ConsumerConfigOutput(spec.config_map_name, namespace, None, problem)
    local_site = str(overlay["local_site"])
    candidates = [_static_candidate(c, local_site) for c in inference]
    filters: list[dict[str, Any]] = [
        {"filter": "json_body_field", "field": "model", "header": MODEL_HEADER},
        {"filter": "intelligent_route", "local_site": local_site, "model_header": MODEL_HEADER,
         "candidates": candidates},
    ]
    credentials = _credential_entries(candidates, spec.credential_mount_base)
    if credentials:
        filters.append({"filter": "credential_inject", "credentials": credentials})
    filters.append({"filter": "load_balancer", "clusters": [_cluster(endpoints[name], spec) for name in clusters]})
    config = {
        "listeners": [{"name": "public", "address": f"0.0.0.0:{spec.listener_port}",
                       "filter_chains": ["consumer-chain"]}],
        "filter_chains": [{"name": "consumer-chain", "filters": filters}],
        "admin": {"address": "127.0.0.1:9901"},
        "shutdown_timeout_secs": 5,
    }
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": spec.config_map_name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "agn-operator", "grid.praxis.fast/network": network,
                       "grid.praxis.fast/gateway": gateway},
        },
        "data": {DATA_KEY: yaml.safe_dump(config, sort_keys=False)},
    }
    return ConsumerConfigOutput(spec.config_map_name, namespace, configmap)


def _static_candidate(candidate: Mapping[str, Any], local_site: str) -> dict[str, Any]:
    out = {key: candidate[key] for key in STATIC_FIELDS if key in candidate}
    credential = candidate.get("credential")
    if credential is not None and candidate.get("site") == local_site:  # this gateway is the final hop
        out["credential"] = credential
    return out


def _credential_entries(candidates: Sequence[Mapping[str, Any]], mount_base: str) -> list[dict[str, Any]]:
    """One file-sourced entry per credential reference, under the mount base (never a value)."""
    seen: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for candidate in candidates:
        credential = candidate.get("credential")
        if credential is None:
            continue
        ref = credential["secretRef"]
        key = (credential["strategy"], ref["name"], ref["namespace"], ref["key"])
        seen.setdefault(key, {"strategy": key[0], "name": key[1], "namespace": key[2], "key": key[3],
                              "file": f"{mount_base.rstrip('/')}/{ref['name']}/{ref['key']}"})
    return [seen[key] for key in sorted(seen)]


def _cluster(endpoint: ClusterEndpoint, spec: ConsumerConfigSpec) -> dict[str, Any]:
    """A load_balancer cluster; TLS modes verify the server with the mounted CA (mutual_tls adds the site's
    certificate), as a Praxis upstream `tls` block."""
    cluster: dict[str, Any] = {"name": endpoint.cluster, "endpoints": [endpoint.address]}
    if endpoint.mode != "plaintext":
        base = spec.tls_cert_mount_path.rstrip("/")
        tls: dict[str, Any] = {"ca": {"ca_path": f"{base}/ca.crt"}, "sni": endpoint.sni, "verify": True}
        if endpoint.mode == "mutual_tls":
            tls["client_cert"] = {"cert_path": f"{base}/tls.crt", "key_path": f"{base}/tls.key"}
        cluster["tls"] = tls
    return cluster
