"""Implementation descriptors: how a vendor plugs their gateway into the harness.

A descriptor is a small YAML file (``agn-conformance run --impl my-gateway.yaml``) naming the
implementation for the conformance report, the command that starts the gateway on a rendered Praxis
config, and the extended features the implementation claims. ``reference`` names the descriptor of the
reference gateway that ships with the harness. Loading is strict: a descriptor that would be silently
misread (unknown key, wrong type, a command that never receives its config) is rejected with the key path
of the problem, so a vendor finds the mistake before a run rather than in a confusing test failure.
"""

from __future__ import annotations

import difflib
import string
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import yaml

from harness.features import (
    DYNAMIC_WEIGHTS_FEATURE,
    EXTENDED_FEATURES,
    FEATURE_DESCRIPTIONS,
    OVERLAY_SYNC_FEATURE,
    OVERLAY_SYNC_METRICS_FEATURE,
    PROFILES,
    REQUIRES,
    SIGNALS_RELAY_FEATURE,
)
from harness.run_as import RunAs, parse_run_as
from harness.site_inputs import PROVIDER_SITE_MODES
from harness.spelling import METRICS_ENDPOINT_KEYS

if TYPE_CHECKING:
    from harness.impl_kube import KubeComponent

__all__ = [
    "EXTENDED_FEATURES",
    "FEATURE_DESCRIPTIONS",
    "PLACEHOLDERS",
    "REFERENCE",
    "GatewayCommand",
    "GatewayLauncher",
    "LAUNCHER_PLACEHOLDERS",
    "RunAs",
    "OperatorCommand",
    "OVERLAY_SYNC_FEATURE",
    "OVERLAY_SYNC_METRICS_FEATURE",
    "OVERLAY_SYNC_PLACEHOLDERS",
    "OverlaySyncCommand",
    "DescriptorBreakage",
    "ImplDescriptor",
    "ImplError",
    "descriptor_text",
    "Implementation",
    "load_impl",
    "parse_impl",
    "parse_overlay_sync",
    "reference_document",
]

REFERENCE = "reference"

#: Placeholders allowed in gateway command and environment templates; ``{launcher}`` is the socket of the
#: descriptor's ``gateway.launcher``, and only allowed with one.
PLACEHOLDERS: frozenset[str] = frozenset({"python", "config", "workdir", "launcher"})
#: Placeholders allowed in ``gateway.launcher`` templates: the Unix socket path it is to listen on.
LAUNCHER_PLACEHOLDERS: frozenset[str] = frozenset({"python", "socket"})
#: Placeholders allowed in operator templates: the resource directory it watches, the directory it writes
#: ConfigMaps and status into, and the PEM CA bundle that signs TLS metrics endpoints.
OPERATOR_PLACEHOLDERS: frozenset[str] = frozenset({"python", "manifests", "out", "workdir", "metrics_ca"})
#: Extra placeholders of ``operator.mesh_args`` (the mesh profile): this site's name, the UDP address its
#: membership binds, the address peers reach that membership at (the bind address unless a NAT such as a
#: cluster NodePort sits in between), the seed addresses (comma-separated, may be empty), its provider
#: gateway's address, the cluster name peers route to it by, a client certificate and key for fetching
#: peer certificates, and the SWIM timing the suites' bounds are computed from.
#: Placeholders allowed in overlay-sync templates: the YAML file holding the ConfigMap object it follows (its
#: directory is watched), the ConfigMap's data key holding the envelope, the directory to deliver into and
#: the file name there, the scope envelopes must carry (all four keys as one ``network=..,gateway=..,
#: namespace=..,local_site=..`` string, or each on its own) and the HOST:PORT to serve its probes on.
OVERLAY_SYNC_PLACEHOLDERS: frozenset[str] = frozenset({
    "python", "workdir", "configmap", "key", "target", "file", "scope", "network", "gateway", "namespace",
    "local_site", "admin",
})
MESH_PLACEHOLDERS: frozenset[str] = frozenset({
    "site", "mesh_bind", "mesh_advertise", "mesh_seeds", "gateway_address", "routing_cluster", "client_cert",
    "client_key", "probe_interval", "probe_timeout", "suspicion_mult",
})
#: Extra placeholders of ``operator.signals_args`` (signalsRelay): the HOST:PORT to serve GET /v1/site/signals
#: on, its certificate and key, the CA that signs the client certificates it accepts, and the site's name.
SIGNALS_PLACEHOLDERS: frozenset[str] = frozenset({
    "signals_address", "signals_cert", "signals_key", "signals_client_ca", "signals_site",
})

