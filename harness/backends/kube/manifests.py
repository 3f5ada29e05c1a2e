"""Pure builders of the Kubernetes objects the backends apply, and readers of what the API answers.

Nothing here runs a command: each function maps values to a manifest (or a status to a verdict), so
the manifests are tested without a cluster.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.backends.kube.handles import FollowedConfigMap
from harness.backends.kube.names import (
    FIRST_DELIVERY_SECONDS,
    MESH_CLIENT_DIR,
    MESH_CLIENT_SECRET,
    NAMESPACE,
    OVERLAY_KEY,
    POD_FILES_DIR,
    POD_OVERLAY_DIR,
    POD_SEED_DIR,
    SYNC_ADMIN_PORT,
    TLS_METRICS_PORT,
)
from harness.backends.local import OperatorUnsupported
from harness.impl_kube import REFERENCE_OPERATOR, OperatorWorkload

#: Waiting reasons after which a container will not start without someone changing the pod.
_STUCK_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError",
                            "CreateContainerError"})


@dataclass(frozen=True)
class PodState:
    """What a gateway pod's status says: "pending", "ready" or "failed" (with the exit code when one exited)."""

    phase: str
    exit_code: int | None = None
    detail: str = ""


def pod_state(doc: Mapping[str, Any] | None) -> PodState:
    """Read `kubectl get pods -o json` of one gateway's pods: ready, failed (why, exit code) or pending."""
    pods = [p for p in (doc or {}).get("items") or [] if isinstance(p, dict)]
    if not pods:
        return PodState("pending", detail="no pod yet")
    seen: list[str] = []
    for pod in pods:
        status = pod.get("status") or {}
        inits = status.get("initContainerStatuses") or []
        apps = status.get("containerStatuses") or []
        for container in [*inits, *apps]:
            name = container.get("name")
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in _STUCK_REASONS:
                return PodState("failed", None, f"container {name} cannot start: {waiting.get('reason')}: "
                                                f"{waiting.get('message', '')}".strip())
            for key in ("state", "lastState"):
                ended = (container.get(key) or {}).get("terminated")
                if not ended:
                    continue
                code = ended.get("exitCode")
                if container in inits and code == 0:
                    continue
                return PodState("failed", code if isinstance(code, int) else None,
                                f"container {name} exited with {code} ({ended.get('reason', 'Error')})")
        if apps and all(c.get("ready") for c in apps):
            return PodState("ready")
        seen.append(f"{(pod.get('metadata') or {}).get('name')}: {status.get('phase')} "
                    f"ready={[c.get('name') for c in apps if c.get('ready')]}")
    return PodState("pending", detail="; ".join(seen))


def operator_container(pod: Mapping[str, Any], workload: OperatorWorkload = REFERENCE_OPERATOR) -> dict[str, Any]:
    """The operator's container in a pod spec: the one the workload names, else the one running agn-operator,
    else the first (a vendor's pod with sidecars names its operator's container in the descriptor)."""
    containers = [c for c in pod.get("containers") or [] if isinstance(c, dict)]
    if workload.container is not None:
        named = next((c for c in containers if c.get("name") == workload.container), None)
        if named is None:
            raise OperatorUnsupported(f"Deployment {workload.name} has no container {workload.container} (its "
                                      f"containers: {', '.join(str(c.get('name')) for c in containers) or 'none'})")
        return dict(named)
    operator = next((c for c in containers if "agn-operator" in (c.get("command") or [])[:1]),
                    containers[0] if containers else None)
    if operator is None:
        raise OperatorUnsupported(f"Deployment {workload.name} has no containers")
    return dict(operator)


