"""The serving profile's harness side, without a grid: the configs it renders for a grid gateway, the routing
metrics it reads, its one-sided judgements and their error rates, and the prompts it sends."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from scipy.stats import binom

from harness.pki import ClientFiles
from harness.serving.config import ENV, SIGNALS_PATH, PeerSite, render_praxis_config, serving_config
from harness.serving.judge import (
    absence_sample_size,
    assert_absent,
    assert_at_least,
    plan_at_least,
)
from harness.serving.load import distinct_prompt, long_prompt
from harness.serving.metrics import parse_route_metrics, selections_since

SITES = [PeerSite("site-a", "site-a-pool", "127.0.0.1:18000", "127.0.0.1:19443", "site-a.signals"),
         PeerSite("site-b", "site-b-pool", "127.0.0.2:18000", "127.0.0.2:19443", "site-b.signals")]
CLIENT = ClientFiles("gw", Path("/pki/gw.crt"), Path("/pki/gw.key"), "d" * 64, "ai-grid", 1, Path("/pki/ca.pem"))


def test_the_praxis_config_promotes_the_model_routes_by_site_and_balances_per_site() -> None:
    config = yaml.safe_load(render_praxis_config(listen="127.0.0.1:1", admin="127.0.0.1:2", sites=SITES,
                                                 availability={"shedding": True}, prefix_affinity={}))
    filters = config["filter_chains"][0]["filters"]
    assert [f["filter"] for f in filters] == ["json_body_field", "grid_site_route", "load_balancer"]
    assert filters[1] == {"filter": "grid_site_route", "model_header": "X-Model", "availability": {"shedding": True},
                          "prefix_affinity": {}}
    assert filters[2]["clusters"] == [{"name": "site-a-pool", "endpoints": ["127.0.0.1:18000"]},
                                      {"name": "site-b-pool", "endpoints": ["127.0.0.2:18000"]}]
    bare = yaml.safe_load(render_praxis_config(listen="l:1", admin="a:2", sites=SITES))
    assert set(bare["filter_chains"][0]["filters"][1]) == {"filter", "model_header"}, "None leaves a block out"


def test_the_serving_config_has_a_candidate_per_model_and_site_and_a_peer_per_site() -> None:
    doc = serving_config(local_site="site-a", models={"m1": ["site-a", "site-b"], "m2": ["site-b"]}, sites=SITES,
                         ca_path=Path("/pki/ca.pem"), client=CLIENT, interval_ms={"site-a": 100, "site-b": 400})
    assert [(c["name"], c["site"], c["cluster"]) for c in doc["candidates"]] == [
        ("m1", "site-a", "site-a-pool"), ("m1", "site-b", "site-b-pool"), ("m2", "site-b", "site-b-pool")]
    assert all(c["kind"] == "inference_model" and c["fresh"] is True for c in doc["candidates"])
    peer = doc["peers"][1]
    assert (peer["site"], peer["addr"], peer["server_name"], peer["authority"], peer["path"], peer["interval_ms"]) == (
        "site-b", "127.0.0.2:19443", "site-b.signals", "site-b.signals", SIGNALS_PATH, 400)
    assert (peer["grid_ca_path"], peer["client_cert_path"], peer["client_key_path"]) == (
        "/pki/ca.pem", "/pki/gw.crt", "/pki/gw.key")
    assert doc["local_site"] == "site-a" and ENV == "GRID_SERVING_CONFIG"
    with pytest.raises(ValueError, match="site-c"):
        serving_config(local_site="site-a", models={"m1": ["site-c"]}, sites=SITES, ca_path=Path("/ca"),
                       client=CLIENT)


METRICS = """\
# HELP grid_route_site_ceiling learned ceiling
# TYPE grid_route_site_ceiling gauge
grid_route_site_ceiling{site="site-a",cluster="site-a-pool"} 12.0
grid_route_site_ceiling{site="site-b",cluster="site-b-pool"} NaN
# TYPE grid_route_site_rho gauge
grid_route_site_rho{site="site-a",cluster="site-a-pool"} 0.5
grid_route_site_rho{site="site-b",cluster="site-b-pool"} NaN
# TYPE grid_route_selections_total counter
grid_route_selections_total{path="two_choices"} 7.0
grid_route_selections_total{path="by_capacity"} 1.0
# TYPE grid_route_shedding gauge
grid_route_shedding{model="m1"} 1.0
# TYPE other_metric gauge
other_metric 3.0
"""


def test_the_routing_metrics_are_read_by_site_path_and_model() -> None:
    metrics = parse_route_metrics(METRICS)
    assert metrics.ceiling["site-a"] == 12.0 and math.isnan(metrics.ceiling["site-b"])
    assert metrics.measured("site-a") and not metrics.measured("site-b") and not metrics.measured("site-c")
    assert metrics.selections == {"two_choices": 7.0, "by_capacity": 1.0}
    assert metrics.shedding == {"m1": 1.0}
    assert metrics.labels["grid_route_site_rho"] == ({"site": "site-a", "cluster": "site-a-pool"},
                                                     {"site": "site-b", "cluster": "site-b-pool"})
    later = parse_route_metrics(METRICS.replace('"two_choices"} 7.0', '"two_choices"} 10.0'))
    assert selections_since(metrics, later) == {"two_choices": 3, "by_capacity": 0}
    assert "site-a: ceiling=12" in metrics.describe(("site-a",))


@pytest.mark.parametrize(("share", "alternative"), [(0.58, 0.5), (0.2, 1 / 9), (0.9, 1 / 3)])
def test_an_at_least_plan_keeps_its_stated_error_rates(share: float, alternative: float) -> None:
    plan = plan_at_least("x", share, alternative)
    n, t = plan.sample_size, plan.threshold
    assert binom.cdf(t - 1, n, share) <= 1e-6 and binom.cdf(t - 1, n, alternative) >= 0.99
    assert plan.false_failure == pytest.approx(binom.cdf(t - 1, n, share))
    assert plan_at_least("x", share, alternative) == plan, "a plan is a function of its error rates"


def test_an_at_least_judgement_passes_at_the_threshold_and_fails_below_it() -> None:
    plan = plan_at_least("x", 0.9, 1 / 3)
    assert_at_least({"x": plan.threshold, "y": plan.sample_size - plan.threshold}, plan, what="w")
    with pytest.raises(AssertionError, match="fewer than"):
        assert_at_least({"x": plan.threshold - 1, "y": plan.sample_size - plan.threshold + 1}, plan, what="w")
    with pytest.raises(ValueError, match="add up"):
        assert_at_least({"x": plan.sample_size}, plan_at_least("x", 0.58, 0.5), what="w")
    with pytest.raises(ValueError):
        plan_at_least("x", 0.5, 0.6)


def test_an_absence_sample_catches_the_alternative_share() -> None:
    n = absence_sample_size(0.2, miss=1e-6)
    assert 0.8 ** n <= 1e-6 < 0.8 ** (n - 1)
    assert_absent({"a": 10, "c": 0}, "c", alternative=0.2, miss=1e-6, what="w")
    with pytest.raises(AssertionError, match="must get none"):
        assert_absent({"a": 9, "c": 1}, "c", alternative=0.2, miss=1e-6, what="w")


def test_distinct_prompts_share_no_block_and_a_long_prompt_repeats() -> None:
    prompt = distinct_prompt("t")
    assert len({prompt(i)[:64] for i in range(1000)}) == 1000, "every prompt differs within its first 64 characters"
    assert distinct_prompt("u")(0) != prompt(0)
    text = long_prompt("t")
    assert text == long_prompt("t") and len(text) > 3000 and long_prompt("v")[:8] != text[:8]