DEFAULT_STARTUP_TIMEOUT_S = 20.0

_TOP_KEYS = {"implementation": True, "gateway": True, "operator": False, "overlay_sync": False, "features": False,
             "breakages": False}
_IMPLEMENTATION_KEYS = {"organization": True, "project": True, "version": True, "contact": True,
                        "version_command": False}
_GATEWAY_KEYS = {"command": True, "env": False, "startup_timeout_s": False, "run_as": False, "launcher": False}
_LAUNCHER_KEYS = {"command": True, "env": False}
_OPERATOR_KEYS = {"command": False, "env": False, "mesh_args": False, "mesh_env": False, "dynamic_weights": False,
                  "kubernetes": False, "signals_args": False, "metrics_endpoint_key": False, "provider_site": False}
#: A descriptor breakage: its name, what it breaks, the profile whose suite must notice, the tests that must
#: fail (default: any test of that profile) and the component sections that replace the descriptor's.
_BREAKAGE_KEYS = {"name": True, "summary": False, "profile": True, "must_fail": False, "gateway": False,
                  "operator": False, "overlay_sync": False}
_BREAKAGE_SECTIONS = ("gateway", "operator", "overlay_sync")
_OVERLAY_SYNC_KEYS = {"command": True, "env": False, "startup_timeout_s": False, "ready_path": True, "live_path": True,
                      "metrics_path": False}


class ImplError(ValueError):
    """A descriptor that cannot be used; the message starts with the offending key path."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}" if key else problem)
        self.key = key
        self.problem = problem


@dataclass(frozen=True)
class Implementation:
    """Who made the implementation under test, as shown in the conformance report."""

    organization: str
    project: str
    version: str
    contact: tuple[str, ...] = ()
    #: a command whose output is the implementation's version as its own binary reports it (``{python}`` is
    #: this interpreter); recorded in the report beside the version the descriptor states
    version_command: tuple[str, ...] = ()


def _fill(argv: Sequence[str], env: Mapping[str, str], values: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """A command's argv and environment templates with their placeholders replaced by `values`."""
    return ([template.format_map(values) for template in argv],
            {name: template.format_map(values) for name, template in env.items()})


@dataclass(frozen=True)
class GatewayLauncher:
    """A helper the local backend starts before the first gateway of a site and stops with the run.

    Gateway commands reach it through ``{launcher}``, the Unix socket path it is told (``{socket}``) to
    listen on; the local backend waits for that socket to appear before it starts the first gateway.
    The reference uses it for warm starts (reference/warm_start.py): gateways forked from an interpreter
    that has imported them once. Each site of a run in network namespaces gets one inside its namespace.
    """

    argv_template: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def render(self, socket: Path) -> tuple[list[str], dict[str, str]]:
        return _fill(self.argv_template, self.env, {"python": sys.executable, "socket": str(socket)})


@dataclass(frozen=True)
class GatewayCommand:
    """How to start the gateway: an argv template and extra environment, both with placeholders.

    ``run_as`` is the user the local backend starts the gateway as when the harness is root (a real
    gateway refuses to run as root); None runs it as the harness's own user.
    """

    argv_template: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S
    run_as: RunAs | None = None
    launcher: GatewayLauncher | None = None

    def render(self, config: Path, workdir: Path, launcher: Path | None = None) -> tuple[list[str], dict[str, str]]:
        """Return the argv and the extra environment variables for one gateway.

        The environment holds only the descriptor's own variables; the caller lays them over the
        environment it starts processes with. `launcher` is the socket of the running launcher.
        """
        if self.launcher is not None and launcher is None:
            raise ValueError("gateway.launcher: the gateway command needs the launcher's socket")
        return _fill(self.argv_template, self.env, {"python": sys.executable, "config": str(config),
                                                    "workdir": str(workdir), "launcher": str(launcher or "")})


