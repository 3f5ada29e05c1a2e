"""The order a distributed run collects tests in: every worker's first part opens with its share of the
long tests, a group of tests that belong on one worker opens a part of its own, and the other tests keep
their order."""

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


def test_a_group_opens_the_part_with_the_least_long_time_in_its_own_order() -> None:
    names = [f"t{i}" for i in range(16)]
    lasts: list[float | None] = [None] * 16
    for index, seconds in {0: 40.0, 1: 10.0, 2: 12.0, 3: 11.0}.items():
        lasts[index] = seconds
    groups: list[str | None] = [None] * 16
    for index in (5, 9, 10, 3):  # a long test inside a group stays with its group
        groups[index] = "mesh"
    parts = _parts(deal(names, lasts, 4, groups), 4)
    assert [part[0] for part in parts] == ["t0", "t2", "t1", "t3"], parts  # the long tests outside the group
    assert parts[3][:4] == ["t3", "t5", "t9", "t10"]  # the group: the part without long tests, collection order
    assert sorted(sum(parts, [])) == sorted(names) and [len(p) for p in parts] == part_sizes(16, 4)
    ungrouped = [name for part in parts for name in part if groups[names.index(name)] is None
                 and lasts[names.index(name)] is None]
    assert ungrouped == [n for n, s, g in zip(names, lasts, groups, strict=True) if s is None and g is None]


def test_groups_take_parts_of_their_own_and_spill_over_when_too_big() -> None:
    names = [f"t{i}" for i in range(12)]
    groups: list[str | None] = [None] * 12
    for index in (0, 2, 4, 6, 8):
        groups[index] = "load"
    for index in (1, 3):
        groups[index] = "mesh"
    parts = _parts(deal(names, [None] * 12, 3, groups), 3)
    assert parts[0] == ["t0", "t2", "t4", "t6"]  # the larger group first, as far as the part holds
    assert parts[1][0] == "t8" and parts[1][1] not in ("t1", "t3")  # its rest opens the next part
    assert parts[2][:2] == ["t1", "t3"]  # the smaller group takes a part without a group
    assert [len(p) for p in parts] == part_sizes(12, 3) and sorted(sum(parts, [])) == sorted(names)


def test_without_groups_the_dealing_of_long_tests_is_unchanged() -> None:
    names = [f"t{i}" for i in range(8)]
    lasts: list[float | None] = [None, 3.0, None, 9.0, None, None, 1.0, None]
    assert deal(names, lasts, 3) == deal(names, lasts, 3, [None] * 8)
    parts = _parts(deal(names, [None] * 8, 3, ["g", None, None, None, None, None, None, "g"]), 3)
    assert parts[1][:2] == ["t0", "t7"], parts  # no long tests: the group opens the part with the most room
    with pytest.raises(ValueError, match="one group"):
        deal(names, [None] * 8, 3, [None])
