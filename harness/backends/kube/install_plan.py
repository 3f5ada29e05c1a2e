"""What a cluster backend installs in every site: the reference's kustomize overlay, with each component a
descriptor installs from its own image and manifests (`operator.kubernetes`) in place of the reference's.

A vendor operator that only runs as a Kubernetes controller is judged this way: the kind backend loads its
image into each cluster (`kind load docker-image`, nothing is pulled), and the objects of the reference's
operator (every object of manifests/base labelled `app.kubernetes.io/name: agn-operator`) are left out of
the applied overlay for the vendor's manifests, rendered here: a kustomize directory with `kubectl
kustomize`, a plain directory file by file (`*.yaml`, `*.yml`, `*.json`, in name order), a file as it is.
The grid CRDs are the harness's own (manifests/crds, the spec's API): a CustomResourceDefinition of the
grid group in the vendor's manifests is left out, and any other is applied with the rest.

Rendering is separate from running: `render_component` takes the kustomize step as a function, so the
plan is checked without a cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from harness.backends.kube import kube_yaml
from harness.backends.kube.handles import BackendUnavailable, SiteCluster
from harness.backends.kube.names import DEFAULT_IMAGE, NAMESPACE
from harness.impl_kube import KubeComponent, KubeOutputs
from harness.resources import API_VERSION

if TYPE_CHECKING:
    from harness.backends.kube.backend import KubeBackend

__all__ = ["COMPONENT_LABEL", "REFERENCE_COMPONENTS", "InstallPlan", "VendorComponent", "apply_site",
           "install_plan", "kube_outputs", "merge_overlay", "render_component"]

#: The label every object of a reference component in manifests/base carries: what a vendor's replaces.
COMPONENT_LABEL = "app.kubernetes.io/name"
#: Descriptor section -> the reference component (its COMPONENT_LABEL value) a `kubernetes` block replaces.
REFERENCE_COMPONENTS = {"operator": "agn-operator"}
GRID_GROUP = API_VERSION.split("/", 1)[0]
_KUSTOMIZATIONS = ("kustomization.yaml", "kustomization.yml", "Kustomization")
_MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True)
class VendorComponent:
    """One descriptor component installed from its own image and manifests, and the reference one it replaces."""

    section: str
    replaces: str
    kubernetes: KubeComponent


@dataclass(frozen=True)
class InstallPlan:
    """The descriptor's components installed in place of the reference's (none: the reference's overlay)."""

    components: tuple[VendorComponent, ...] = ()

    @property
    def images(self) -> tuple[str, ...]:
        """The images loaded into each kind cluster besides the project image, in descriptor order."""
        return tuple(dict.fromkeys(c.kubernetes.image for c in self.components))

    @property
    def replaced(self) -> frozenset[str]:
        return frozenset(c.replaces for c in self.components)


def install_plan(impl: Any) -> InstallPlan:
    """The plan a descriptor asks for: each section with a `kubernetes` block (only the operator has one)."""
    components = []
    for section, reference in REFERENCE_COMPONENTS.items():
        kubernetes = getattr(getattr(impl, section, None), "kubernetes", None)
        if isinstance(kubernetes, KubeComponent):
            components.append(VendorComponent(section, reference, kubernetes))
    return InstallPlan(tuple(components))


def kube_outputs(impl: Any) -> KubeOutputs:
    """Where the operator under test writes its overlay ConfigMaps and GridNetwork status (the spec's places
    unless the descriptor's operator.kubernetes.outputs says otherwise)."""
    kubernetes = getattr(getattr(impl, "operator", None), "kubernetes", None)
    return kubernetes.outputs if isinstance(kubernetes, KubeComponent) else KubeOutputs()


def is_kustomization(path: Path) -> bool:
    return path.is_dir() and any((path / name).is_file() for name in _KUSTOMIZATIONS)


def manifest_sources(component: VendorComponent) -> list[tuple[Path, str]]:
    """Each source of the component as (path, how): "kustomize" for a kustomize directory, else "file" for
    every manifest file (a plain directory's files in name order)."""
    found: list[tuple[Path, str]] = []
    for path in component.kubernetes.manifests:
        if is_kustomization(path):
            found.append((path, "kustomize"))
        elif path.is_dir():
            files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in _MANIFEST_SUFFIXES)
            if not files:
                raise BackendUnavailable(f"{component.section}.kubernetes.manifests: {path} holds no kustomization "
                                         f"and no {', '.join(_MANIFEST_SUFFIXES)} files")
            found += [(p, "file") for p in files]
        else:
            found.append((path, "file"))
    return found


