"""The pick among a model's ready sites, by the arm the number of sites with room selects.

- three or more with room: two_choices, two distinct draws weighted by weight, the lower rho wins
  (a tie goes to the first draw);
- exactly two: between_two, a weighted pick where a's share is r_a / (r_a + r_b), r = weight / (1 + rho),
  clamped to [0.1, 0.9];
- exactly one: lone;
- none (or none publishes): by_capacity, a draw weighted by weight over every ready site, an unmeasured
  one weighing the mean of the measured ones (or 1 when none is measured).

Each arm is a module attribute looked up when `choose` runs, so one can be replaced at run time.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from reference.gateway.site_route import availability
from reference.gateway.site_route.availability import SiteView

TWO_CHOICES = "two_choices"
BETWEEN_TWO = "between_two"
LONE = "lone"
BY_CAPACITY = "by_capacity"
PATHS = (TWO_CHOICES, BETWEEN_TWO, LONE, BY_CAPACITY)
SHARE_MIN = 0.1
SHARE_MAX = 0.9


def weight_of(view: SiteView) -> float:
    return view.weight if view.weight is not None and view.weight > 0 else 0.0


def weighted_draw(sites: Sequence[SiteView], weights: Sequence[float], rng: random.Random) -> int:
    """The index of one site drawn with probability proportional to its weight (uniform when all are 0)."""
    total = sum(weights)
    if total <= 0:
        return rng.randrange(len(sites))
    point = rng.random() * total
    running = 0.0
    for index, weight in enumerate(weights):
        running += weight
        if point < running:
            return index
    return len(sites) - 1


def two_choices(room: Sequence[SiteView], rng: random.Random) -> SiteView:
    weights = [weight_of(s) for s in room]
    first = weighted_draw(room, weights, rng)
    rest = [i for i in range(len(room)) if i != first]
    second = rest[weighted_draw([room[i] for i in rest], [weights[i] for i in rest], rng)]
    a, b = room[first], room[second]
    return b if (b.rho or 0.0) < (a.rho or 0.0) else a


def share_of_first(a: SiteView, b: SiteView) -> float:
    ra = weight_of(a) / (1.0 + (a.rho or 0.0))
    rb = weight_of(b) / (1.0 + (b.rho or 0.0))
    share = ra / (ra + rb) if ra + rb > 0 else 0.5
    return min(SHARE_MAX, max(SHARE_MIN, share))


def between_two(a: SiteView, b: SiteView, rng: random.Random) -> SiteView:
    return a if rng.random() < share_of_first(a, b) else b


def lone(site: SiteView, rng: random.Random) -> SiteView:
    return site


def capacity_weights(sites: Sequence[SiteView]) -> list[float]:
    measured = [weight_of(s) for s in sites if s.measured and s.weight is not None]
    stand_in = sum(measured) / len(measured) if measured else 1.0
    return [weight_of(s) if s.measured and s.weight is not None else stand_in for s in sites]


def by_capacity(sites: Sequence[SiteView], rng: random.Random) -> SiteView:
    return sites[weighted_draw(sites, capacity_weights(sites), rng)]


def choose(sites: Sequence[SiteView], rng: random.Random) -> tuple[SiteView, str]:
    """One of `sites` (ready, admitted, non-empty) and the arm that chose it."""
    room = [s for s in sites if availability.has_room(s)]
    if len(room) >= 3:
        return two_choices(room, rng), TWO_CHOICES
    if len(room) == 2:
        return between_two(room[0], room[1], rng), BETWEEN_TWO
    if len(room) == 1:
        return lone(room[0], rng), LONE
    return by_capacity(sites, rng), BY_CAPACITY
