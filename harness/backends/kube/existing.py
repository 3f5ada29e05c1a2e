"""The existing-clusters backend: the kind backend's installation on clusters a user already has.

Each site maps to a kubeconfig context (`--grid-kube-contexts site-a=ctx1,site-b=ctx2`). Nothing here
creates or deletes a cluster; teardown gives the operator Deployment back the containers, volumes and
replicas it had when the run first found it (the producer and mesh profiles patch it) and removes the
objects this run labelled. The image must already be pullable by the clusters (`--grid-image`, default
agn-conformance/reference:dev). This backend has no access to the clusters' nodes, so it cannot crash an
operator without a goodbye or cut links between sites.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.backends.kube.backend import KubeBackend
from harness.backends.kube.handles import BackendUnavailable, SiteCluster
from harness.backends.kube.names import ADMIN_PORT, NAMESPACE, RUN_LABEL
from harness.backends.kube.tools import kubectl_too_old, wait_http
from harness.backends.runner import Runner
from harness.topology import Topology
from harness.waiting import WaitTimeout


def parse_contexts(text: str | None) -> dict[str, str]:
    """`site-a=ctx1,site-b=ctx2` -> {site: context}; a malformed entry is a ValueError naming it."""
    contexts: dict[str, str] = {}
    for entry in (text or "").split(","):
        entry = entry.strip()
        if not entry:
            continue
        site, sep, context = entry.partition("=")
        if not sep or not site.strip() or not context.strip():
            raise ValueError(f"--grid-kube-contexts entry {entry!r} is not SITE=CONTEXT")
        contexts[site.strip()] = context.strip()
    return contexts


def preflight_existing(runner: Runner, topology: Topology, contexts: Mapping[str, str]) -> str | None:
    """Why the existing backend cannot run here (None: it can)."""
    if runner.which("kubectl") is None:
        return "the existing backend needs kubectl on PATH (not found)"
    old = kubectl_too_old(runner)
    if old is not None:
        return old
    unmapped = [s.name for s in topology.sites if s.name not in contexts]
    if unmapped:
        return (f"the existing backend needs a kubeconfig context for site(s) {', '.join(unmapped)} "
                "(--grid-kube-contexts site=context,...)")
    known = runner.run(["kubectl", "config", "get-contexts", "-o", "name"], check=False, timeout=60)
    if known.returncode != 0:
        return f"`kubectl config get-contexts` failed (exit {known.returncode}): {known.stderr.strip()[:200]}"
    names = set(known.stdout.split())
    absent = sorted({contexts[s.name] for s in topology.sites} - names)
    if absent:
        return f"kubeconfig has no context(s) {', '.join(absent)}"
    return None


class ExistingBackend(KubeBackend):
    """Installs into the clusters behind the given contexts; never creates or deletes a cluster."""

    name = "existing"

    def __init__(self, workdir: Path, topology: Topology, impl: Any, *, contexts: Mapping[str, str],
                 **kwargs: Any) -> None:
        super().__init__(workdir, topology, impl, **kwargs)
        self.contexts = dict(contexts)

    def connect(self) -> list[SiteCluster]:
        return [SiteCluster(index, spec, self.contexts[spec.name], ["--context", self.contexts[spec.name]])
                for index, spec in enumerate(self.topology.sites)]

    def wait_gateway_ready(self, site: SiteCluster) -> None:
        ports = self.forward(site, "service/agn-gateway", [ADMIN_PORT], f"{site.spec.name}-agn-gateway")
        try:
            wait_http(f"http://127.0.0.1:{ports[ADMIN_PORT]}/ready", f"site {site.spec.name} gateway /ready",
                       self.ready_timeout)
        except WaitTimeout as exc:
            raise BackendUnavailable(f"{exc}\n{self.collect_logs(site)}") from None
        finally:
            self.supervisor.stop(self._forwards.pop(f"{site.spec.name}-agn-gateway"))

    def close(self) -> None:
        """Restore the operator Deployments the run changed, then remove the objects it labelled (both are
        left as they are with --grid-keep), with the mesh client Secret in the operator's own namespace where
        that is another; the clusters stay as they were."""
        super().close()
        if self.keep:
            return
        operator_namespace = self.operator_deployment.workload.namespace
        try:
            self.restore_operators()
        finally:
            for site in self.sites:
                self.kubectl(site, "--namespace", NAMESPACE, "delete", "deployment,service,configmap,secret", "-l",
                             f"{RUN_LABEL}={self.run_id}", "--ignore-not-found", "--wait=false", check=False)
                if operator_namespace != NAMESPACE:
                    self.kubectl(site, "--namespace", operator_namespace, "delete", "secret", "-l",
                                 f"{RUN_LABEL}={self.run_id}", "--ignore-not-found", "--wait=false", check=False)


__all__ = ["ExistingBackend", "parse_contexts", "preflight_existing"]