def render_component(component: VendorComponent, kustomize: Callable[[Path], str]) -> list[dict[str, Any]]:
    """The component's objects, in order; a grid CRD is left out (the harness applies the spec's).

    Refused (BackendUnavailable naming the descriptor key): text that is not YAML, a document that is not a
    Kubernetes object, and manifests in which no container runs the descriptor's image, which would judge
    some other build than the one named.
    """
    key = f"{component.section}.kubernetes"
    docs: list[dict[str, Any]] = []
    for path, how in manifest_sources(component):
        try:
            text = kustomize(path) if how == "kustomize" else path.read_text(encoding="utf-8")
            loaded = list(yaml.safe_load_all(text))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise BackendUnavailable(f"{key}.manifests: cannot read {path}: {exc}") from None
        for doc in loaded:
            if doc is None:
                continue
            if (not isinstance(doc, dict) or not doc.get("kind") or not doc.get("apiVersion")
                    or not (doc.get("metadata") or {}).get("name")):
                raise BackendUnavailable(f"{key}.manifests: {path} has a document that is not a Kubernetes object "
                                         f"(apiVersion, kind and metadata.name): {str(doc)[:120]}")
            if doc["kind"] == "CustomResourceDefinition" and (doc.get("spec") or {}).get("group") == GRID_GROUP:
                continue
            docs.append(doc)
    images = set(container_images(docs))
    if component.kubernetes.image not in images:
        shown = ", ".join(sorted(images)) or "none"
        raise BackendUnavailable(f"{key}.image: no container of {key}.manifests runs {component.kubernetes.image} "
                                 f"(their images: {shown})")
    return docs


def container_images(docs: Iterable[Mapping[str, Any]]) -> list[str]:
    """The images of every container and init container of the workloads among `docs`."""
    images: list[str] = []
    for doc in docs:
        spec = doc.get("spec") or {}
        pod = ((spec.get("jobTemplate") or {}).get("spec") or spec).get("template", {}).get("spec") or {}
        for container in [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]:
            if isinstance(container, dict) and container.get("image"):
                images.append(str(container["image"]))
    return images


def _component(doc: Mapping[str, Any]) -> str | None:
    return ((doc.get("metadata") or {}).get("labels") or {}).get(COMPONENT_LABEL)


def merge_overlay(reference: str, plan: InstallPlan, vendor: Sequence[Mapping[str, Any]]) -> str:
    """The reference overlay's objects without those of replaced components, then the vendor's, as YAML."""
    kept = [d for d in yaml.safe_load_all(reference) if isinstance(d, dict) and _component(d) not in plan.replaced]
    return kube_yaml.dump_all([*kept, *vendor])


def apply_site(backend: KubeBackend, site: SiteCluster) -> None:
    """Apply the site's overlay (the reference's with the plan's components in place) and rendered objects in
    one `kubectl apply`, so every pod starts on its final ConfigMaps; then give the reference's Deployments
    the run's image where it is not the default (never a vendor's own Deployments)."""
    plan = install_plan(backend.impl)
    overlay = backend.kubectl(site, "kustomize", str(backend.root / "manifests" / "overlays" / "kind"))
    vendor: list[dict[str, Any]] = []
    if plan.components:
        for component in plan.components:
            vendor += render_component(component, lambda path: backend.kubectl(site, "kustomize", str(path)))
        overlay = merge_overlay(overlay, plan, vendor)
    path = backend.render_site(site, overlay)
    backend.kubectl(site, "apply", "-f", str(path))
    if backend.image == DEFAULT_IMAGE:
        return
    if not plan.components:
        backend.kubectl(site, "--namespace", NAMESPACE, "set", "image", "deployment", "--all", f"*={backend.image}")
        return
    theirs = {(d.get("metadata") or {}).get("name") for d in vendor if d.get("kind") == "Deployment"}
    ours = [f"deployment/{d['metadata']['name']}" for d in yaml.safe_load_all(path.read_text())
            if isinstance(d, dict) and d.get("kind") == "Deployment" and d["metadata"]["name"] not in theirs
            and d["metadata"].get("namespace", NAMESPACE) == NAMESPACE]
    if ours:
        backend.kubectl(site, "--namespace", NAMESPACE, "set", "image", *ours, f"*={backend.image}")
