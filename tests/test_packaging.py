"""The distribution ships every package of the tree and the data files the harness reads."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _declared() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return set(config["packages"])


def test_every_package_in_the_tree_is_declared() -> None:
    found = set()
    for top in ("harness", "reference", "suites"):
        for init in (ROOT / top).rglob("__init__.py"):
            if "__pycache__" not in init.parts:
                found.add(".".join(init.parent.relative_to(ROOT).parts))
    found |= {"harness.clusters", "harness.crds_data", "harness.manifests_data"}
    assert found == _declared(), f"missing: {sorted(found - _declared())}; stale: {sorted(_declared() - found)}"


def test_topologies_and_descriptors_are_package_data() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"]["harness.clusters"] == "clusters"
    assert any((ROOT / "clusters").glob("*.yaml"))
    assert "*.yaml" in config["package-data"]["harness.clusters"]
    assert "*.yaml" in config["package-data"]["harness.impls"]
