"""The order a distributed run collects tests in: every worker's first part opens with its share of the
long tests, and the other tests keep their order."""

from __future__ import annotations

import pytest

from harness.dealing import deal, part_sizes


def _parts(order: list[str], workers: int) -> list[list[str]]:
    """The contiguous parts worksteal first hands the workers."""
    parts, start = [], 0
    for size in part_sizes(len(order), workers):
        parts.append(order[start:start + size])
        start += size
    return parts


def test_parts_are_split_as_worksteal_splits_them() -> None:
    assert part_sizes(10, 4) == [2, 2, 3, 3]
    assert part_sizes(454, 4) == [113, 113, 114, 114]
    assert part_sizes(3, 4) == [0, 1, 1, 1]


def test_long_tests_are_shared_out_and_open_their_parts() -> None:
    names = [f"t{i}" for i in range(16)]
    lasts: list[float | None] = [None] * 16
    for index, seconds in {2: 40.0, 3: 10.0, 9: 10.0, 10: 9.0, 14: 8.0, 15: 3.0}.items():
        lasts[index] = seconds
    parts = _parts(deal(names, lasts, 4), 4)
    assert [part[0] for part in parts] == ["t2", "t3", "t9", "t10"]  # the four longest, one to a part
    assert parts[3][:2] == ["t10", "t14"] and parts[1][:2] == ["t3", "t15"]  # then to the least loaded
    unmarked = [name for part in parts for name in part if lasts[names.index(name)] is None]
    assert unmarked == [name for name, seconds in zip(names, lasts, strict=True) if seconds is None]
    assert sorted(sum(parts, [])) == sorted(names) and [len(p) for p in parts] == part_sizes(16, 4)


def test_a_part_takes_no_more_long_tests_than_it_holds() -> None:
    order = deal(["a", "b", "c"], [1.0, 2.0, 3.0], 4)
    assert _parts(order, 4) == [[], ["c"], ["b"], ["a"]]


def test_without_long_tests_or_workers_the_order_is_kept() -> None:
    names = ["a", "b", "c", "d"]
    assert deal(names, [None, None, None, None], 2) == names
    assert deal(names, [None, 9.0, None, 1.0], 1) == names
    assert deal(names, [None, 9.0, None, 1.0], 2) == ["b", "a", "d", "c"]  # the twin: two workers reorder
    with pytest.raises(ValueError, match="one length"):
        deal(names, [None], 2)
