"""The cluster backends by --grid-backend name: how each is checked on this machine and how it is made.

A new backend of this project is a module under harness/backends/, its name in BACKEND_NAMES and an entry
in BACKENDS; nothing in suites/ changes. A vendor adds one from a package of their own with an entry point
in the group `agn_conformance.backends` whose object is a `ClusterBackendKind` (the entry point's name is
the --grid-backend name). "local" (processes on this machine) needs no entry: the grid factory makes it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

from harness.addresses import AddressPlan
from harness.backends.base import BACKEND_NAMES
from harness.process import Supervisor
from harness.topology import Topology


@dataclass(frozen=True)
class ClusterBackendKind:
    """How a cluster backend is checked and made: `preflight(config, topology)` says why it cannot run here
    (None: it can); `make(config, workdir, topology, impl, supervisor, plan)` builds it, not yet started."""

    preflight: Callable[[pytest.Config, Topology], str | None]
    make: Callable[[pytest.Config, Path, Topology, Any, Supervisor, AddressPlan], Any]
    #: The backend installs into clusters the run does not own: one grid at a time (same object names).
    shared_clusters: bool = False


def _kind_preflight(config: pytest.Config, topology: Topology) -> str | None:
    from harness.backends.kube.kind import preflight_kind
    from harness.backends.runner import Runner

    return preflight_kind(Runner(), node_image=config.getoption("--grid-kind-node-image"),
                          image=config.getoption("--grid-image"))


def _existing_contexts(config: pytest.Config) -> dict[str, str]:
    from harness.backends.kube.existing import parse_contexts

    try:
        return parse_contexts(config.getoption("--grid-kube-contexts"))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def _existing_preflight(config: pytest.Config, topology: Topology) -> str | None:
    from harness.backends.kube.existing import preflight_existing
    from harness.backends.runner import Runner

    return preflight_existing(Runner(), topology, _existing_contexts(config))


def _common(config: pytest.Config, workdir: Path, supervisor: Supervisor, plan: AddressPlan) -> dict[str, Any]:
    from harness.backends.runner import Runner

    return {"runner": Runner(log_path=workdir / "logs" / "commands.jsonl"), "image": config.getoption("--grid-image"),
            "keep": config.getoption("--grid-keep"), "seed": config.getoption("--grid-seed"),
            "supervisor": supervisor, "plan": plan}


def _make_kind(config: pytest.Config, workdir: Path, topology: Topology, impl: Any, supervisor: Supervisor,
               plan: AddressPlan) -> Any:
    from harness.backends.kube.kind import KindBackend

    return KindBackend(workdir, topology, impl, node_image=config.getoption("--grid-kind-node-image"),
                       **_common(config, workdir, supervisor, plan))


def _make_existing(config: pytest.Config, workdir: Path, topology: Topology, impl: Any, supervisor: Supervisor,
                   plan: AddressPlan) -> Any:
    from harness.backends.kube.existing import ExistingBackend

    return ExistingBackend(workdir, topology, impl, contexts=_existing_contexts(config),
                           **_common(config, workdir, supervisor, plan))


#: The cluster backends by --grid-backend name; "local" (processes on this machine) needs no entry.
BACKENDS: dict[str, ClusterBackendKind] = {
    "kind": ClusterBackendKind(_kind_preflight, _make_kind),
    "existing": ClusterBackendKind(_existing_preflight, _make_existing, shared_clusters=True),
}

#: The entry-point group through which other packages add backends.
ENTRY_POINT_GROUP = "agn_conformance.backends"


class BackendRegistryError(RuntimeError):
    """A backend another package registered cannot be used; the message names its entry point."""


def plugin_backends() -> dict[str, ClusterBackendKind]:
    """Backends other installed packages register, by name; a broken or clashing entry is an error naming it."""
    found: dict[str, ClusterBackendKind] = {}
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        if entry.name == "local" or entry.name in BACKENDS:
            raise BackendRegistryError(f"entry point {entry.name} = {entry.value} ({ENTRY_POINT_GROUP}): the name "
                                       "is taken by a bundled backend")
        try:
            kind = entry.load()
        except Exception as exc:  # a broken plugin package must be named, not crash option parsing obscurely
            raise BackendRegistryError(f"entry point {entry.name} = {entry.value} ({ENTRY_POINT_GROUP}) does not "
                                       f"load: {type(exc).__name__}: {exc}") from exc
        if not isinstance(kind, ClusterBackendKind):
            raise BackendRegistryError(f"entry point {entry.name} = {entry.value} ({ENTRY_POINT_GROUP}) is a "
                                       f"{type(kind).__name__}, not a harness.backends.registry.ClusterBackendKind")
        found[entry.name] = kind
    return found


def backend_names() -> tuple[str, ...]:
    """Every --grid-backend name: the bundled ones, then those other packages register."""
    return (*BACKEND_NAMES, *sorted(plugin_backends()))


def cluster_backend(name: str) -> ClusterBackendKind:
    """The cluster backend registered as `name` (bundled first); KeyError for "local" or an unknown name."""
    if name in BACKENDS:
        return BACKENDS[name]
    return plugin_backends()[name]
