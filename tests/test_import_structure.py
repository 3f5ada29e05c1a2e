"""The layout's promises about imports: harness/ and reference/ never import each other nor the shipped
breakages (selfcheck/), and neither has an import cycle.

Their independence is what keeps one from hiding the other's bug: a harness that imported the reference
could judge an implementation by the reference's own code. The graph is grimp's (import-linter's library),
built from the source, with imports made only for type checkers left out; imports inside functions count,
so a cycle cannot hide behind a lazy import.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping, Set
from pathlib import Path

import grimp
import pytest

PACKAGES = ("harness", "reference")
#: The shipped breakages patch reference/ and are started by the harness only as processes named in
#: descriptors, so neither imports them.
SELFCHECK = "selfcheck"
#: The size the layout allows a module: past it, a module is doing more than one job.
MAX_MODULE_LINES = 800


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES, SELFCHECK, exclude_type_checking_imports=True)


def cycles(edges: Mapping[str, Set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(edges.get(module, ())):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(edges) + 100))
    try:
        for module in sorted(edges):
            if module not in index:
                visit(module)
    finally:
        sys.setrecursionlimit(limit)
    return found


def internal_edges(graph: grimp.ImportGraph, package: str) -> dict[str, set[str]]:
    modules = {m for m in graph.modules if m == package or m.startswith(package + ".")}
    return {m: {i for i in graph.find_modules_directly_imported_by(m) if i in modules} for m in modules}


def test_cycles_are_found() -> None:
    """The cycle finder itself: a three-module ring and a self-standing pair are reported, a chain is not."""
    ring = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": set(), "f": {"g"}, "g": {"f"}}
    assert sorted(cycles(ring)) == [["a", "b", "c"], ["f", "g"]]
    assert cycles({"x": {"y"}, "y": {"z"}, "z": set()}) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle(graph: grimp.ImportGraph, package: str) -> None:
    found = cycles(internal_edges(graph, package))
    details = []
    for component in found:
        members = set(component)
        for module in component:
            for imported in sorted(graph.find_modules_directly_imported_by(module) & members):
                details += [f"{module} -> {imported}: line {d['line_number']}: {d['line_contents']}"
                            for d in graph.get_import_details(importer=module, imported=imported)]
    assert not found, f"import cycles in {package}/: {found}\n" + "\n".join(details)


@pytest.mark.parametrize(("importer", "imported"), [("harness", "reference"), ("reference", "harness"),
                                                    ("harness", SELFCHECK), ("reference", SELFCHECK)])
def test_harness_and_reference_never_import_each_other(graph: grimp.ImportGraph, importer: str,
                                                       imported: str) -> None:
    chain = graph.find_shortest_chain(importer=importer, imported=imported, as_packages=True)
    assert chain is None, f"{importer}/ reaches {imported}/ through {' -> '.join(chain or ())}"


@pytest.mark.parametrize("package", PACKAGES)
def test_modules_stay_small(graph: grimp.ImportGraph, package: str) -> None:
    long = {}
    for module in sorted(m for m in graph.modules if m == package or m.startswith(package + ".")):
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
            continue
        lines = len(Path(spec.origin).read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES:
            long[module] = lines
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them by job): {long}"


@pytest.mark.parametrize("imported", ["reference.operator.mesh", "reference.operator.loop", "reference.kube_client"])
def test_the_operator_core_stays_pure(graph: grimp.ImportGraph, imported: str) -> None:
    """The rendering core imports no mesh, loop or API client (nothing asynchronous, no I/O): it is tested and
    mutated as pure functions."""
    chain = graph.find_shortest_chain(importer="reference.operator.core", imported=imported, as_packages=True)
    assert chain is None, f"the operator core reaches {imported} through {' -> '.join(chain or ())}"
