"""A demo folder's own files as the inputs of a demo scenario, and every key the scenario cannot use.

`agn-conformance demo NAME --demo-dir PATH` runs a scenario on the resources and Praxis configs of a
public demo folder instead of the scenario's own. Folders are laid out in many ways (``resources/<site>/``,
flat ``resources/*.yaml`` named after their cluster, ``manifests/<pool>/``, ``example-manifests/``, Forge
files), so every YAML file below the folder is read and each grid resource is placed at a site of the
scenario by its folder, its file name or its own fields. Fake backends replace the demo's model servers
and the run's certificates replace its own, so much of a folder cannot be used; each such key is reported
by file and key with the reason, never silently dropped. The folders are read as they are published: an
older API group, Forge template placeholders (``{{ captures.west.swim-lb-ip }}``) and fields the harness
has no use for.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = ["ALL_INPUTS", "DemoDirError", "DemoInputs", "Unused", "read_demo_dir"]

#: What a scenario can take from a demo folder: the model, the network's name, the providers' names, the
#: sites' geography and the network's scoring and routing policies.
ALL_INPUTS: frozenset[str] = frozenset({"model", "network", "providers", "geography", "policies"})
#: Files no scenario reads as resources: Forge's topology runner files.
_RUNNER = re.compile(r"^(forge|production)([-.].*)?\.ya?ml$")

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
    """A demo folder the scenario cannot run on at all (no such folder, two networks or models it takes one of)."""


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
    scenario: str = "the scenario"
    #: site -> the files whose grid resources were placed there (empty: the scenario's own for that site)
    sites: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: site -> every InferenceProvider name placed there, in file order (`providers` holds the first)
    all_providers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def providers_of(self, site: str) -> tuple[str, ...]:
        return tuple(self.all_providers.get(site, ()))

    def taken(self) -> dict[str, Any]:
        """The values the scenario runs with instead of its own (what it keeps of its own is left out)."""
        values: dict[str, Any] = {"network": self.network, "model": self.model, "scoringPolicy": self.scoring,
                                  "routingPolicy": self.routing, "providers": dict(self.all_providers),
                                  "geography": {site: {"region": region, "zone": zone}
                                                for site, (region, zone) in self.geography.items()}}
        return {key: value for key, value in values.items() if value}

    def as_record(self) -> dict[str, Any]:
        return {"source": self.source, "scenario": self.scenario, "taken": self.taken(),
                "sites": {site: list(files) or "none in the folder: the scenario's own resources"
                          for site, files in self.sites.items()},
                "used": list(self.used), "unused": [u.as_record() for u in self.unused]}


def read_demo_dir(path: Path, sites: Sequence[str], *, takes: frozenset[str] = ALL_INPUTS,
                  scenario: str = "the scenario", aliases: Mapping[str, str] | None = None) -> DemoInputs:
    """Read a demo folder for a scenario whose sites are `sites`, taking only `takes` (of ALL_INPUTS) from
    it; `aliases` gives the demo's own name of a scenario site (pool-a for west, say). DemoDirError only when
    `path` is not a folder: whatever a folder holds, the scenario runs on what it can take and reports the rest
    (files that do not parse, a folder of two minds about a value it takes one of)."""
    root = Path(path)
    if not root.is_dir():
        raise DemoDirError(f"--demo-dir {path}: not a directory")
    unknown = set(takes) - ALL_INPUTS
    if unknown:
        raise ValueError(f"unknown demo inputs {sorted(unknown)}; known: {sorted(ALL_INPUTS)}")
    reader = _Reader(root, tuple(sites), frozenset(takes), scenario, dict(aliases or {}))
    files = [p for p in root.rglob("*") if p.is_file() and not _hidden(p, root)]
    for file in sorted(files, key=lambda p: (p.parent.as_posix(), p.stem, p.suffix)):  # a name before its variants
        name = file.relative_to(root).as_posix()
        if _RUNNER.match(file.name):
            reader.read_forge(file)
        elif file.suffix in (".yaml", ".yml"):
            reader.read_file(file)
        elif file.suffix == ".json":
            reader.whole(file, "a fixture of the demo's own scripts; the harness sends requests of its own")
        elif name.startswith(("resources/", "configs/", "manifests/")):
            reader.whole(file, "not a YAML resource or Praxis config")
    return reader.inputs(str(root))


def _hidden(file: Path, root: Path) -> bool:
    return any(part.startswith(".") for part in file.relative_to(root).parts)


def _site_of(file: Path, root: Path, doc: Mapping[str, Any], names: Mapping[str, str]) -> str | None:
    """The scenario site a grid resource belongs to (`names`: each name a site goes by -> the site): a
    folder named after a site, else the longest site name in its file name, else the site its own fields
    name (spec.site, or a GridSite's name)."""
    for part in reversed(file.relative_to(root).parts[:-1]):
        if part in names:
            return names[part]
    found = _named_in(file.stem, names)
    if found is not None:
        return found
    spec = doc.get("spec") or {}
    if isinstance(spec, dict) and str(spec.get("site", "")) in names:
        return names[str(spec["site"])]
    name = str((doc.get("metadata") or {}).get("name", ""))
    if doc.get("kind") == "GridSite" and name in names:
        return names[name]
    return None


def _named_in(text: str, names: Mapping[str, str]) -> str | None:
    """The site whose longest name appears in `text` as a whole dash-separated part, if any."""
    hits = [name for name in names if text == name or re.search(rf"(^|[-_.]){re.escape(name)}($|[-_.])", text)]
    return names[max(hits, key=len)] if hits else None


#: Helm values of a Forge stack that describe grid resources, by the kind each describes.
_HELM_GRID_VALUES: Mapping[str, str] = {"gridNetwork": "GridNetwork", "gridSite": "GridSite",
                                        "inferenceProviders": "InferenceProvider"}


def _helm_resource(kind: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """A grid resource made of a chart's values (name at the top, the rest its spec), read like a manifest."""
    spec = {key: value for key, value in values.items() if key != "name"}
    return {"apiVersion": "helm-values", "kind": kind, "metadata": {"name": values.get("name", "?")}, "spec": spec}


def _helm_key(key: str) -> str:
    """A key of a resource made by `_helm_resource`, as the key of the chart's values it came from."""
    if key.startswith("spec."):
        return key[len("spec."):]
    return {"metadata.name": "name", "metadata": "name"}.get(key, key)


class _Reader:
    def __init__(self, root: Path, sites: tuple[str, ...], takes: frozenset[str], scenario: str,
                 aliases: Mapping[str, str]) -> None:
        self.root = root
        self.sites = sites
        self.names = {**{site: site for site in sites}, **{alias: site for site, alias in aliases.items()}}
        self.takes = takes
        self.scenario = scenario
        self.placed: dict[str, list[str]] = {site: [] for site in sites}
        self.all_providers: dict[str, list[str]] = {}
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
        """The file's YAML documents; one that does not parse (a Helm template, say) is reported and skipped:
        a folder is read for what it gives, and a file of it the scenario cannot read is one more unused key."""
        try:
            text = _PLACEHOLDER.sub(PLACEHOLDER_TEXT, file.read_text(encoding="utf-8"))
            return [doc for doc in yaml.safe_load_all(text) if doc is not None]
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            self.unused.append(Unused(self._name(file), "*", f"not YAML once Forge placeholders are read ({first}); "
                                                               "nothing of it can be used"))
            return []

    def whole(self, file: Path, reason: str) -> None:
        self.unused.append(Unused(self._name(file), "*", reason))

    def read_file(self, file: Path) -> None:
        """One YAML file: Praxis configs, grid resources placed at a site, or other Kubernetes objects."""
        docs = self._documents(file)
        if any(isinstance(doc, dict) and ("filter_chains" in doc or "listeners" in doc) for doc in docs):
            self.read_config(file)
            return
        for doc in docs:
            if not isinstance(doc, dict) or "kind" not in doc:
                self.unused.append(Unused(self._name(file), "*", "not a Kubernetes resource or a Praxis config"))
                continue
            if doc.get("kind") not in _GRID_KINDS:
                self._other(file, doc)
                continue
            self.read_site_doc(self._name(file), doc, _site_of(file, self.root, doc, self.names))

    def read_forge(self, file: Path) -> None:
        """A Forge file: the grid resources its stacks install through chart values are read like manifests
        (placed at the site a stack's name names); the rest is the demo's topology runner."""
        name = self._name(file)
        docs = self._documents(file)
        runner = "the demo's topology runner; the scenario's topology is its own (clusters/*.yaml)"
        stacks = ((docs[0] if docs and isinstance(docs[0], dict) else {}).get("spec") or {}).get("stacks") or {}
        found = False
        for stack, body in stacks.items() if isinstance(stacks, dict) else ():
            for i, step in enumerate((body or {}).get("steps") or [] if isinstance(body, dict) else []):
                values = step.get("values") if isinstance(step, dict) else None
                if not isinstance(values, dict):
                    continue
                for key, kind in _HELM_GRID_VALUES.items():
                    items = values.get(key)
                    entries = list(enumerate(items)) if isinstance(items, list) else [(None, items)]
                    for index, item in entries:
                        if not isinstance(item, dict):
                            continue
                        found = True
                        where = f"spec.stacks.{stack}.steps.{i}.values.{key}" + ("" if index is None else f".{index}")
                        label = f"{name}: {where}"
                        self.read_site_doc(label, _helm_resource(kind, item), _named_in(str(stack), self.names),
                                           helm=True)
        self.unused.append(Unused(name, "*", runner + ("; the grid resources of its chart values are listed "
                                                       "on their own" if found else "")))

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

    def _other(self, file: Path, doc: Mapping[str, Any]) -> None:
        kind = doc.get("kind", "?")
        name = (doc.get("metadata") or {}).get("name", "?")
        reason = ("Kubernetes network isolation, outside AGN routing" if kind == "NetworkPolicy" else
                  f"a {kind} of the demo's own deployment; the harness deploys the scenario's parts itself")
        self.unused.append(Unused(self._name(file), f"{kind}/{name}", reason))

    def read_site_doc(self, name: str, doc: dict[str, Any], site: str | None, *, helm: bool = False) -> None:
        """One grid resource placed at `site`; `name` is its file (and, for chart values, where in it). A
        resource placed at no site (a flat file naming none, a template with a placeholder for its site) still
        gives what belongs to no one site (the network's name and policies, the model); its provider names and
        geography are reported as placed nowhere."""
        unplaced = None
        if site is None:
            unplaced = f"placed at no site of {self.scenario} (its sites: {', '.join(self.sites)})"
        elif name not in self.placed[site]:
            self.placed[site].append(name)
        taken = _Taken(self.takes, self.scenario, unplaced=unplaced)
        self._use(doc, site, name, taken)
        unused = _unused_keys(doc, taken.used, taken.declined)
        if helm:
            taken.used = [_helm_key(key) for key in taken.used if key not in ("apiVersion", "kind")]
            unused = [(_helm_key(key), reason) for key, reason in unused if key not in ("apiVersion", "kind")]
        self.used += [f"{name}: {key}" for key in taken.used]
        self.unused += [Unused(name, key, reason) for key, reason in unused]

    def _use(self, doc: dict[str, Any], site: str | None, file: str, taken: _Taken) -> None:
        """Take what the scenario uses from one grid resource into `taken`."""
        kind, spec = doc["kind"], doc.get("spec") or {}
        name = str((doc.get("metadata") or {}).get("name", ""))
        taken.used += ["apiVersion", "kind"]
        if kind == "GridNetwork":
            if taken("network", "metadata.name"):
                self.networks.setdefault(name, set()).add(file)
            for key, into in (("scoringPolicy", self.scoring), ("routingPolicy", self.routing)):
                if key in spec:
                    if taken("policies", f"spec.{key}"):
                        into.add(str(spec[key] if not isinstance(spec[key], dict) else spec[key].get("strategy")))
                elif "policies" in self.takes:
                    into.add("")  # omitted: the operator's default, as the scenario's own network has it
                    self.used.append(f"{file}: spec.{key} (omitted: the default)")
        elif kind == "InferenceProvider":
            if taken("providers", "metadata.name") and site is not None:
                self.providers.setdefault(site, name)
                self.all_providers.setdefault(site, []).append(name)
            if "gridNetworkRef" in spec and taken("network", "spec.gridNetworkRef"):
                self.networks.setdefault(str(spec["gridNetworkRef"]), set()).add(file)
            for i, model in enumerate(spec.get("models") or []):
                if isinstance(model, dict) and "name" in model and taken("model", f"spec.models.{i}.name"):
                    self.models.add(str(model["name"]))
            access = (spec.get("accessPolicy") or {}).get("siteSelector") or {}
            if access == {"matchLabels": {}} or access == {}:
                taken.used.append("spec.accessPolicy")  # every site may use it, as the scenario's providers allow
        elif kind == "GridSite":
            region, zone = spec.get("region"), spec.get("zone")
            at = name if name in self.sites else site
            if region is not None and zone is not None and taken("geography", "spec.region", "spec.zone") \
                    and at is not None:
                self.geography.setdefault(at, (str(region), str(zone)))
            if taken.unplaced:
                taken.declined["metadata.name"] = taken.unplaced
            else:
                taken.used.append("metadata.name")
            if "gridNetworkRef" in spec and taken("network", "spec.gridNetworkRef"):
                self.networks.setdefault(str(spec["gridNetworkRef"]), set()).add(file)

    def inputs(self, source: str) -> DemoInputs:
        """What the scenario takes. Where the folder is of two minds (two networks, two models, two policies
        where the scenario takes one), it takes none of them and keeps its own, saying so."""
        conflicts: list[Unused] = []
        network = self._one("GridNetwork name", {net: sorted(files) for net, files in self.networks.items()},
                            conflicts)
        model = self._one("model", {m: [] for m in self.models}, conflicts)
        scoring = self._one("scoringPolicy", {v or "omitted": [] for v in self.scoring}, conflicts)
        routing = self._one("routingPolicy", {v or "omitted": [] for v in self.routing}, conflicts)
        return DemoInputs(
            source=source, network=network, model=model,
            providers=dict(self.providers), geography=dict(self.geography),
            scoring=None if scoring in (None, "omitted") else scoring,
            routing=None if routing in (None, "omitted") else routing,
            used=tuple(self.used), unused=(*conflicts, *self.unused), scenario=self.scenario,
            sites={site: tuple(files) for site, files in self.placed.items()},
            all_providers={site: tuple(names) for site, names in self.all_providers.items()})

    def _one(self, what: str, values: Mapping[str, list[str]], conflicts: list[Unused]) -> str | None:
        """The folder's one value of `what`, or None; several are reported and none is taken."""
        if len(values) <= 1:
            return next(iter(values), None)
        shown = "; ".join(f"{value} in {', '.join(files)}" if files else value
                          for value, files in sorted(values.items()))
        conflicts.append(Unused(".", what, f"the folder gives several ({shown}); {self.scenario} takes one, so it "
                                           "keeps its own"))
        return None


class _Taken:
    """The keys of one resource a scenario takes, and why it declines the ones it could take but does not."""

    _LABELS: Mapping[str, str] = {"model": "model", "network": "network name", "providers": "provider names",
                                  "geography": "site geography", "policies": "scoring and routing policies"}

    #: what a resource gives only where it is placed at a site
    _SITE_BOUND: frozenset[str] = frozenset({"providers", "geography"})

    def __init__(self, takes: frozenset[str], scenario: str, *, unplaced: str | None = None) -> None:
        """`unplaced`: why the resource is at no site, when it is not (its site-bound keys are left with it)."""
        self.takes = takes
        self.scenario = scenario
        self.unplaced = unplaced
        self.used: list[str] = []
        self.declined: dict[str, str] = {}

    def __call__(self, category: str, *keys: str) -> bool:
        """Take `keys` when the scenario takes `category`; otherwise record why they are left."""
        if category not in self.takes:
            reason = f"{self.scenario} sets its own {self._LABELS[category]}: its claims rest on them"
        elif self.unplaced and category in self._SITE_BOUND:
            reason = self.unplaced
        else:
            self.used += keys
            return True
        for key in keys:
            self.declined[key] = reason
        return False


def _unused_keys(doc: Mapping[str, Any], used: Iterable[str],
                 declined: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """The smallest subtrees of `doc` that hold no used key, with the reason each is not used; a key the
    scenario declines (`declined`: key -> why) is listed on its own with that reason."""
    declined = declined or {}
    wanted = set(used) | set(declined)
    found: list[tuple[str, str]] = []

    def walk(value: Any, path: str) -> None:
        if path in declined:
            found.append((path, declined[path]))
            return
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
