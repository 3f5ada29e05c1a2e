"""A demo folder's own files as the inputs of a demo scenario, and every key the scenario cannot use.

`agn-conformance demo NAME --demo-dir PATH` runs a scenario on the resources and Praxis configs of a
public demo folder (``resources/<site>/*.yaml``, ``configs/<role>/praxis.yaml``, ``forge.yaml``) instead of
the scenario's own. Fake backends replace the demo's model servers and the run's certificates replace its
own, so much of a folder cannot be used; each such key is reported by file and key with the reason, never
silently dropped. The folders are read as they are published: an older API group, Forge template
placeholders (``{{ captures.west.swim-lb-ip }}``) and fields the harness has no use for.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = ["DemoDirError", "DemoInputs", "Unused", "read_demo_dir"]

#: Forge's template placeholders, which are not YAML; they are read as this text.
_PLACEHOLDER = re.compile(r"\{\{[^{}]*\}\}")
PLACEHOLDER_TEXT = "forge-placeholder"
_GRID_KINDS = ("GridNetwork", "InferenceProvider", "GridSite")
#: Why a key the scenario does not use is not used, by the key's dotted path (a trailing ".*" matches a subtree).
_REASONS: Mapping[str, str] = {
    "metadata.labels": "labels select nothing in the scenario: its sites and resources are its own",
    "metadata.annotations": "annotations are the harness's own",
    "spec.gridId": "the grid id is not part of routing the scenario judges",
    "spec.seeds": "the harness joins the sites' operators into one mesh itself",
    "spec.swim": "the harness gives every operator its own SWIM timing (harness/mesh_oracle.py)",
    "spec.tls": "the run's own certificates replace the demo's",
    "spec.region": "a site's geography comes from its GridSite",
    "spec.zone": "a site's geography comes from its GridSite",
    "spec.endpoint": "a fake backend replaces the demo's model server",
    "spec.providerKind": "the kind of model server is not part of routing",
    "spec.backendKind": "the kind of model server is not part of routing",
    "spec.healthCheck": "fake backends answer health checks of their own",
    "spec.siteSelector": "the provider is placed at the site whose folder holds it",
    "spec.models.*.capabilities": "capabilities are not part of routing the scenario judges",
    "spec.models.*.contextWindow": "context windows are not part of routing the scenario judges",
}


_RENDERED = "the harness renders this part of each gateway's config itself"
_CONFIG_REASONS: Mapping[str, str] = {
    "listeners": "the harness's gateways listen on addresses of the run, with the run's certificates",
    "admin": "the harness's gateways have admin listeners of the run",
    "shutdown_timeout_secs": "the harness stops its gateways itself",
}
_FILTER_REASONS: Mapping[str, str] = {
    "intelligent_route": "rendered by the harness for the run's overlay file, expected scope, hop clusters and "
                         "session affinity (header x-session-id)",
    "load_balancer": "clusters of the run's addresses: fake backends and the sites' provider gateways over mTLS",
    "provider_route": "rendered by the harness with a route per candidate id of the consumers' overlays",
    "credential_inject": "the run's own credentials, one random provider token per provider gateway",
    "peer_identity_trust": "the harness's provider gateways trust the grid organization of the run's CA (ai-grid)",
    "json_body_field": "the harness's gateways read the model from the body themselves",
    "headers": "attribution headers of the demo; the harness reads the serving backend from the fake's answer",
}


class DemoDirError(ValueError):
    """A demo folder the scenario cannot run on at all (no such folder, unreadable YAML, sites it lacks)."""


@dataclass(frozen=True)
class Unused:
    """One key of a demo file the scenario does not use, and why."""

    file: str
    key: str
    reason: str

    def as_record(self) -> dict[str, str]:
        return {"file": self.file, "key": self.key, "reason": self.reason}


@dataclass(frozen=True)
class DemoInputs:
    """What a demo scenario takes from a demo folder (None: the scenario's own value)."""

    source: str
    network: str | None = None
    model: str | None = None
    providers: Mapping[str, str] = field(default_factory=dict)  # site -> InferenceProvider name
    geography: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # site -> (region, zone)
    scoring: str | None = None
    routing: str | None = None
    used: tuple[str, ...] = ()  # "file: key" of every key the scenario uses
    unused: tuple[Unused, ...] = ()

    def as_record(self) -> dict[str, Any]:
        return {"source": self.source, "used": list(self.used), "unused": [u.as_record() for u in self.unused]}


def read_demo_dir(path: Path, sites: Sequence[str]) -> DemoInputs:
    """Read a demo folder for a scenario whose sites are `sites`; DemoDirError when it cannot run on it."""
    root = Path(path)
    if not root.is_dir():
        raise DemoDirError(f"--demo-dir {path}: not a directory")
    reader = _Reader(root)
    resources = root / "resources"
    folders = sorted(p.name for p in resources.iterdir() if p.is_dir()) if resources.is_dir() else []
    site_folders = [name for name in folders if name in sites]
    missing = [site for site in sites if site not in folders]
    if missing:
        raise DemoDirError(f"--demo-dir {path}: resources/ has no folder for site(s) {', '.join(missing)} of the "
                           f"scenario (it has {', '.join(folders) or 'none'})")
    for name in folders:
        if name not in site_folders:
            for file in sorted((resources / name).glob("*.y*ml")):
                reader.read_other(file)
    for site in site_folders:
        for file in sorted((resources / site).glob("*.y*ml")):
            reader.read_site_file(file, site)
    for file in sorted(root.glob("configs/**/*.y*ml")):
        reader.read_config(file)
    for name in ("forge.yaml", "forge.yml"):
        if (root / name).is_file():
            reader.whole(root / name, "the demo's topology runner; the scenario's topology is its own "
                                      "(clusters/*.yaml)")
    return reader.inputs(str(root), sites)


class _Reader:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.used: list[str] = []
        self.unused: list[Unused] = []
        self.networks: dict[str, set[str]] = {}  # network name -> files naming it
        self.models: set[str] = set()
        self.providers: dict[str, str] = {}
        self.geography: dict[str, tuple[str, str]] = {}
        self.scoring: set[str] = set()
        self.routing: set[str] = set()

    def _name(self, file: Path) -> str:
        return str(file.relative_to(self.root))

    def _documents(self, file: Path) -> list[Any]:
        text = _PLACEHOLDER.sub(PLACEHOLDER_TEXT, file.read_text(encoding="utf-8"))
        try:
            return [doc for doc in yaml.safe_load_all(text) if doc is not None]
        except yaml.YAMLError as exc:
            raise DemoDirError(f"{self._name(file)}: not YAML: {exc}") from None

    def whole(self, file: Path, reason: str) -> None:
        self.unused.append(Unused(self._name(file), "*", reason))

    def read_config(self, file: Path) -> None:
        """A Praxis config: the harness renders each gateway's config itself, so every listener, filter and
        cluster is reported, each with what stands in for it."""
        for doc in self._documents(file):
            if not isinstance(doc, dict):
                continue
            for key in doc:
                if key != "filter_chains":
                    self.unused.append(Unused(self._name(file), str(key), _CONFIG_REASONS.get(str(key), _RENDERED)))
            for chain in doc.get("filter_chains") or []:
                if not isinstance(chain, dict):
                    continue
                for i, entry in enumerate(chain.get("filters") or []):
                    name = entry.get("filter", "?") if isinstance(entry, dict) else "?"
                    self.unused.append(Unused(self._name(file), f"filter_chains.{chain.get('name', '?')}.filters.{i} "
                                              f"({name})", _FILTER_REASONS.get(str(name), _RENDERED)))

    def read_other(self, file: Path) -> None:
        for doc in self._documents(file):
            kind = doc.get("kind", "?") if isinstance(doc, dict) else "?"
            name = (doc.get("metadata") or {}).get("name", "?") if isinstance(doc, dict) else "?"
            reason = ("Kubernetes network isolation, outside AGN routing" if kind == "NetworkPolicy" else
                      f"a {kind} of the demo's own deployment; the harness deploys the scenario's parts itself")
            self.unused.append(Unused(self._name(file), f"{kind}/{name}", reason))

    def read_site_file(self, file: Path, site: str) -> None:
        for doc in self._documents(file):
            if not isinstance(doc, dict) or doc.get("kind") not in _GRID_KINDS:
                kind = doc.get("kind", "?") if isinstance(doc, dict) else "?"
                self.unused.append(Unused(self._name(file), f"{kind}/*", "not a grid resource the scenario reads"))
                continue
            used = self._use(doc, site, self._name(file))
            self.used += [f"{self._name(file)}: {key}" for key in used]
            self.unused += [Unused(self._name(file), key, reason) for key, reason in _unused_keys(doc, used)]

    def _use(self, doc: dict[str, Any], site: str, file: str) -> list[str]:
        """Take what the scenario uses from one grid resource; returns the dotted keys it used."""
        kind, spec = doc["kind"], doc.get("spec") or {}
        name = str((doc.get("metadata") or {}).get("name", ""))
        used = ["apiVersion", "kind"]
        if kind == "GridNetwork":
            self.networks.setdefault(name, set()).add(file)
            used.append("metadata.name")
            for key, into in (("scoringPolicy", self.scoring), ("routingPolicy", self.routing)):
                if key in spec:
                    into.add(str(spec[key] if not isinstance(spec[key], dict) else spec[key].get("strategy")))
                    used.append(f"spec.{key}")
                else:
                    into.add("")  # omitted: the operator's default, as the scenario's own network has it
                    self.used.append(f"{file}: spec.{key} (omitted: the default)")
        elif kind == "InferenceProvider":
            self.providers[site] = name
            used.append("metadata.name")
            if "gridNetworkRef" in spec:
                self.networks.setdefault(str(spec["gridNetworkRef"]), set()).add(file)
                used.append("spec.gridNetworkRef")
            for i, model in enumerate(spec.get("models") or []):
                if isinstance(model, dict) and "name" in model:
                    self.models.add(str(model["name"]))
                    used.append(f"spec.models.{i}.name")
            access = (spec.get("accessPolicy") or {}).get("siteSelector") or {}
            if access == {"matchLabels": {}} or access == {}:
                used.append("spec.accessPolicy")  # every site may use it, as the scenario's providers allow
        elif kind == "GridSite":
            region, zone = spec.get("region"), spec.get("zone")
            if region is not None and zone is not None:
                self.geography[name] = (str(region), str(zone))
                used += ["spec.region", "spec.zone"]
            used.append("metadata.name")
            if "gridNetworkRef" in spec:
                self.networks.setdefault(str(spec["gridNetworkRef"]), set()).add(file)
                used.append("spec.gridNetworkRef")
        return used

    def inputs(self, source: str, sites: Sequence[str]) -> DemoInputs:
        if len(self.networks) > 1:
            named = "; ".join(f"{net} in {', '.join(sorted(files))}" for net, files in sorted(self.networks.items()))
            raise DemoDirError(f"{source}: the sites' resources name more than one GridNetwork ({named})")
        if len(self.models) > 1:
            raise DemoDirError(f"{source}: the providers serve more than one model ({', '.join(sorted(self.models))})"
                               "; the scenario routes one")
        lacking = [site for site in sites if site not in self.providers]
        if lacking:
            raise DemoDirError(f"{source}: no InferenceProvider for site(s) {', '.join(lacking)}")
        for label, values in (("scoringPolicy", self.scoring), ("routingPolicy", self.routing)):
            if len(values) > 1:
                shown = ", ".join(sorted(v or "omitted" for v in values))
                raise DemoDirError(f"{source}: the sites' GridNetworks disagree on {label} ({shown})")
        return DemoInputs(
            source=source, network=next(iter(self.networks), None), model=next(iter(self.models), None),
            providers=dict(self.providers), geography=dict(self.geography),
            scoring=next(iter(self.scoring), None) or None, routing=next(iter(self.routing), None) or None,
            used=tuple(self.used), unused=tuple(self.unused))


def _unused_keys(doc: Mapping[str, Any], used: Iterable[str]) -> list[tuple[str, str]]:
    """The smallest subtrees of `doc` that hold no used key, with the reason each is not used."""
    wanted = set(used)
    found: list[tuple[str, str]] = []

    def walk(value: Any, path: str) -> None:
        if path in wanted:
            return
        below = [u for u in wanted if u.startswith(path + ".")] if path else list(wanted)
        explained = [k for k in _REASONS if k.startswith(path + ".")] if path else list(_REASONS)
        if not below and not (explained and isinstance(value, dict)):
            found.append((path, _reason(path)))
            return
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for key, child in items:
            walk(child, f"{path}.{key}" if path else str(key))

    walk(doc, "")
    return found


def _reason(path: str) -> str:
    generic = re.sub(r"\.\d+(?=\.|$)", ".*", path)
    for key in (path, generic):
        if key in _REASONS:
            return _REASONS[key]
    parent = path.rsplit(".", 1)[0]
    if parent != path:
        return _reason(parent) if parent in _REASONS or re.sub(r"\.\d+(?=\.|$)", ".*", parent) in _REASONS \
            else "not used by this scenario"
    return "not used by this scenario"
