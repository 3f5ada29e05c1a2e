"""The order a distributed run collects its tests in: each worker starts on its share of the long tests.

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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

__all__ = ["LASTS_MARKER", "deal", "part_sizes"]

LASTS_MARKER = "lasts"

T = TypeVar("T")


def part_sizes(count: int, workers: int) -> list[int]:
    """How worksteal first splits `count` tests over `workers`: worker i gets what is left // workers left."""
    sizes, left = [], count
    for index in range(workers):
        size = left // (workers - index)
        sizes.append(size)
        left -= size
    return sizes


def deal(items: Sequence[T], lasts_s: Sequence[float | None], workers: int) -> list[T]:
    """`items` in collection order for `workers` workers; `lasts_s[i]` is item i's length by design, or None.

    Long items are shared over the worker parts (longest first, each to the part with the least long
    time so far, the lower part on a tie) and open their part, longest first; the unmarked items fill the
    parts in their order. A part never gets more long items than it has room for.
    """
    if len(items) != len(lasts_s):
        raise ValueError("deal: one length (or None) per item")
    if workers < 2 or all(s is None for s in lasts_s):
        return list(items)
    sizes = part_sizes(len(items), workers)
    longest_first = sorted((i for i, s in enumerate(lasts_s) if s is not None), key=lambda i: -float(lasts_s[i] or 0))
    parts: list[list[int]] = [[] for _ in sizes]
    load = [0.0] * len(sizes)
    for index in longest_first:
        open_parts = [k for k in range(len(sizes)) if len(parts[k]) < sizes[k]]
        k = min(open_parts, key=lambda p: (load[p], p))
        parts[k].append(index)
        load[k] += float(lasts_s[index] or 0)
    unmarked = iter(i for i, s in enumerate(lasts_s) if s is None)
    order: list[int] = []
    for k, size in enumerate(sizes):
        order += parts[k]
        order += [next(unmarked) for _ in range(size - len(parts[k]))]
    return [items[i] for i in order]
