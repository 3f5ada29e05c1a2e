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
    for top in ("harness", "reference", "suites", "selfcheck"):
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


def test_the_image_constraints_pin_every_runtime_dependency_within_its_range() -> None:
    """reference/constraints.txt pins what the image installs; each pin must satisfy pyproject's range."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins: dict[str, str] = {}
    for line in (ROOT / "reference" / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"not an exact pin: {line!r}"
            pins[canonicalize_name(name)] = version.strip()
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for text in dependencies:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} has no pin in reference/constraints.txt"
        assert requirement.specifier.contains(pins[name]), \
            f"{requirement.name}=={pins[name]} is outside pyproject's {requirement.specifier}"
    dockerfile = (ROOT / "reference" / "Dockerfile").read_text()
    assert "--constraint /src/reference/constraints.txt" in dockerfile
