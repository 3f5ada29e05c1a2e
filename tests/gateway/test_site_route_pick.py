"""The pick arms' statistics with a seeded random source, shedding, and prefix affinity.

Each share is checked against its exact value over N draws with a tolerance of 0.015 (about four
standard deviations of a share estimated from 20 000 draws)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

import pytest

from reference.gateway.site_route import pick, prefix, shedding
from reference.gateway.site_route.availability import SiteView
from reference.gateway.site_route.settings import AvailabilitySettings, PrefixSettings

N = 20_000
TOLERANCE = 0.015


def site(name: str, weight: float | None, rho: float | None = 0.0, **extra: object) -> SiteView:
    measured = weight is not None
    return SiteView(name, f"{name}-pool", measured=measured, ceiling=weight, weight=weight, rho=rho if measured
                    else None, **extra)  # type: ignore[arg-type]


def shares(sites: Sequence[SiteView], seed: int = 7) -> tuple[dict[str, float], Counter[str]]:
    rng = random.Random(seed)
    picked: Counter[str] = Counter()
    paths: Counter[str] = Counter()
    for _ in range(N):
        chosen, path = pick.choose(sites, rng)
        picked[chosen.site] += 1
        paths[path] += 1
    return {s.site: picked[s.site] / N for s in sites}, paths


def two_choices_exact(sites: Sequence[SiteView]) -> dict[str, float]:
    total = sum(s.weight or 0 for s in sites)
    out = {s.site: 0.0 for s in sites}
    for a in sites:
        for b in sites:
            if a is b:
                continue
            p = (a.weight or 0) / total * (b.weight or 0) / (total - (a.weight or 0))
            winner = b if (b.rho or 0) < (a.rho or 0) else a
            out[winner.site] += p
    return out


def test_two_choices_at_three_or_more_sites_with_room() -> None:
    sites = [site("a", 10, 0.5), site("b", 20, 0.2), site("c", 30, 0.9)]
    got, paths = shares(sites)
    assert paths == {"two_choices": N}
    exact = two_choices_exact(sites)
    for name, share in got.items():
        assert share == pytest.approx(exact[name], abs=TOLERANCE), (name, got, exact)
    assert got["c"] == 0  # the busiest of three is never taken
    tied = [site("a", 10, 0.5), site("b", 10, 0.5), site("c", 10, 0.5), site("d", 10, 0.5)]
    got, _ = shares(tied)  # a tie goes to the first draw: uniform here
    assert all(share == pytest.approx(0.25, abs=TOLERANCE) for share in got.values())


@pytest.mark.parametrize(("a", "b", "expected"), [
    ((30, 0.0), (10, 0.0), 0.75),
    ((10, 0.5), (10, 0.0), (10 / 1.5) / (10 / 1.5 + 10)),
    ((100, 0.0), (1, 0.0), 0.9),  # clamped
    ((1, 0.0), (100, 0.0), 0.1),
])
def test_between_two_is_a_weighted_pick_clamped_to_a_tenth(a: tuple[float, float], b: tuple[float, float],
                                                             expected: float) -> None:
    got, paths = shares([site("a", *a), site("b", *b)])
    assert paths == {"between_two": N}
    assert got["a"] == pytest.approx(expected, abs=TOLERANCE)
    assert pick.share_of_first(site("a", *a), site("b", *b)) == pytest.approx(expected)


def test_lone_when_one_site_has_room() -> None:
    got, paths = shares([site("a", 10, 1.0), site("b", 10, 0.3), site("c", None)])
    assert paths == {"lone": N} and got["b"] == 1.0


def test_by_capacity_when_no_site_has_room_unmeasured_weighing_the_mean() -> None:
    got, paths = shares([site("a", 10, 1.0), site("b", 30, 1.0), site("c", None)])
    assert paths == {"by_capacity": N}
    for name, expected in {"a": 10 / 60, "b": 30 / 60, "c": 20 / 60}.items():
        assert got[name] == pytest.approx(expected, abs=TOLERANCE)
    got, _ = shares([site("a", None), site("b", None)])  # none publishes: each weighs 1
    assert got["a"] == pytest.approx(0.5, abs=TOLERANCE)


def test_shedding_engages_when_every_site_is_full_and_releases_when_one_is_relieved() -> None:
    on = AvailabilitySettings(shedding=True)
    full = site("a", 8, 1.0, full=True, congested=True)
    full_b = site("b", 8, 1.0, full=True, congested=True)
    waiting = site("b", 8, 1.0, congested=True)  # congested, not full yet, not relieved
    relieved = site("b", 8, 0.5, relieved=True)
    assert shedding.sheds(False, [full, full_b], on)
    assert not shedding.sheds(False, [full, full_b], AvailabilitySettings(shedding=False))
    assert not shedding.sheds(False, [full, waiting], on)
    assert shedding.sheds(True, [full, waiting], on)  # held until a site is relieved
    assert not shedding.sheds(True, [full, relieved], on)
    assert not shedding.sheds(True, [full, site("c", None)], on)  # an unmeasured site takes the overflow
    assert not shedding.sheds(False, [], on)
    assert shedding.retry_after_secs(2_000) == 2 and shedding.retry_after_secs(1) == 1
    assert shedding.retry_after_secs(0) == 1


# ---------------------------------------------------------------------------------------------- prefix

LONG = "You are a helpful assistant. " * 20  # 580 characters: 9 whole blocks


def test_the_canonical_prompt_of_chat_and_completion_requests() -> None:
    chat = {"model": "m", "messages": [{"role": "system", "content": "be brief"},
                                       {"role": "user", "content": [{"type": "text", "text": "hi"},
                                                                    {"type": "image_url"}]}]}
    assert prefix.canonical_prompt(chat) == "system: be brief\nuser: hi"
    assert prefix.canonical_prompt({"prompt": "once upon"}) == "once upon"
    assert prefix.canonical_prompt({"prompt": ["a", "b"]}) == "a\nb"
    assert prefix.canonical_prompt({"input": "x"}) is None
    assert prefix.canonical_prompt([1, 2]) is None


def test_block_keys_stand_for_prefixes_of_one_model() -> None:
    keys = prefix.block_keys("m", LONG)
    assert len(keys) == len(LONG) // prefix.BLOCK_CHARS == 9
    longer = prefix.block_keys("m", LONG[:128] + "something else entirely, " * 8)
    assert longer[:2] == keys[:2] and longer[2] != keys[2]  # the same first 128 characters, then not
    assert prefix.block_keys("other", LONG)[0] != keys[0]
    assert prefix.block_keys("m", "short") == ()


def test_the_index_remembers_the_last_site_and_forgets_the_least_recent() -> None:
    index = prefix.PrefixIndex(max_keys=12)
    keys = prefix.block_keys("m", LONG)
    index.record(keys, ("a", "a-pool"))
    assert index.holder(keys) == (("a", "a-pool"), 1.0)
    index.record(keys[:3], ("b", "b-pool"))
    assert index.holder(keys) == (("a", "a-pool"), 6 / 9)
    index.record(prefix.block_keys("m", "x" * 64 * 6), ("c", "c-pool"))
    assert len(index) == 12  # three of the oldest forgotten
    assert index.holder(prefix.block_keys("m", "y" * 64)) is None


def test_affinity_outcomes() -> None:
    settings = PrefixSettings(threshold=0.8, exploration=0.0)
    index = prefix.PrefixIndex()
    keys = prefix.block_keys("m", LONG)
    index.record(keys, ("b", "b-pool"))
    rng = random.Random(1)
    a, b = site("a", 10, 0.1), site("b", 10, 0.5)
    assert prefix.prefer(index, keys, [a, b], settings, rng) == (b, "hit")
    assert prefix.prefer(index, keys, [a, site("b", 10, 1.0)], settings, rng) == (None, "full")
    assert prefix.prefer(index, keys, [a], settings, rng) == (None, "full")  # the holder is not ready
    fresh = prefix.block_keys("m", "z" * 640)
    assert prefix.prefer(index, fresh, [a, b], settings, rng) == (None, "miss")
    index.record(keys[:7], ("a", "a-pool"))  # b holds 2 of 9, a 7 of 9 < 0.8
    assert prefix.prefer(index, keys, [a, b], settings, rng) == (None, "miss")
    index.record(keys, ("b", "b-pool"))
    explore = PrefixSettings(threshold=0.8, exploration=0.25)
    outcomes = Counter(prefix.prefer(index, keys, [a, b], explore, rng)[1] for _ in range(N))
    assert outcomes["explore"] / N == pytest.approx(0.25, abs=TOLERANCE)
    assert outcomes["hit"] + outcomes["explore"] == N
