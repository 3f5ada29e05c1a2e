"""Prefix affinity: grid_site_route prefers the site holding a request's prompt, where the prefix cache that
would serve it lives. The sites publish 0 running (room everywhere, however much the test sends), so only
the prompt decides.
"""

from __future__ import annotations

from collections import Counter

import pytest

from harness.serving.grid import ServingGrid
from harness.serving.judge import assert_at_least, plan_at_least
from harness.serving.load import distinct_prompt, long_prompt
from harness.timeline import record_action

SPEC = "routing architecture and overlay contract, KV-cache affinity: \"The grid gateway's grid_site_route filter " \
       "prefers the site holding a request's prompt\""
#: The repeated prompt keeps to its site for at least 90% of the sample (the public gateway explores with
#: 2% of such requests), judged against a gateway without affinity (a third: three sites with equal room).
KEPT = plan_at_least("held", 0.9, 1.0 / 3.0)
#: Distinct prompts of the twin, and the most of them one site may serve: a correct gateway sends a third to
#: each site, so one site serving more than 80% of 60 has probability below 1e-13.
SPREAD_N = 60
SPREAD_MAX = 0.8


@pytest.mark.conformance(id="SERV-PREFIX-AFFINITY", profile="serving", level="core", feature="prefixAffinity",
                         spec=SPEC, statements=["OC-KVAFFINITY-GRID-SITE-ROUTE-PREFIX"])
def test_a_repeated_prompt_keeps_to_the_site_holding_it(three: ServingGrid, model: str) -> None:
    """Three sites with equal room. One long prompt (several kilobytes) is sent again and again, one request
    at a time: each goes to the site the one before it went to (the site holding the prompt), except the
    gateway's occasional exploration, after which the prompt is held where it went. Of the planned sample at
    least the threshold keep to their predecessor's site (false failure <= 1e-6 for a gateway keeping 90% of
    them, power >= 0.99 against one that picks a site regardless of the prompt, a third). The twin: 60
    distinct prompts of the same length spread over the sites, none serving more than 80% of them (a third
    each for a correct gateway, so that fails with probability below 1e-13)."""
    for site in three.names:
        three.publish(site, running=0, waiting=0)
    gateway = three.start_gateway(model, availability={}, prefix_affinity={})
    gateway.wait_measured()
    prompt = long_prompt(f"{model}/conversation")
    first = gateway.request(prompt=prompt)
    assert first.status == 200 and first.headers.get("x-agn-site") in three.names, first.describe()
    record_action(f"the prompt went to {first.headers.get('x-agn-site')}; {KEPT.describe()}")
    again = gateway.send(KEPT.sample_size, concurrency=1, prompt=lambda _i: prompt)
    assert again.statuses() == {200: KEPT.sample_size}, again.describe()
    sites = [first.headers.get("x-agn-site"), *(shot.site for shot in again.shots)]
    kept = sum(1 for before, now in zip(sites, sites[1:], strict=False) if now == before)
    assert_at_least({"held": kept, "elsewhere": KEPT.sample_size - kept}, KEPT,
                    what=f"the repeated prompt where it went before (in order: {sites})")
    words = len(prompt.split())
    tag = distinct_prompt(f"{model}/distinct")
    spread = gateway.send(SPREAD_N, concurrency=4, prompt=lambda i: long_prompt(f"{tag(i)[:16]}", words=words - 1))
    assert spread.statuses() == {200: SPREAD_N}, spread.describe()
    counts: Counter[str] = spread.by_site()
    top, most = counts.most_common(1)[0]
    assert most <= SPREAD_MAX * SPREAD_N, f"distinct prompts spread over the sites: {spread.describe()}"
    assert len(counts) >= 2, f"distinct prompts reach more than {top}: {spread.describe()}"
