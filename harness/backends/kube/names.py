"""Names, ports and paths the Kubernetes backends give the objects they make in a site's cluster."""

from __future__ import annotations

from harness.impl_kube import REFERENCE_OPERATOR

NAMESPACE = "agn-system"
DEFAULT_IMAGE = "agn-conformance/reference:dev"
OVERLAY_KEY = "routing-overlay.json"
POD_OVERLAY_DIR = "/var/run/agn/overlay"
POD_FILES_DIR = "/var/run/agn/files"
POD_SEED_DIR = "/var/run/agn/seed"
GATEWAY_PORT = 8080
ADMIN_PORT = 9901
SYNC_ADMIN_PORT = 9102
FAKE_PORT = 8000
#: The fake backends' mTLS listener (hop clusters), with its certificate, key and client CA from a Secret.
FAKE_MTLS_PORT = 8444
FAKE_MTLS_DIR = "/etc/agn/mtls"
TLS_METRICS_PORT = 8443
#: The optional Secret of the standing gateway (manifests/base/gateway.yaml) with its hop client
#: certificate (tls.crt, tls.key) and the CA that signs the hop clusters (ca.crt), and where it is mounted.
GATEWAY_HOP_TLS_SECRET = "agn-gateway-hop-tls"
GATEWAY_HOP_TLS_DIR = "/etc/agn/hop-tls"
GATEWAY_NODEPORT = 30080
ADMIN_NODEPORT = 30901
FIELD_MANAGER = "agn-conformance"
RUN_LABEL = "agn.grid/run"
GATEWAY_LABEL = "agn.grid/gateway"
#: The reference operator's Deployment and pod selector (in NAMESPACE): the defaults of a descriptor's
#: operator.kubernetes.deployment. The backends address the operator under test through
#: harness.backends.kube.operator_workload, wherever its descriptor puts it.
OPERATOR_DEPLOYMENT = REFERENCE_OPERATOR.name
OPERATOR_SELECTOR = REFERENCE_OPERATOR.selector
#: The Secret holding the run's CA: the name the suites' metricsConfig.tls.caSecretRef points at.
METRICS_CA_SECRET = "metrics-ca"
METRICS_CA_DIR = "/etc/agn/metrics-ca"
#: The operator's mesh membership: the pod's UDP port and the NodePort of Service agn-operator-mesh
#: (externalTrafficPolicy Local), which members of other clusters send to at the node's address.
MESH_POD_PORT = 7946
MESH_NODEPORT = 30946
#: The Secret carrying the operator's mesh client certificate (tls.crt, tls.key) and where it is mounted.
MESH_CLIENT_SECRET = "agn-operator-mesh-client"
MESH_CLIENT_DIR = "/etc/agn/mesh-client"
MESH_CLIENT_FILES = {"client_cert": "tls.crt", "client_key": "tls.key"}
#: What the descriptor's operator placeholders name in the pod: the operator reads the API, not
#: directories, so {manifests}, {out} and {workdir} point at its scratch emptyDir.
POD_SCRATCH_DIR = "/tmp"
TLS_METRICS_NAME = "agn-tls-metrics"
#: How long a gateway following a ConfigMap waits for overlay-sync's first delivery before starting anyway.
FIRST_DELIVERY_SECONDS = 60
#: The standing gateways of a site (manifests/base) need something to serve before any grid exists: the
#: consumer gateway's overlay-sync follows this harness-written ConfigMap, whose overlay and the provider
#: gateway's one route send this model to the site's first model provider.
STANDING_OVERLAY_CONFIGMAP = "agn-gateway-standing-overlay"
STANDING_MODEL = "agn-standing"
