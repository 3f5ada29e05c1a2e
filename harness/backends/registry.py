"""The cluster backends by --grid-backend name: how each is checked on this machine and how it is made.

A new backend is a module under harness/backends/, its name in BACKEND_NAMES and an entry here; nothing in
suites/ changes. "local" (processes on this machine) needs no entry: the grid factory makes it itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.addresses import AddressPlan
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

    return preflight_kind(Runner())


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

    return KindBackend(workdir, topology, impl, **_common(config, workdir, supervisor, plan))


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
