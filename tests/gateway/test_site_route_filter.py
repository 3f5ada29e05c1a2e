"""The filter and its runtime in one process, on a clock the test holds: polls in, snapshot out, and
what requests get (400, 404, 503, 429 with Retry-After, routed with x-grid-site/x-grid-backend), the
gauges and counters, the log lines, and re-reading the serving config."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from gateway_support import metric_value
from multidict import CIMultiDict
from site_route_support import Lines

from reference.gateway.context import Reject, RequestContext
from reference.gateway.filters.grid_site_route import GridSiteRouteFilter
from reference.gateway.metrics import GatewayMetrics
from reference.gateway.site_route.runtime import SiteRouteRuntime
from reference.gateway.site_route.serving_config import ServingPeer, load_serving
from reference.gateway.site_route.settings import AvailabilitySettings, GridSiteRouteConfig, PrefixSettings

PEER = {"server_name": "x.signals", "interval_ms": 100, "grid_ca_path": "ca.pem",
        "client_cert_path": "client.pem", "client_key_path": "client.key"}


def serving_doc(*extra_candidates: dict[str, Any]) -> dict[str, Any]:
    def cand(name: str, site: str, **more: Any) -> dict[str, Any]:
        return {"kind": "inference_model", "name": name, "site": site, "cluster": f"{site}-pool", **more}

    return {
        "local_site": "site-a", "window_secs": 30, "load_window_ms": 5_000,
        "candidates": [cand("m", "site-a"), cand("m", "site-b"), cand("m", "site-c", admission="excluded"),
                       cand("n", "site-c", admission="excluded"), *extra_candidates],
        "peers": [{"site": "site-a", "addr": "127.0.0.1:1", **PEER}, {"site": "site-b", "addr": "127.0.0.1:2", **PEER}],
    }


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Rig:
    def __init__(self, tmp_path: Path, availability: AvailabilitySettings | None = None,
                 prefix: PrefixSettings | None = None) -> None:
        self.path = tmp_path / "serving.json"
        self.path.write_text(json.dumps(serving_doc()))
        self.clock = Clock()
        self.metrics = GatewayMetrics()
        config = GridSiteRouteConfig(availability=availability or AvailabilitySettings(), prefix=prefix)
        serving = load_serving(self.path)
        declared = frozenset({"site-a-pool", "site-b-pool", "site-c-pool"})
        self.runtime = SiteRouteRuntime(config, self.path, self.path.read_bytes(), serving, declared,
                                        self.metrics.site_route(), clock=self.clock)
        self.filter = GridSiteRouteFilter(config, self.runtime, random.Random(3))

    def peer(self, site: str) -> ServingPeer:
        return next(p for p in self.runtime.serving.peers if p.site == site)

    def publish(self, site: str, running: float, waiting: float = 0.0, ready: float = 1.0, advance: float = 0.1,
                cluster: str | None = None) -> None:
        self.clock.now += advance
        stamp = int(self.clock.now * 1000)
        labels = f'grid_site="{site}",grid_provider="{cluster or site + "-pool"}"'
        text = "".join(f"{name}{{{labels}}} {value} {stamp}\n" for name, value in [
            ("llm_d_epp_average_running_requests", running), ("llm_d_epp_average_queue_size", waiting),
            ("llm_d_epp_ready_endpoints", ready)])
        self.runtime.on_poll(self.peer(site), "ok", text, None)

    def request(self, model: str | None, body: Any = None) -> tuple[RequestContext, Reject | None]:
        headers: CIMultiDict[str] = CIMultiDict()
        if model is not None:
            headers["X-Model"] = model
        raw = json.dumps(body).encode() if body is not None else b""
        ctx = RequestContext("POST", "/v1/chat/completions", "/v1/chat/completions", headers, raw)
        return ctx, self.filter.on_request(ctx)

    def metric(self, name: str, **labels: str) -> float | None:
        return metric_value(self.metrics.render().decode(), name, **labels)


def error_of(rejection: Reject | None) -> dict[str, Any]:
    assert rejection is not None and rejection.content_type == "application/json"
    return json.loads(rejection.body)["error"]  # type: ignore[no-any-return]


def test_refusals_name_their_cause_openai_style(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    _, rejection = rig.request(None)
    assert rejection is not None and rejection.status == 400 and error_of(rejection)["code"] == "model_required"
    _, rejection = rig.request("   ")
    assert rejection is not None and rejection.status == 400
    _, rejection = rig.request("unknown")
    assert rejection is not None and rejection.status == 404 and error_of(rejection)["code"] == "model_not_found"
    _, rejection = rig.request("n")  # only an excluded candidate: known, nowhere ready
    assert rejection is not None and rejection.status == 503 and dict(rejection.headers) == {"Retry-After": "1"}
    rig.publish("site-a", running=0, ready=0)
    rig.publish("site-b", running=0, ready=0)
    _, rejection = rig.request("m")  # both admitted sites report no ready endpoint
    assert rejection is not None and rejection.status == 503
    assert rig.metric("grid_route_decisions_total", site="", cluster="", reason="bad_request") == 3
    assert rig.metric("grid_route_decisions_total", site="", cluster="", reason="not_ready") == 2


def test_routed_requests_name_site_and_backend_and_follow_availability(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    ctx, rejection = rig.request("m")  # nothing measured yet: by capacity over the two admitted sites
    assert rejection is None and ctx.cluster in ("site-a-pool", "site-b-pool")
    assert dict(ctx.response_headers) == {"x-grid-site": ctx.cluster.removesuffix("-pool"),
                                          "x-grid-backend": ctx.cluster}
    assert rig.metric("grid_route_selections_total", path="by_capacity") == 1
    assert rig.metric("grid_route_site_rho", site="site-a", cluster="site-a-pool") != \
        rig.metric("grid_route_site_rho", site="site-a", cluster="site-a-pool")  # NaN while unmeasured
    rig.publish("site-a", running=2)
    rig.publish("site-b", running=0, ready=0)  # unready: never chosen
    before = rig.metric("grid_route_decisions_total", site="site-a", cluster="site-a-pool", reason="routed") or 0
    for _ in range(50):
        ctx, rejection = rig.request("m")
        assert rejection is None and ctx.cluster == "site-a-pool"
    assert rig.metric("grid_route_selections_total", path="lone") == 50
    assert rig.metric("grid_route_decisions_total", site="site-a", cluster="site-a-pool", reason="routed") == \
        before + 50
    assert rig.metric("grid_route_site_ceiling", site="site-a", cluster="site-a-pool") == 8
    assert rig.metric("grid_route_site_rho", site="site-a", cluster="site-a-pool") == 0.25
    assert rig.metric("grid_route_site_weight", site="site-a", cluster="site-a-pool") == 8
    rig.publish("site-b", running=1)
    seen = {rig.request("m")[0].cluster for _ in range(100)}
    assert seen == {"site-a-pool", "site-b-pool"}
    assert rig.metric("grid_route_selections_total", path="between_two") == 100
    assert rig.metric("grid_signals_poll_total", site="site-a", result="ok") == 1


def test_an_earlier_cluster_choice_is_kept(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    ctx = RequestContext("GET", "/health", "/health", CIMultiDict(), b"")
    ctx.cluster = "management"
    assert rig.filter.on_request(ctx) is None and ctx.cluster == "management" and not ctx.response_headers


def test_shedding_answers_429_until_a_site_is_relieved(tmp_path: Path) -> None:
    rig = Rig(tmp_path, AvailabilitySettings(shedding=True, full_after_ms=1_000, room_after_ms=500, smoothing=1.0))
    with Lines("agn.gateway.site_route") as lines:
        for site in ("site-a", "site-b"):
            rig.publish(site, running=8)  # teaches a ceiling of 8
        for _ in range(12):  # 1.2 s at the ceiling with four waiting, on both sites
            rig.publish("site-a", running=8, waiting=4, advance=0.05)
            rig.publish("site-b", running=8, waiting=4, advance=0.05)
        assert rig.metric("grid_route_shedding", model="m") == 1
        _, rejection = rig.request("m")
        assert rejection is not None and rejection.status == 429
        assert dict(rejection.headers) == {"Retry-After": "1"}  # room_after_ms 500 -> 1 s at least
        assert error_of(rejection)["code"] == "capacity_exhausted"
        rig.publish("site-b", running=8, waiting=0)  # the queue emptied: relieved, at its ceiling still
        ctx, rejection = rig.request("m")
        assert rejection is None and ctx.metadata["grid_site_route.path"] == "by_capacity"
        rig.publish("site-b", running=4)
        ctx, rejection = rig.request("m")
        assert rejection is None and ctx.cluster == "site-b-pool"  # the only site with room
    assert rig.metric("grid_route_shedding", model="m") == 0
    assert rig.metric("grid_route_decisions_total", site="", cluster="", reason="shed") == 1
    assert [m.split(" ")[0:2] for m in lines.messages if m.startswith("shedding")] == [
        ["shedding", "engaged"], ["shedding", "released"]]


def test_shedding_off_never_answers_429(tmp_path: Path) -> None:
    rig = Rig(tmp_path, AvailabilitySettings(full_after_ms=0, smoothing=1.0))
    for site in ("site-a", "site-b"):
        rig.publish(site, running=8)
        rig.publish(site, running=8, waiting=4)
    assert all(rig.request("m")[1] is None for _ in range(20))
    assert rig.metric("grid_route_selections_total", path="by_capacity") == 20
    assert rig.metric("grid_route_shedding", model="m") == 0


def test_poll_failures_are_logged_once_per_change_and_counted_every_time(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    with Lines("agn.gateway.site_route") as lines:
        for _ in range(3):
            rig.runtime.on_poll(rig.peer("site-a"), "connect_error", None, "connection refused")
        rig.runtime.on_poll(rig.peer("site-a"), "timeout", None, "no answer")
        rig.runtime.on_poll(rig.peer("site-a"), "ok", "not prometheus {", None)
        rig.publish("site-a", running=1)
        rig.publish("site-a", running=1)
    failing = [m for m in lines.messages if m.startswith("signals poll")]
    assert [m.split(" ")[2] for m in failing] == ["failing", "failing", "failing", "recovered"]
    assert rig.metric("grid_signals_poll_total", site="site-a", result="connect_error") == 3
    assert rig.metric("grid_signals_poll_total", site="site-a", result="parse_error") == 1
    assert rig.metric("grid_signals_poll_total", site="site-a", result="ok") == 2


def test_prefix_affinity_keeps_a_prompt_where_its_prefix_went(tmp_path: Path) -> None:
    rig = Rig(tmp_path, prefix=PrefixSettings(threshold=0.8, exploration=0.0))
    rig.publish("site-a", running=1)
    rig.publish("site-b", running=1)
    body = {"model": "m", "messages": [{"role": "user", "content": "tell me about the sea " * 20}]}
    first, _ = rig.request("m", body)
    for _ in range(20):
        ctx, rejection = rig.request("m", body)
        assert rejection is None and ctx.cluster == first.cluster
    assert rig.metric("grid_route_prefix_affinity_total", outcome="miss") == 1
    assert rig.metric("grid_route_prefix_affinity_total", outcome="hit") == 20
    rig.request("m", {"model": "m", "prompt": "short"})  # no whole block: no affinity decision
    assert rig.metric("grid_route_prefix_affinity_total", outcome="miss") == 1


def test_the_serving_config_is_re_read_and_a_bad_rewrite_keeps_the_last_good(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    with Lines("agn.gateway.site_route") as lines:
        assert rig.runtime.watcher.check() == "unchanged"
        rig.path.write_text('{"local_site": "site-a", "candidates": [{"kind": "inference_model"}]}')
        assert rig.runtime.watcher.check() == "rejected"
        assert rig.request("m")[1] is None  # still serving the last good config
        rig.path.write_text(json.dumps(serving_doc({"kind": "inference_model", "name": "o", "site": "site-a",
                                                    "cluster": "site-a-pool"})))
        assert rig.runtime.watcher.check() == "loaded"
        assert rig.request("o")[0].cluster == "site-a-pool"
        rig.path.unlink()
        assert rig.runtime.watcher.check() == "rejected"
        assert rig.runtime.watcher.check() == "unchanged"  # a missing file is reported once
    assert any("serving config rejected" in m and "candidates[0].name" in m for m in lines.messages)
    assert any("serving config loaded" in m and "candidates=5" in m for m in lines.messages)


def test_needs_body_only_with_prefix_affinity(tmp_path: Path) -> None:
    assert not Rig(tmp_path).filter.needs_body
    assert Rig(tmp_path, prefix=PrefixSettings()).filter.needs_body
