"""What the kind and existing backends apply to a site before anything runs: the standing gateways'
configs, Secrets and first overlay, and the fake backends, merged with the kustomize overlay's objects."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from harness import contract
from harness.backends.kube import kube_yaml
from harness.backends.kube.handles import SiteCluster
from harness.backends.kube.manifests import configmap_doc, deployment_doc, secret_doc, service_doc
from harness.backends.kube.names import (
    ADMIN_PORT,
    FAKE_MTLS_DIR,
    FAKE_MTLS_PORT,
    FAKE_PORT,
    GATEWAY_HOP_TLS_DIR,
    GATEWAY_HOP_TLS_SECRET,
    GATEWAY_PORT,
    METRICS_CA_SECRET,
    NAMESPACE,
    OVERLAY_KEY,
    POD_OVERLAY_DIR,
    STANDING_MODEL,
    STANDING_OVERLAY_CONFIGMAP,
)
from harness.backends.local import fake_sni, is_hop_backend
from harness.contract import ScopeSpec
from harness.gateway_config import (
    PROVIDER_FILTER_ORDER,
    VARIANTS,
    ListenerTls,
    ProviderRoute,
    TrustedPeer,
    UpstreamTls,
    render_gateway_config,
    render_provider_gateway_config,
)
from harness.pki import GRID_ORGANIZATION

if TYPE_CHECKING:
    from harness.backends.kube.backend import KubeBackend


def render_site(backend: KubeBackend, site: SiteCluster, overlay: str = "") -> Path:
    """The site's ConfigMaps, Secrets and fake backends as one file for `kubectl apply -f`, with the
    objects of `overlay` (the kustomize output) that it does not replace.

    The standing gateway reaches its hop clusters at the fakes' mTLS listeners with a client
    certificate of the run's CA, from the Secret agn-gateway-hop-tls its Deployment mounts.
    """
    spec = site.spec
    clusters = {p.cluster: backend.fake_address(p.name) for p in spec.providers}
    model = [p.cluster for p in spec.model_providers]
    management = next((p.cluster for p in spec.providers if p.role == "management"), None)
    scope = ScopeSpec(backend.topology.network, spec.gateway, spec.namespace, spec.name)
    hop = [p for p in spec.providers if is_hop_backend(p) and p.cluster in model]
    hop_tls = {p.cluster: UpstreamTls(f"{GATEWAY_HOP_TLS_DIR}/ca.crt", f"{GATEWAY_HOP_TLS_DIR}/tls.crt",
                                      f"{GATEWAY_HOP_TLS_DIR}/tls.key", fake_sni(spec.name, p.name))
               for p in hop}
    # the provider gateway keeps the plain listeners: the fakes are its private backends
    consumer_clusters = {**clusters, **{p.cluster: backend.fake_mtls_address(p.name) for p in hop}}
    gateway_config = render_gateway_config(
        VARIANTS["core"], listen=f"0.0.0.0:{GATEWAY_PORT}", admin=f"0.0.0.0:{ADMIN_PORT}",
        overlay_file=f"{POD_OVERLAY_DIR}/{OVERLAY_KEY}", scope=scope, clusters=consumer_clusters,
        hop_clusters=model, management_cluster=management, allowlist=model, hop_tls=hop_tls)
    hop_client = backend.pki.client(f"kube-{spec.name}-gateway-hop-client")
    sni = f"{spec.provider_gateway or 'provider-gateway'}.{spec.name}.grid.test"
    server = backend.pki.server(f"kube-{spec.name}-provider-gateway", sni,
                             f"agn-provider-gateway.{NAMESPACE}.svc")
    first = spec.model_providers[0]
    standing_routes = [ProviderRoute(f"inference_model/{STANDING_MODEL}/{first.site}/{first.cluster}",
                                     STANDING_MODEL, first.cluster)]
    standing_overlay = contract.encode(contract.envelope(
        [contract.candidate(STANDING_MODEL, first.site, first.cluster)], scope)).decode()
    provider_config = render_provider_gateway_config(
        listen="0.0.0.0:8443", admin=f"0.0.0.0:{ADMIN_PORT}",
        tls=ListenerTls("/etc/praxis/tls/tls.crt", "/etc/praxis/tls/tls.key", "/etc/praxis/tls/ca.crt"),
        trusted_peers=[TrustedPeer(organization=GRID_ORGANIZATION)],
        provider_id=f"{spec.name}-{spec.provider_gateway or 'provider-gateway'}",
        routes=standing_routes, credentials=(), clusters=clusters,
        # it injects nothing: no credential_inject (an empty one is a config error)
        filter_order=tuple(n for n in PROVIDER_FILTER_ORDER if n != "credential_inject"),
        insecure_options={"allow_public_admin": True})  # the kubelet probes the admin port on the pod address
    docs: list[dict[str, Any]] = [
        # before the config naming its files, so a gateway that restarts on the new config finds them
        secret_doc(GATEWAY_HOP_TLS_SECRET, {"tls.crt": hop_client.cert.read_bytes(),
                                         "tls.key": hop_client.key.read_bytes(),
                                         "ca.crt": backend.pki.ca_path.read_bytes()}, backend._labels()),
        configmap_doc("agn-gateway-config", {"praxis.yaml": gateway_config}, backend._labels()),
        configmap_doc("agn-provider-gateway-config", {"praxis.yaml": provider_config}, backend._labels()),
        secret_doc("agn-provider-gateway-tls", {"tls.crt": server.cert.read_bytes(),
                                             "tls.key": server.key.read_bytes(),
                                             "ca.crt": backend.pki.ca_path.read_bytes()}, backend._labels()),
        secret_doc("agn-provider-credentials", {}, backend._labels()),
        # the run's CA, where the suites' metricsConfig.tls.caSecretRef points: an operator resolves the
        # reference itself or mounts the Secret (the reference's kind overlay does); nothing is added to its command
        secret_doc(METRICS_CA_SECRET, {"ca.crt": backend.pki.ca_path.read_bytes()}, backend._labels()),
        configmap_doc(STANDING_OVERLAY_CONFIGMAP, {OVERLAY_KEY: standing_overlay}, backend._labels()),
        configmap_doc("agn-gateway-scope", {
            "OVERLAY_CONFIGMAP": STANDING_OVERLAY_CONFIGMAP,
            "EXPECTED_SCOPE": ",".join(f"{k}={v}" for k, v in scope.as_dict().items())}, backend._labels()),
    ]
    for provider in spec.providers:
        docs += fake_backend_docs(backend, provider.name, provider.site,
                                   fake_sni(spec.name, provider.name) if provider in hop else None)
    replaced = {(d["kind"], d["metadata"]["name"]) for d in docs}
    kept = [d for d in yaml.safe_load_all(overlay) if isinstance(d, dict)
            and (d.get("kind"), (d.get("metadata") or {}).get("name")) not in replaced]
    path = backend._site_dir(site) / "site.yaml"
    workloads = [d for d in kept if d["kind"] == "Deployment"]  # after the ConfigMaps their pods read
    path.write_text(kube_yaml.dump_all([*(d for d in kept if d["kind"] != "Deployment"), *docs, *workloads]))
    return path

def fake_backend_docs(backend: KubeBackend, name: str, site: str, sni: str | None = None) -> list[dict[str, Any]]:
    """A fake backend's Deployment and Service; with `sni` (a hop cluster's backend) also its mTLS
    listener, its server certificate (naming `sni` and the Service) and the run's CA as client CA."""
    kname = f"agn-fake-{name}"
    labels = backend._labels(**{"app.kubernetes.io/name": kname})
    container: dict[str, Any] = {
        "name": "fake-backend", "image": backend.image, "imagePullPolicy": "IfNotPresent",
        "command": ["agn-fake-backend", "--name", name, "--site", site, "--listen", f"0.0.0.0:{FAKE_PORT}"],
        "ports": [{"containerPort": FAKE_PORT, "name": "http"}],
        "readinessProbe": {"httpGet": {"path": "/admin/stats", "port": FAKE_PORT}, "periodSeconds": 1}}
    ports = [{"name": "http", "port": FAKE_PORT, "targetPort": FAKE_PORT}]
    if sni is None:
        return [deployment_doc(kname, labels, [container], []), service_doc(kname, labels, ports)]
    files = backend.pki.server(f"kube-fake-{sni}", sni, f"{kname}.{NAMESPACE}.svc.cluster.local",
                            f"{kname}.{NAMESPACE}.svc")
    container["command"] += ["--mtls-listen", f"0.0.0.0:{FAKE_MTLS_PORT}", "--tls-cert", f"{FAKE_MTLS_DIR}/tls.crt",
                             "--tls-key", f"{FAKE_MTLS_DIR}/tls.key", "--client-ca", f"{FAKE_MTLS_DIR}/ca.crt"]
    container["ports"].append({"containerPort": FAKE_MTLS_PORT, "name": "mtls"})
    container["volumeMounts"] = [{"name": "mtls", "mountPath": FAKE_MTLS_DIR, "readOnly": True}]
    ports.append({"name": "mtls", "port": FAKE_MTLS_PORT, "targetPort": FAKE_MTLS_PORT})
    secret = secret_doc(f"{kname}-mtls", {"tls.crt": files.cert.read_bytes(), "tls.key": files.key.read_bytes(),
                                       "ca.crt": backend.pki.ca_path.read_bytes()}, labels)
    volumes = [{"name": "mtls", "secret": {"secretName": f"{kname}-mtls"}}]
    return [secret, deployment_doc(kname, labels, [container], volumes), service_doc(kname, labels, ports)]
