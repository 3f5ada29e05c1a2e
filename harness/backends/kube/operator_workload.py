"""The operator under test as a workload of a site's cluster: its Deployment, pods and logs, wherever it runs.

A vendor's manifests name the operator's Deployment and namespace as they like (the public grid operator is
Deployment grid-operator in namespace grid-system, running its image's entrypoint); the descriptor's
`operator.kubernetes.deployment` says which (harness.impl_kube.OperatorWorkload, the reference's
agn-system/agn-operator by default). Every kubectl command aimed at the operator goes through here, with
that name, namespace and pod selector: finding it, patching it for a mesh, rollout waits, scaling it to
zero, restarting it, its pods and logs, and giving it back what the run changed.

What the harness makes for the gateways (fake backends, the ConfigMaps it writes, the run's CA Secret that
the suites' caSecretRef names) stays in the gateway namespace; only what the operator's pod mounts, the
mesh client Secret, is made in the operator's own namespace (a pod mounts Secrets of its namespace only).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.backends.kube.handles import SiteCluster
from harness.backends.kube.manifests import operator_patch, restore_patch, secret_doc
from harness.backends.kube.names import MESH_CLIENT_FILES, MESH_CLIENT_SECRET, RUN_LABEL
from harness.backends.local import OperatorUnsupported
from harness.backends.runner import CommandFailed
from harness.impl_kube import KubeComponent, OperatorWorkload
from harness.waiting import poll_until

if TYPE_CHECKING:
    from harness.backends.kube.backend import KubeBackend

__all__ = ["OperatorDeployment", "operator_workload"]


def operator_workload(impl: Any) -> OperatorWorkload:
    """The operator's Deployment as the descriptor's operator.kubernetes.deployment names it (the reference's
    without a kubernetes block)."""
    kubernetes = getattr(getattr(impl, "operator", None), "kubernetes", None)
    return kubernetes.deployment if isinstance(kubernetes, KubeComponent) else OperatorWorkload()


class OperatorDeployment:
    """The operator's Deployment in every site's cluster, and what the run changed of it.

    The first time the run changes a site's Deployment (a mesh patch, a scale to zero) it keeps the object as
    found, which `restore` puts back.
    """

    def __init__(self, backend: KubeBackend, workload: OperatorWorkload) -> None:
        self.backend = backend
        self.workload = workload
        self._originals: dict[str, dict[str, Any]] = {}  # site -> its Deployment before the run changed it
        self._changed: set[str] = set()  # sites whose Deployment the run patched or scaled

    @property
    def ref(self) -> str:
        """kubectl's name of the Deployment (`deployment/<name>`)."""
        return f"deployment/{self.workload.name}"

    @property
    def where(self) -> str:
        """`<namespace>/<name>`, as messages name it."""
        return f"{self.workload.namespace}/{self.workload.name}"

    def kubectl(self, site: SiteCluster, *args: str, check: bool = True, timeout: float | None = 600.0) -> str:
        """kubectl in the operator's namespace."""
        return self.backend.kubectl(site, "--namespace", self.workload.namespace, *args, check=check,
                                    timeout=timeout)

    def get(self, site: SiteCluster) -> dict[str, Any] | None:
        """The Deployment as the cluster holds it (None: there is none)."""
        return self.backend.kubectl_json(site, "--namespace", self.workload.namespace, "get", "deployment",
                                         self.workload.name, "--ignore-not-found")

    def pods(self, site: SiteCluster) -> list[dict[str, Any]]:
        """The operator's pods, by the workload's label selector."""
        found = self.backend.kubectl_json(site, "--namespace", self.workload.namespace, "get", "pods", "-l",
                                          self.workload.selector) or {}
        return [p for p in found.get("items") or [] if isinstance(p, dict)]

    def logs(self, site: SiteCluster, tail: int = 200, *, previous: bool = False) -> str:
        return self.backend.logs(site, self.workload.name, tail, previous=previous, namespace=self.workload.namespace)

    def await_rollout(self, site: SiteCluster, what: str) -> None:
        self.backend.await_rollout(site, self.workload.name, what, namespace=self.workload.namespace)

    def restart(self, site: SiteCluster) -> None:
        """A rollout restart (a new pod), waited for until it has rolled out."""
        self.kubectl(site, "rollout", "restart", self.ref, timeout=120)
        self.await_rollout(site, "the restarted operator")

    def ensure(self, site: SiteCluster, mesh: Mapping[str, str] | None = None) -> None:
        """The Deployment as its manifests made it; in a mesh given its mesh arguments or environment and client
        certificate (Secret agn-operator-mesh-client in its namespace) and pinned to its node, then rolled out.
        The patch is computed from the Deployment as this run first found it, which `restore` puts back."""
        deployment = self.get(site)
        if deployment is None:
            raise OperatorUnsupported(f"site {site.spec.name} has no Deployment {self.where} "
                                      "(the kustomize overlay leaves the operator out)")
        original = self._originals.setdefault(site.name, deployment)
        mesh_args: list[str] | None = None
        mesh_env: dict[str, str] = {}
        client: dict[str, bytes] = {}
        if mesh is not None:
            client = {name: Path(mesh[key]).read_bytes() for key, name in MESH_CLIENT_FILES.items() if mesh.get(key)}
            if client:
                self.backend.apply_json(site, [secret_doc(MESH_CLIENT_SECRET, client, {RUN_LABEL: self.backend.run_id},
                                                          namespace=self.workload.namespace)])
            mesh_args, mesh_env = self.backend.render_mesh(mesh)
        # The advertised address is the first node's: the pod must run there (a NodePort with
        # externalTrafficPolicy Local answers only on the node of its pod). One node on kind.
        node = self.backend.nodes(site)[0][0] if mesh is not None else None
        patch = operator_patch(original, mesh_args, mesh_env=mesh_env, mesh_client=bool(client), node=node,
                               workload=self.workload)
        if patch is not None:
            self._changed.add(site.name)
            self.kubectl(site, "patch", "deployment", self.workload.name, "--type", "strategic", "-p",
                         json.dumps(patch))
        self.await_rollout(site, "the operator")

    def stop(self, site: SiteCluster, timeout: float = 120.0) -> None:
        """Scale to zero (SIGTERM: the operator leaves the mesh gracefully) and wait until no pod is left."""
        if site.name not in self._originals:  # what restore gives back
            found = self.get(site)
            if found is not None:
                self._originals[site.name] = found
        self._changed.add(site.name)
        self.kubectl(site, "scale", self.ref, "--replicas=0")
        poll_until(lambda: [(p.get("metadata") or {}).get("name") for p in self.pods(site)],
                   lambda names: not names, what=f"site {site.spec.name}: the operator's pods to be gone",
                   timeout=timeout, interval=0.25, max_interval=1.0)

    def restore(self, sites: Iterable[SiteCluster]) -> None:
        """Give every Deployment this run patched or scaled back the containers, volumes, node selector and
        replicas it had before (one merge patch each: lists are replaced whole, an absent key removed)."""
        errors: list[str] = []
        for site in sites:
            original = self._originals.get(site.name)
            if site.name not in self._changed or original is None:
                continue
            try:
                self.kubectl(site, "patch", "deployment", self.workload.name, "--type", "merge", "-p",
                             json.dumps(restore_patch(original)))
            except CommandFailed as exc:
                errors.append(f"{site.spec.name}: {exc}")
                continue
            self._changed.discard(site.name)
        if errors:
            raise RuntimeError(f"could not restore the operator Deployment {self.where} of " + "; ".join(errors))
