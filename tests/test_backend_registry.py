"""Backends other packages register through the `agn_conformance.backends` entry-point group."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.backends import registry
from harness.backends.registry import BackendRegistryError, ClusterBackendKind


@dataclass
class FakeEntryPoint:
    name: str
    value: str
    loaded: Any

    def load(self) -> Any:
        if isinstance(self.loaded, Exception):
            raise self.loaded
        return self.loaded


def _kind(made: list[Path]) -> ClusterBackendKind:
    def make(config: Any, workdir: Path, topology: Any, impl: Any, supervisor: Any, plan: Any) -> Any:
        made.append(workdir)
        return SimpleNamespace(name="vendor-cloud")

    return ClusterBackendKind(preflight=lambda config, topology: "needs the vendor's cloud credentials", make=make)


def _register(monkeypatch: pytest.MonkeyPatch, *entries: FakeEntryPoint) -> None:
    def entry_points(*, group: str) -> list[FakeEntryPoint]:
        assert group == registry.ENTRY_POINT_GROUP
        return list(entries)

    monkeypatch.setattr(registry, "entry_points", entry_points)


def test_a_registered_backend_is_a_backend_name_and_is_looked_up(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[Path] = []
    kind = _kind(made)
    _register(monkeypatch, FakeEntryPoint("vendor-cloud", "vendor_pkg.backend:KIND", kind))
    assert registry.backend_names() == ("local", "kind", "existing", "vendor-cloud")
    assert registry.cluster_backend("vendor-cloud") is kind
    assert registry.cluster_backend("kind") is registry.BACKENDS["kind"]
    with pytest.raises(KeyError):
        registry.cluster_backend("nowhere")


def test_a_registered_backend_that_cannot_run_here_skips_with_its_reason(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Path) -> None:
    from harness.grid_factory import GridFactory

    _register(monkeypatch, FakeEntryPoint("vendor-cloud", "vendor_pkg.backend:KIND", _kind([])))
    options = {"--grid-backend": "vendor-cloud", "--grid-seed": None, "--grid-keep": False}
    config = SimpleNamespace(getoption=options.__getitem__, add_cleanup=lambda _f: None)
    factory = GridFactory(config, SimpleNamespace(mktemp=lambda name: tmp_path / name),  # type: ignore[arg-type]
                          SimpleNamespace(features=frozenset(), gateway=SimpleNamespace()), None)
    with pytest.raises(pytest.skip.Exception, match="needs the vendor's cloud credentials"), \
            factory.open("single-site", purpose="grid"):
        pass


@pytest.mark.parametrize(("entry", "problem"), [
    (FakeEntryPoint("kind", "vendor_pkg:KIND", None), "the name is taken by a bundled backend"),
    (FakeEntryPoint("broken", "vendor_pkg:KIND", ImportError("no module vendor_pkg")), "does not load"),
    (FakeEntryPoint("wrong", "vendor_pkg:KIND", object()), "not a harness.backends.registry.ClusterBackendKind"),
])
def test_a_broken_registration_is_an_error_naming_its_entry_point(monkeypatch: pytest.MonkeyPatch,
                                                                    entry: FakeEntryPoint, problem: str) -> None:
    """The same registration done right (a ClusterBackendKind under a free name) is accepted."""
    _register(monkeypatch, FakeEntryPoint("fine", "vendor_pkg:KIND", _kind([])))
    assert "fine" in registry.backend_names()
    _register(monkeypatch, entry)
    with pytest.raises(BackendRegistryError, match=problem) as raised:
        registry.backend_names()
    assert f"entry point {entry.name} = {entry.value}" in str(raised.value)
