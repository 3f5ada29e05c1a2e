"""Scheduling of the project's tests under pytest-xdist, for the judge modules' sake.

A judge module (tests/test_*judges.py) runs over a hundred pytest sessions of its own, most of them
waiting out a deadline; it starts them a few at a time only when one worker holds all its tests
(selfcheck/judge.py). So the controller tells its workers how it distributes tests, and the judge
modules are collected first, longest first: with ``--dist loadscope --no-loadscope-reorder`` each goes
whole to the next free worker while the short modules fill in after them.
"""

from __future__ import annotations

from typing import Any

import pytest

from selfcheck.judge import pass_dist

#: The judge modules, longest first (their breakages' runs, a few at a time, take minutes).
JUDGE_MODULES = ("test_demo_operator_judges.py", "test_mesh_judges.py", "test_producer_judges.py",
                 "test_demo_gateway_judges.py", "test_suite_judges.py", "test_provider_judges.py")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    pass_dist(node)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Judge modules first, longest first; every other test keeps its place."""

    def rank(item: pytest.Item) -> int:
        name = item.path.name
        return JUDGE_MODULES.index(name) if name in JUDGE_MODULES else len(JUDGE_MODULES)

    items.sort(key=rank)