def operator_patch(deployment: Mapping[str, Any], mesh_args: Sequence[str] | None = None, *,
                    mesh_env: Mapping[str, str] | None = None, mesh_client: bool = False,
                    node: str | None = None, workload: OperatorWorkload = REFERENCE_OPERATOR) -> dict[str, Any] | None:
    """A strategic merge patch of the operator container for a mesh (None: nothing to change).

    Outside a mesh the operator runs exactly as its manifests say. In a mesh it appends the descriptor's
    `mesh_args` to the container's command and sets its `mesh_env` (an operator reading its mesh settings
    from the environment keeps its command, or its image's entrypoint), mounts the mesh client Secret, and
    with `node` pins the pod to that node (by its `kubernetes.io/hostname` label), whose address the mesh
    settings advertise. The command list is replaced whole by the patch; env, volumes and mounts merge by
    name and mount path.
    """
    operator = operator_container(((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}, workload)
    command = list(operator.get("command") or [])
    if mesh_args and not command:
        raise OperatorUnsupported(f"Deployment {workload.name}: container {operator.get('name')} sets no "
                                  "command to append operator.mesh_args to")
    wanted = command + list(mesh_args or ())
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    env = [{"name": name, "value": value} for name, value in (mesh_env or {}).items()]
    if (mesh_args is not None or mesh_env) and mesh_client:
        volumes.append({"name": "mesh-client", "secret": {"secretName": MESH_CLIENT_SECRET}})
        mounts.append({"name": "mesh-client", "mountPath": MESH_CLIENT_DIR, "readOnly": True})
    pod_spec = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    selector = {**(pod_spec.get("nodeSelector") or {}), "kubernetes.io/hostname": node} if node else None
    if wanted == command and not volumes and not env and (selector is None
                                                           or selector == pod_spec.get("nodeSelector")):
        return None
    container: dict[str, Any] = {"name": operator["name"]}
    if wanted != command:
        container["command"] = wanted
    if env:
        container["env"] = env
    if mounts:
        container["volumeMounts"] = mounts
    pod: dict[str, Any] = {"containers": [container]}
    if volumes:
        pod["volumes"] = volumes
    if selector is not None:
        pod["nodeSelector"] = selector
    return {"spec": {"template": {"spec": pod}}}


def restore_patch(deployment: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON merge patch giving a Deployment back its replicas, containers and volumes as they were."""
    spec = deployment.get("spec") or {}
    pod = (spec.get("template") or {}).get("spec") or {}
    return {"spec": {"replicas": spec.get("replicas", 1),
                     "template": {"spec": {"containers": pod.get("containers") or [],
                                           "volumes": pod.get("volumes"),
                                           "nodeSelector": pod.get("nodeSelector")}}}}


def object_meta(name: str, labels: Mapping[str, str], namespace: str = NAMESPACE) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": dict(labels)}


def configmap_doc(name: str, data: Mapping[str, str], labels: Mapping[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": object_meta(name, labels), "data": dict(data)}


def secret_doc(name: str, data: Mapping[str, bytes], labels: Mapping[str, str],
               namespace: str = NAMESPACE) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": object_meta(name, labels, namespace),
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}


#: What the Pod Security "restricted" level requires of every container (manifests/base/namespace.yaml
#: enforces it on the namespace, so a pod without it is never created).
RESTRICTED_CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def restricted_container(container: Mapping[str, Any]) -> dict[str, Any]:
    """`container` with the restricted level's securityContext (its own settings kept where it has them)."""
    return {**container, "securityContext": {**RESTRICTED_CONTAINER_SECURITY,
                                             **(container.get("securityContext") or {})}}


def deployment_doc(name: str, labels: Mapping[str, str], containers: list[dict[str, Any]],
                volumes: list[dict[str, Any]], service_account: str | None = None) -> dict[str, Any]:
    selector = {"app.kubernetes.io/name": name}
    pod: dict[str, Any] = {"containers": [restricted_container(c) for c in containers],
                           "securityContext": {"runAsNonRoot": True, "runAsUser": 10001,
                                               "seccompProfile": {"type": "RuntimeDefault"}}}
    if volumes:
        pod["volumes"] = volumes
    if service_account:
        pod["serviceAccountName"] = service_account
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": object_meta(name, labels),
            "spec": {"replicas": 1, "selector": {"matchLabels": selector},
                     "template": {"metadata": {"labels": {**dict(labels), **selector}}, "spec": pod}}}


def service_doc(name: str, labels: Mapping[str, str], ports: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": object_meta(name, labels),
            "spec": {"selector": {"app.kubernetes.io/name": name}, "ports": ports}}


#: Seeds the overlay directory before the gateway starts from the seed ConfigMaps' parts, joined in order
#: (nothing when there are none).
SEED_OVERLAY_SCRIPT = ("import pathlib, sys\n"
                        "from harness.projection import project\n"
                        "parts = sorted(pathlib.Path(sys.argv[3]).glob('part-*'))\n"
                        "if parts:\n"
                        "    data = b''.join(p.read_bytes() for p in parts)\n"
                        "    project(pathlib.Path(sys.argv[1]), {sys.argv[2]: data})\n")

#: Bytes of seed per ConfigMap: the API server refuses a ConfigMap over 1 MiB, and a suite may seed a
#: gateway with an overlay of 2 MiB or more (the oversize cases), so a seed is split over several.
SEED_CHUNK_BYTES = 768 * 1024


def seed_configmaps(kname: str, seed: bytes | None, labels: Mapping[str, str]) -> list[dict[str, Any]]:
    """The ConfigMaps `{kname}-overlay-<i>` carrying `seed` as parts `part-<i>` (one empty one without a seed)."""
    chunks = [seed[i:i + SEED_CHUNK_BYTES] for i in range(0, len(seed), SEED_CHUNK_BYTES)] if seed else []
    docs = [configmap_doc(f"{kname}-overlay-{i}", {}, labels) for i in range(max(1, len(chunks)))]
    for i, chunk in enumerate(chunks):
        docs[i]["binaryData"] = {f"part-{i:04d}": base64.b64encode(chunk).decode()}
    return docs


#: Keeps the writer container alive for `kubectl exec` and ends it at once on SIGTERM (it runs as PID 1).
IDLE_SCRIPT = ("import signal, sys\nsignal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
               "while True:\n    signal.pause()\n")


@dataclass(frozen=True)
class GatewayPod:
    """How one gateway pod is made: its name, overlay mode, followed ConfigMap and ports."""

    kname: str
    mode: str
    follow: FollowedConfigMap | None
    listen_port: int
    admin_port: int
    nodeport: bool


def gateway_docs(pod: GatewayPod, image: str, labels: Mapping[str, str], config: str, seed: bytes | None,
                 files: Mapping[str, bytes], env: Mapping[str, str]) -> list[dict[str, Any]]:
    """A gateway's objects: its config, files and env, its Deployment (with the overlay writer, the
    overlay-sync container or neither, as `pod.mode` says) and, for a NodePort gateway, its Service."""
    kname = pod.kname
    command = ["agn-gateway", "-c", "/etc/praxis/praxis.yaml"]
    if pod.mode == "follow":
        # overlay-sync and the gateway start together; the gateway waits for the first delivery, as
        # connect() starts it only after one on the local backend (then starts anyway and says why)
        wait = (f'i=0; while [ ! -e "$0" ] && [ "$i" -lt {FIRST_DELIVERY_SECONDS * 10} ]; do sleep 0.1; '
                'i=$((i+1)); done; exec "$@"')
        command = ["sh", "-c", wait, f"{POD_OVERLAY_DIR}/{OVERLAY_KEY}", *command]
    gateway: dict[str, Any] = {
        "name": "gateway", "image": image, "imagePullPolicy": "IfNotPresent", "command": command,
        "envFrom": [{"secretRef": {"name": f"{kname}-env"}}],
        "ports": [{"containerPort": pod.listen_port, "name": "listen"},
                  {"containerPort": pod.admin_port, "name": "admin"}],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": pod.admin_port}, "periodSeconds": 1},
        "volumeMounts": [{"name": "config", "mountPath": "/etc/praxis", "readOnly": True},
                         {"name": "files", "mountPath": POD_FILES_DIR, "readOnly": True}]}
    containers = [gateway]
    init: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = [{"name": "config", "configMap": {"name": f"{kname}-config"}},
                                     {"name": "files", "secret": {"secretName": f"{kname}-files"}}]
    docs = [configmap_doc(f"{kname}-config", {"praxis.yaml": config}, labels)]
    if pod.mode != "none":
        gateway["volumeMounts"].append({"name": "overlay", "mountPath": POD_OVERLAY_DIR, "readOnly": True})
        volumes.append({"name": "overlay", "emptyDir": {}})
    if pod.mode == "mirror":
        writer = {"name": "overlay-writer", "image": image, "imagePullPolicy": "IfNotPresent",
                  "command": ["python", "-c", IDLE_SCRIPT],
                  "volumeMounts": [{"name": "overlay", "mountPath": POD_OVERLAY_DIR}]}
        init.append({"name": "overlay-seed", "image": image, "imagePullPolicy": "IfNotPresent",
                     "command": ["python", "-c", SEED_OVERLAY_SCRIPT, POD_OVERLAY_DIR, OVERLAY_KEY, POD_SEED_DIR],
                     "volumeMounts": [{"name": "overlay", "mountPath": POD_OVERLAY_DIR},
                                      {"name": "seed", "mountPath": POD_SEED_DIR, "readOnly": True}]})
        containers.insert(0, writer)
        seeds = seed_configmaps(kname, seed, labels)
        volumes.append({"name": "seed", "projected": {"sources": [{"configMap": {"name": d["metadata"]["name"]}}
                                                                  for d in seeds]}})
        docs += seeds
    elif pod.mode == "follow" and pod.follow is not None:
        scope = ",".join(f"{key}={value}" for key, value in pod.follow.scope.as_dict().items())
        sync = {"name": "overlay-sync", "image": image, "imagePullPolicy": "IfNotPresent",
                "command": ["agn-overlay-sync", "--configmap", f"{pod.follow.namespace}/{pod.follow.name}",
                            *(["--key", pod.follow.key] if pod.follow.key != OVERLAY_KEY else []),
                            "--target-dir", POD_OVERLAY_DIR, "--expected-scope", scope,
                            "--admin", f"0.0.0.0:{SYNC_ADMIN_PORT}"],
                "ports": [{"containerPort": SYNC_ADMIN_PORT, "name": "sync-admin"}],
                "volumeMounts": [{"name": "overlay", "mountPath": POD_OVERLAY_DIR}]}
        containers.insert(0, sync)
    deployment = deployment_doc(kname, labels, containers, volumes, service_account="agn-gateway")
    if init:
        deployment["spec"]["template"]["spec"]["initContainers"] = [restricted_container(c) for c in init]
    docs += [secret_doc(f"{kname}-files", dict(files), labels),
             secret_doc(f"{kname}-env", {k: v.encode() for k, v in env.items()}, labels),
             deployment]
    if pod.nodeport:
        service = service_doc(kname, labels, [{"name": "listen", "port": pod.listen_port,
                                            "targetPort": pod.listen_port}])
        service["spec"]["type"] = "NodePort"
        docs.append(service)
    return docs


def tls_metrics_docs(kname: str, image: str, labels: Mapping[str, str], name: str, site: str) -> list[dict[str, Any]]:
    """The TLS metrics endpoint: a fake backend serving HTTPS with the certificate of Secret `{kname}-tls`, and
    its Service."""
    container = {"name": "fake-backend", "image": image, "imagePullPolicy": "IfNotPresent",
                 "command": ["agn-fake-backend", "--name", name, "--site", site,
                             "--listen", f"0.0.0.0:{TLS_METRICS_PORT}", "--tls-cert", "/etc/agn/tls/tls.crt",
                             "--tls-key", "/etc/agn/tls/tls.key"],
                 "ports": [{"containerPort": TLS_METRICS_PORT, "name": "https"}],
                 "readinessProbe": {"httpGet": {"path": "/admin/stats", "port": TLS_METRICS_PORT,
                                                "scheme": "HTTPS"}, "periodSeconds": 1},
                 "volumeMounts": [{"name": "tls", "mountPath": "/etc/agn/tls", "readOnly": True}]}
    volumes = [{"name": "tls", "secret": {"secretName": f"{kname}-tls"}}]
    service_ports = [{"name": "https", "port": TLS_METRICS_PORT, "targetPort": TLS_METRICS_PORT}]
    return [deployment_doc(kname, labels, [container], volumes), service_doc(kname, labels, service_ports)]
