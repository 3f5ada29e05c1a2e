"""The order a distributed run collects its tests in: each worker starts on its share of the long tests,
and a group of tests that belong on one worker opens a part of its own.

A few tests wait out the guide's default durations (a 10 s minimum state duration followed by a 30 s
hold-down, a SWIM suspicion, a TTL): one of them alone lasts 40 s. Started late, such a test holds the
run open while the other workers have nothing left to do. A test says how long it lasts by design with
``@pytest.mark.lasts(seconds)``.

The run hands tests out with pytest-xdist's ``worksteal`` scheduling: each of the n workers first gets
one contiguous part of the collection (the parts as even in count as they can be), and a worker that
runs out takes half of what is left of the longest queue. Contiguous parts keep a worker on a few
modules and profiles, so their module and session fixtures (grids, operators, gateways) are set up on
few workers rather than on all of them. The order here keeps that and changes only where the long tests
go: they are shared out over the parts longest first, each to the part with the least long-test time so
far, and each part starts with its long tests, longest first. The other tests keep their order and fill
the parts. Only the order changes: every test runs as it would alone, with the same deadlines and samples.

Some tests belong on one worker, one after another: those that share a fixture each worker would
otherwise build for itself (a three-site mesh of operators takes seconds to start and converge), and those
that drive a load (thousands of requests, which two workers side by side on a small machine serve with more
CPU and in more time than one after the other). They say so with pytest-xdist's own marker,
``@pytest.mark.xdist_group(name)``, which xdist honours only under ``--dist loadgroup``. Here a group opens
a part, ahead of that part's long tests, so its worker runs it first. Stealing takes tests from the end of a
queue, so a group at the head is not split over workers that would each build its fixture again, nor run
side by side. Each group goes, largest first, to the part with the least long-test time, preferring parts
without a group; what does not fit in that part opens the next one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

__all__ = ["GROUP_MARKER", "LASTS_MARKER", "deal", "part_sizes"]

LASTS_MARKER = "lasts"
#: pytest-xdist's marker for tests that belong on one worker (its ``--dist loadgroup`` honours it as well).
GROUP_MARKER = "xdist_group"

T = TypeVar("T")


def part_sizes(count: int, workers: int) -> list[int]:
    """How worksteal first splits `count` tests over `workers`: worker i gets what is left // workers left."""
    sizes, left = [], count
    for index in range(workers):
        size = left // (workers - index)
        sizes.append(size)
        left -= size
    return sizes


def deal(items: Sequence[T], lasts_s: Sequence[float | None], workers: int,
         groups: Sequence[str | None] | None = None) -> list[T]:
    """`items` in collection order for `workers` workers; `lasts_s[i]` is item i's length by design, or None;
    `groups[i]` the group item i belongs on one worker with, or None (no groups when `groups` is None).

    Long items outside groups are shared over the worker parts (longest first, each to the part with the
    least long time so far, the lower part on a tie) and open their part, longest first. Groups then open
    parts ahead of those (see the module's docstring), each in collection order; the other items fill the
    parts in their order. A part never gets more items than worksteal hands it first.
    """
    group_of = [None] * len(items) if groups is None else list(groups)
    if len(items) != len(lasts_s) or len(items) != len(group_of):
        raise ValueError("deal: one length (or None) and one group (or None) per item")
    if workers < 2 or all(s is None for s in lasts_s) and all(g is None for g in group_of):
        return list(items)
    sizes = part_sizes(len(items), workers)
    longest_first = sorted((i for i, s in enumerate(lasts_s) if s is not None and group_of[i] is None),
                           key=lambda i: -float(lasts_s[i] or 0))
    parts: list[list[int]] = [[] for _ in sizes]
    load = [0.0] * len(sizes)
    for index in longest_first:
        open_parts = [k for k in range(len(sizes)) if len(parts[k]) < sizes[k]]
        k = min(open_parts, key=lambda p: (load[p], p))
        parts[k].append(index)
        load[k] += float(lasts_s[index] or 0)
    heads: list[list[int]] = [[] for _ in sizes]
    members: dict[str, list[int]] = {}
    for index, name in enumerate(group_of):
        if name is not None:
            members.setdefault(name, []).append(index)
    for name in sorted(members, key=lambda n: -len(members[n])):
        pending = members[name]
        while pending:
            room = {k: sizes[k] - len(parts[k]) - len(heads[k]) for k in range(len(sizes))}
            k = min((p for p in room if room[p] > 0), key=lambda p: (bool(heads[p]), load[p], -room[p], p))
            heads[k] += pending[:room[k]]
            pending = pending[room[k]:]
    unmarked = iter(i for i, s in enumerate(lasts_s) if s is None and group_of[i] is None)
    order: list[int] = []
    for k, size in enumerate(sizes):
        order += heads[k] + parts[k]
        order += [next(unmarked) for _ in range(size - len(heads[k]) - len(parts[k]))]
    return [items[i] for i in order]