@dataclass(frozen=True)
class OperatorCommand:
    """How to start the operator under test on the local backend (the producer profile).

    The operator reads grid resources as YAML files from ``{manifests}`` and writes, for every gateway
    reference, ``<configmap-name>.configmap.yaml`` (the ConfigMap object) into ``{out}``, plus
    ``<network>.status.yaml`` (the GridNetwork with its status), rewritten on every reconcile.
    """

    argv_template: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    mesh_args: tuple[str, ...] | None = None  # appended in the mesh profile
    #: set in the mesh profile (templates); with neither this nor mesh_args the mesh is unsupported
    mesh_env: Mapping[str, str] | None = None
    #: the GridNetwork spec that turns on the experimental dynamic weights (dynamicWeights), merged into a test's
    dynamic_weights: Mapping[str, Any] | None = None
    #: image and manifests the cluster backends install it from (harness.impl_kube); None: the reference's.
    #: An operator with only this block has an empty argv_template: the local backend cannot start it.
    kubernetes: KubeComponent | None = None
    #: appended to serve the signals endpoint (signalsRelay); None: the operator serves none
    signals_args: tuple[str, ...] | None = None
    #: the spelling of a provider's metrics URL inside metricsConfig this operator reads (harness.spelling)
    metrics_endpoint_key: str = "endpoint"
    #: how the operator learns a provider's hosting site (harness.site_inputs): GridSites matched by
    #: spec.siteSelector (the public operator's way, the default) or a plain spec.site
    provider_site: str = "siteSelector"

    def render(self, manifests: Path, out: Path, workdir: Path, metrics_ca: Path,
               mesh: Mapping[str, str] | None = None,
               signals: Mapping[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
        """The argv and environment; `mesh` (the MESH_PLACEHOLDERS values) appends the mesh arguments and
        `signals` (the SIGNALS_PLACEHOLDERS values) the signals endpoint's."""
        values = {"python": sys.executable, "manifests": str(manifests), "out": str(out),
                  "workdir": str(workdir), "metrics_ca": str(metrics_ca)}
        templates = self.argv_template
        env = dict(self.env)
        if mesh is not None:
            if not self.joins_mesh:
                raise ValueError("operator.mesh_args and operator.mesh_env: neither given, so this operator cannot "
                                 "join a mesh")
            values.update(mesh)
            templates += self.mesh_args or ()
            env.update(self.mesh_env or {})
        if signals is not None:
            if self.signals_args is None:
                raise ValueError("operator.signals_args: not given, so this operator serves no signals endpoint")
            values.update(signals)
            templates += self.signals_args
        return _fill(templates, env, values)

    @property
    def joins_mesh(self) -> bool:
        """Whether the descriptor says how this operator joins a mesh (mesh arguments or environment)."""
        return self.mesh_args is not None or self.mesh_env is not None


@dataclass(frozen=True)
class OverlaySyncCommand:
    """How to start the overlay-sync sidecar under test on the local backend.

    It follows one ConfigMap, given as the YAML file of the object (``{configmap}``; the operator's
    directory sink writes the same form) whose ``{key}`` holds the envelope, and delivers each accepted
    revision into ``{target}/{file}``. ``ready_path`` and ``live_path`` are the HTTP paths of its
    readiness and liveness probes on ``{admin}``; a probe succeeds when it answers 2xx or 3xx, as a
    Kubernetes HTTP probe does. ``metrics_path`` (optional) serves its Prometheus text there.
    """

    argv_template: tuple[str, ...]
    ready_path: str
    live_path: str
    metrics_path: str | None = None
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S

    def render(self, *, configmap: Path, key: str, target: Path, file: str, scope: Mapping[str, str], admin: str,
               workdir: Path) -> tuple[list[str], dict[str, str]]:
        values = {"python": sys.executable, "workdir": str(workdir), "configmap": str(configmap), "key": key,
                  "target": str(target), "file": file, "admin": admin, **scope,
                  "scope": ",".join(f"{name}={value}" for name, value in scope.items())}
        return _fill(self.argv_template, self.env, values)


@dataclass(frozen=True)
class DescriptorBreakage:
    """A regression a vendor fears, for `agn-conformance self-check`: the descriptor with some component
    sections replaced by ones that start a deliberately broken build. The suite of `profile` must notice it:
    every test in `must_fail` fails (when it names tests), else at least one test of the profile does."""

    name: str
    summary: str
    profile: str
    sections: MappingProxyType[str, Any]
    must_fail: tuple[str, ...] = ()


@dataclass(frozen=True)
class ImplDescriptor:
    """A loaded descriptor; ``source`` is ``reference`` or the path it was read from.

    ``operator`` is None for a gateway-only implementation: the producer profile is then unsupported.
    """

    implementation: Implementation
    gateway: GatewayCommand
    features: frozenset[str]
    source: str
    operator: OperatorCommand | None = None
    overlay_sync: OverlaySyncCommand | None = None
    breakages: tuple[DescriptorBreakage, ...] = ()


# ------------------------------------------------------------------------------------------- loading


def descriptor_text(source: str) -> str:
    """A descriptor's text as written: the built-in reference's (``reference``), or the file `source` names."""
    if source == REFERENCE:
        return resources.files("harness.impls").joinpath("reference.yaml").read_text(encoding="utf-8")
    return Path(source).read_text(encoding="utf-8")


def reference_document() -> dict[str, Any]:
    """The built-in reference descriptor as parsed YAML (a fresh copy), for tools that derive descriptors
    from it."""
    return dict(_parse_yaml(descriptor_text(REFERENCE), REFERENCE))


def load_impl(spec: str) -> ImplDescriptor:
    """Load ``reference`` (the built-in descriptor) or the descriptor file at path ``spec``."""
    if spec == REFERENCE:
        return parse_impl(reference_document(), source=REFERENCE)
    path = Path(spec)
    if not path.is_file():
        raise ImplError("", f"{spec}: no such descriptor file (give '{REFERENCE}' or a path to a YAML file)")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ImplError("", f"{spec}: cannot read descriptor: {exc}") from exc
    return parse_impl(_parse_yaml(text, spec), source=str(path))


def parse_impl(data: Any, *, source: str = "<memory>") -> ImplDescriptor:
    """Validate an already-parsed descriptor document and build the descriptor; relative paths in it
    (operator.kubernetes.manifests) are taken from the directory of the file `source` names, else the cwd."""
    top = _mapping(data, "", _TOP_KEYS, what="the descriptor")
    implementation = _parse_implementation(top["implementation"])
    gateway = _parse_gateway(top["gateway"])
    base = Path(source).parent if Path(source).is_file() else Path.cwd()
    operator = _parse_operator(top["operator"], base) if top.get("operator") is not None else None
    overlay_sync = parse_overlay_sync(top["overlay_sync"]) if top.get("overlay_sync") is not None else None
    features = _parse_features(top.get("features", []))
    if OVERLAY_SYNC_FEATURE in features and overlay_sync is None:
        raise ImplError("features", f"{OVERLAY_SYNC_FEATURE} is claimed but there is no overlay_sync section to "
                                    "start it with")
    if DYNAMIC_WEIGHTS_FEATURE in features and (operator is None or operator.dynamic_weights is None):
        raise ImplError("features", f"{DYNAMIC_WEIGHTS_FEATURE} is claimed but operator.dynamic_weights does not "
                                    "give the GridNetwork spec that turns it on")
    if OVERLAY_SYNC_METRICS_FEATURE in features and (overlay_sync is None or overlay_sync.metrics_path is None):
        raise ImplError("features", f"{OVERLAY_SYNC_METRICS_FEATURE} is claimed but overlay_sync.metrics_path does "
                                    "not say where the sidecar serves its metrics")
    if SIGNALS_RELAY_FEATURE in features and (operator is None or operator.signals_args is None):
        raise ImplError("features", f"{SIGNALS_RELAY_FEATURE} is claimed but operator.signals_args does not say how "
                                    "the operator serves its signals endpoint")
    for feature in sorted(features):
        missing = sorted(REQUIRES.get(feature, frozenset()) - features)
        if missing:
            raise ImplError("features", f"{feature} is claimed without {', '.join(missing)}, which its tests "
                                        "cannot do without: claim both, or neither")
    breakages = _parse_breakages(top, source) if top.get("breakages") is not None else ()
    return ImplDescriptor(implementation=implementation, gateway=gateway, features=features, source=source,
                          operator=operator, overlay_sync=overlay_sync, breakages=breakages)


def _parse_breakages(top: Mapping[str, Any], source: str) -> tuple[DescriptorBreakage, ...]:
    """Each breakage is checked as the whole descriptor it makes (its sections in place of the descriptor's),
    so a broken build's command template is held to the rules a vendor's own is."""
    items = top["breakages"]
    if not isinstance(items, list):
        raise ImplError("breakages", f"must be a list of breakages, got {_kind(items)}")
    base = {key: value for key, value in top.items() if key != "breakages"}
    out: list[DescriptorBreakage] = []
    for index, item in enumerate(items):
        path = f"breakages[{index}]"
        block = _mapping(item, path, _BREAKAGE_KEYS)
        name = _string(block["name"], f"{path}.name")
        if not name.replace("-", "").isalnum() or name != name.lower():
            raise ImplError(f"{path}.name", f"use lower-case letters, digits and '-', got {name!r}")
        if any(b.name == name for b in out):
            raise ImplError(f"{path}.name", f"{name!r} is named twice")
        profile = _string(block["profile"], f"{path}.profile")
        if profile not in PROFILES:
            raise ImplError(f"{path}.profile", f"unknown profile {profile!r} (choose from {', '.join(PROFILES)})")
        sections = {key: block[key] for key in _BREAKAGE_SECTIONS if key in block}
        if not sections:
            raise ImplError(path, f"names no component section ({', '.join(_BREAKAGE_SECTIONS)}) to replace")
        must_fail = block.get("must_fail", [])
        if not isinstance(must_fail, list):
            raise ImplError(f"{path}.must_fail", f"must be a list of conformance ids, got {_kind(must_fail)}")
        ids = tuple(_string(test, f"{path}.must_fail[{i}]") for i, test in enumerate(must_fail))
        try:
            parse_impl({**base, **sections}, source=source)
        except ImplError as exc:
            raise ImplError(f"{path}.{exc.key}" if exc.key else path, exc.problem) from None
        summary = _string(block["summary"], f"{path}.summary") if "summary" in block else ""
        out.append(DescriptorBreakage(name, summary, profile, MappingProxyType(sections), ids))
    return tuple(out)


def _parse_yaml(text: str, source: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ImplError("", f"{source}: not valid YAML{where}: {problem}") from exc


def _parse_implementation(data: Any) -> Implementation:
    block = _mapping(data, "implementation", _IMPLEMENTATION_KEYS)
    texts = {key: _string(block[key], f"implementation.{key}")
             for key in ("organization", "project", "version")}
    contact = block["contact"]
    if not isinstance(contact, list):
        raise ImplError("implementation.contact", f"must be a list of strings, got {_kind(contact)}")
    contacts = tuple(_string(item, f"implementation.contact[{i}]") for i, item in enumerate(contact))
    probe = block.get("version_command", [])
    if not isinstance(probe, list) or ("version_command" in block and not probe):
        raise ImplError("implementation.version_command", f"must be a non-empty list of strings, got {_kind(probe)}")
    command = tuple(_string(item, f"implementation.version_command[{i}]") for i, item in enumerate(probe))
    return Implementation(contact=contacts, version_command=command, **texts)


def _parse_command(block: Mapping[str, Any], section: str, allowed: frozenset[str],
                   required: Mapping[str, str]) -> tuple[tuple[str, ...], MappingProxyType[str, str]]:
    """The argv template and environment of one component; ``required`` maps placeholder -> meaning."""
    command = block["command"]
    if not isinstance(command, list) or not command:
        raise ImplError(f"{section}.command", f"must be a non-empty list of strings, got {_kind(command)}")
    argv: list[str] = []
    used: set[str] = set()
    for i, item in enumerate(command):
        key = f"{section}.command[{i}]"
        argv.append(_string(item, key))
        used |= _placeholders(item, key, allowed)
    for name, meaning in required.items():
        if name not in used:
            raise ImplError(f"{section}.command", f"must contain {{{name}}} ({meaning})")

    return tuple(argv), _parse_env(block.get("env", {}), f"{section}.env", allowed)


def _parse_env(data: Any, where: str, allowed: frozenset[str]) -> MappingProxyType[str, str]:
    """A mapping of environment variable names to templates using `allowed` placeholders."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ImplError(where, f"must be a mapping of variable names to strings, got {_kind(data)}")
    env: dict[str, str] = {}
    for name, value in data.items():
        if not isinstance(name, str) or not name or "=" in name:
            raise ImplError(f"{where}.{name}", "variable names must be non-empty strings without '='")
        key = f"{where}.{name}"
        env[name] = _string(value, key, allow_empty=True)
        _placeholders(value, key, allowed)
    return MappingProxyType(env)


def _parse_gateway(data: Any) -> GatewayCommand:
    block = _mapping(data, "gateway", _GATEWAY_KEYS)
    argv, env = _parse_command(block, "gateway", PLACEHOLDERS,
                               {"config": "the path of the rendered Praxis config"})
    timeout = block.get("startup_timeout_s", DEFAULT_STARTUP_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ImplError("gateway.startup_timeout_s", f"must be a positive number of seconds, got {timeout!r}")
    run_as = None
    if block.get("run_as") is not None:
        try:
            run_as = parse_run_as(block["run_as"])
        except ValueError as exc:
            raise ImplError("gateway.run_as", str(exc)) from None
    launcher = _parse_launcher(block.get("launcher"))
    if launcher is None:
        for i, item in enumerate(argv):
            if "launcher" in _placeholders(item, f"gateway.command[{i}]"):
                raise ImplError(f"gateway.command[{i}]", "{launcher} needs a gateway.launcher")
        for name, value in env.items():
            if "launcher" in _placeholders(value, f"gateway.env.{name}"):
                raise ImplError(f"gateway.env.{name}", "{launcher} needs a gateway.launcher")
    return GatewayCommand(argv_template=argv, env=env, startup_timeout_s=float(timeout), run_as=run_as,
                          launcher=launcher)


def _parse_launcher(data: Any) -> GatewayLauncher | None:
    if data is None:
        return None
    block = _mapping(data, "gateway.launcher", _LAUNCHER_KEYS)
    argv, env = _parse_command(block, "gateway.launcher", LAUNCHER_PLACEHOLDERS,
                               {"socket": "the Unix socket path the launcher listens on"})
    return GatewayLauncher(argv_template=argv, env=env)


def _parse_operator(data: Any, base: Path) -> OperatorCommand:
    from harness.impl_kube import KubeDescriptorError, parse_kubernetes

    block = _mapping(data, "operator", _OPERATOR_KEYS)
    kubernetes = None
    if block.get("kubernetes") is not None:
        try:
            kubernetes = parse_kubernetes(block["kubernetes"], "operator", base)
        except KubeDescriptorError as exc:
            raise ImplError(exc.key, exc.problem) from None
    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = MappingProxyType({})
    if "command" in block or kubernetes is None:  # only a cluster-installed operator may go without one
        if "command" not in block:
            raise ImplError("operator.command", "missing required key (or give operator.kubernetes to install "
                                                "the operator in a cluster)")
        argv, env = _parse_command(block, "operator", OPERATOR_PLACEHOLDERS, {
            "manifests": "the directory of grid resources the operator watches",
            "out": "the directory the operator writes ConfigMaps and status into",
        })
    elif block.get("env"):
        raise ImplError("operator.env", "only used with operator.command (set a cluster operator's environment "
                                        "in its manifests)")
    dynamic = block.get("dynamic_weights")
    if dynamic is not None and (not isinstance(dynamic, Mapping) or not dynamic
                                or not all(isinstance(key, str) for key in dynamic)):
        raise ImplError("operator.dynamic_weights", f"must be a non-empty mapping of GridNetwork spec fields, got "
                                                    f"{_kind(dynamic)}")
    site_mode = block.get("provider_site", "siteSelector")
    if site_mode not in PROVIDER_SITE_MODES:
        raise ImplError("operator.provider_site", f"must be one of {', '.join(PROVIDER_SITE_MODES)} (how the "
                                                  f"operator learns a provider's hosting site), got {site_mode!r}")
    spelling = block.get("metrics_endpoint_key", "endpoint")
    if spelling not in METRICS_ENDPOINT_KEYS:
        raise ImplError("operator.metrics_endpoint_key", f"must be one of {', '.join(METRICS_ENDPOINT_KEYS)} (the "
                                                         f"metricsConfig field the operator reads), got {spelling!r}")
    mesh_args = _parse_mesh_args(block.get("mesh_args"))
    mesh_env = _parse_mesh_env(block.get("mesh_env"), mesh_args)
    return OperatorCommand(argv_template=argv, env=env, mesh_args=mesh_args, mesh_env=mesh_env,
                           dynamic_weights=MappingProxyType(dict(dynamic)) if dynamic is not None else None,
                           kubernetes=kubernetes, signals_args=_parse_signals_args(block.get("signals_args")),
                           metrics_endpoint_key=spelling, provider_site=site_mode)


def parse_overlay_sync(data: Any) -> OverlaySyncCommand:
    """The ``overlay_sync`` section of a descriptor (also how the local backend reads the reference's)."""
    block = _mapping(data, "overlay_sync", _OVERLAY_SYNC_KEYS)
    argv, env = _parse_command(block, "overlay_sync", OVERLAY_SYNC_PLACEHOLDERS, {
        "configmap": "the YAML file of the ConfigMap it follows",
        "target": "the directory it delivers into",
        "admin": "the HOST:PORT it serves its probes on",
    })
    timeout = block.get("startup_timeout_s", DEFAULT_STARTUP_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ImplError("overlay_sync.startup_timeout_s", f"must be a positive number of seconds, got {timeout!r}")
    paths = {}
    for name in ("ready_path", "live_path", "metrics_path"):
        if name not in block:
            continue
        value = _string(block[name], f"overlay_sync.{name}")
        if not value.startswith("/"):
            raise ImplError(f"overlay_sync.{name}", f"must be an absolute HTTP path starting with '/', got {value!r}")
        paths[name] = value
    return OverlaySyncCommand(argv_template=argv, env=env, startup_timeout_s=float(timeout), **paths)


def _parse_extra_args(data: Any, field: str, placeholders: frozenset[str],
                      required: tuple[str, ...]) -> tuple[str, ...] | None:
    """``operator.<field>``: argv items appended to the operator's command when the run needs what they
    turn on (a mesh, the signals endpoint); each must use only known placeholders and all of `required`."""
    if data is None:
        return None
    where = f"operator.{field}"
    if not isinstance(data, list) or not data:
        raise ImplError(where, f"must be a non-empty list of strings, got {_kind(data)}")
    used: set[str] = set()
    items = []
    for i, item in enumerate(data):
        key = f"{where}[{i}]"
        items.append(_string(item, key))
        used |= _placeholders(item, key, OPERATOR_PLACEHOLDERS | placeholders)
    for name in required:
        if name not in used:
            raise ImplError(where, f"must contain {{{name}}}")
    return tuple(items)


#: The mesh placeholders an operator must be given, through its mesh arguments or its mesh environment.
MESH_REQUIRED = ("site", "mesh_bind", "mesh_seeds")


def _parse_mesh_args(data: Any) -> tuple[str, ...] | None:
    """``operator.mesh_args``: argv items appended when the operator runs in a mesh. With ``mesh_env`` the
    required placeholders may be spread over both, so they are checked by `_parse_mesh_env` then."""
    return _parse_extra_args(data, "mesh_args", MESH_PLACEHOLDERS, ())


def _parse_mesh_env(data: Any, mesh_args: tuple[str, ...] | None) -> MappingProxyType[str, str] | None:
    """``operator.mesh_env``: environment variables set when the operator runs in a mesh (an operator that
    reads its mesh settings from the environment, as the public one reads its SWIM settings). The required
    mesh placeholders must appear in the mesh arguments or this environment."""
    env = None if data is None else _parse_env(data, "operator.mesh_env", OPERATOR_PLACEHOLDERS | MESH_PLACEHOLDERS)
    if env is not None and not env:
        raise ImplError("operator.mesh_env", "must be a non-empty mapping of variable names to strings")
    if mesh_args is None and env is None:
        return None
    used: set[str] = set()
    for template in (*(mesh_args or ()), *(env or {}).values()):
        used |= _placeholders(template, "operator.mesh_env", OPERATOR_PLACEHOLDERS | MESH_PLACEHOLDERS)
    where = "operator.mesh_args" if env is None else "operator.mesh_args or operator.mesh_env"
    for name in MESH_REQUIRED:
        if name not in used:
            raise ImplError(where, f"must contain {{{name}}}")
    return env


def _parse_signals_args(data: Any) -> tuple[str, ...] | None:
    """``operator.signals_args``: argv items appended when the operator is to serve its signals endpoint."""
    return _parse_extra_args(data, "signals_args", SIGNALS_PLACEHOLDERS,
                             ("signals_address", "signals_cert", "signals_key", "signals_client_ca"))


def _parse_features(data: Any) -> frozenset[str]:
    if data is None:
        return frozenset()
    if not isinstance(data, list):
        raise ImplError("features", f"must be a list of feature names, got {_kind(data)}")
    seen: set[str] = set()
    for i, item in enumerate(data):
        key = f"features[{i}]"
        name = _string(item, key)
        if name not in EXTENDED_FEATURES:
            near = difflib.get_close_matches(name, sorted(EXTENDED_FEATURES), n=1, cutoff=0.6)
            hint = f"did you mean {near[0]!r}? " if near else ""
            known = ", ".join(sorted(EXTENDED_FEATURES))
            raise ImplError(key, f"unknown extended feature {name!r} ({hint}known: {known})")
        if name in seen:
            raise ImplError(key, f"feature {name!r} is listed twice")
        seen.add(name)
    return frozenset(seen)


# ------------------------------------------------------------------------------------------- helpers


def _mapping(data: Any, path: str, keys: Mapping[str, bool], *, what: str | None = None) -> dict[str, Any]:
    """Check that ``data`` is a mapping with exactly the allowed keys and all required ones."""
    if not isinstance(data, dict):
        subject = f"{what} must be" if what else "must be"
        raise ImplError(path, f"{subject} a mapping, got {_kind(data)}")
    prefix = f"{path}." if path else ""
    for key in data:
        if key not in keys:
            allowed = ", ".join(keys)
            raise ImplError(f"{prefix}{key}", f"unknown key (allowed here: {allowed})")
    for key, required in keys.items():
        if required and key not in data:
            raise ImplError(f"{prefix}{key}", "missing required key")
    return data


def _string(value: Any, key: str, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        hint = " (quote it in YAML)" if isinstance(value, int | float) and not isinstance(value, bool) else ""
        raise ImplError(key, f"must be a string, got {_kind(value)}{hint}")
    if not allow_empty and not value.strip():
        raise ImplError(key, "must not be empty")
    return value


def _placeholders(template: str, key: str, allowed_names: frozenset[str] = PLACEHOLDERS) -> set[str]:
    """Return the placeholder names in ``template``; reject unknown or formatted ones."""
    names: set[str] = set()
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        problem = f"malformed template {template!r}: {exc} (write literal braces as {{{{ and }}}})"
        raise ImplError(key, problem) from exc
    allowed = ", ".join("{" + name + "}" for name in sorted(allowed_names))
    for _literal, name, spec, conversion in parts:
        if name is None:
            continue
        if name not in allowed_names or spec or conversion:
            shown = "{" + name + ("!" + conversion if conversion else "") + (":" + spec if spec else "") + "}"
            raise ImplError(key, f"unknown placeholder {shown} (allowed: {allowed})")
        names.add(name)
    return names


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)
