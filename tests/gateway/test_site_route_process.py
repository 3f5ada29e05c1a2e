"""The real gateway process with grid_site_route: it polls an mTLS signals endpoint (the one a site's
operator serves) for two sites, routes a model between two echo backends by what they publish, names
the site in x-grid-site, answers 400 and 404 itself, and publishes its series on the admin /metrics."""

from __future__ import annotations

import json
import ssl
import time
from pathlib import Path
from typing import Any

import trustme
from aiohttp import web
from gateway_support import EchoUpstream, client, config_text, metric_value, running_gateway, wait_for

MODEL = "granite"


class Signals:
    """What the two sites publish; site-c starts with no ready endpoint."""

    def __init__(self) -> None:
        self.ready = {"site-b": 1, "site-c": 0}
        self.peer_certs: list[Any] = []

    def handler(self, request: web.Request) -> web.Response:
        self.peer_certs.append(request.transport.get_extra_info("peercert") if request.transport else None)
        stamp = int(time.time() * 1000)
        lines = []
        for site, ready in self.ready.items():
            labels = f'grid_site="{site}",grid_provider="{site}-pool"'
            lines += [f"llm_d_epp_average_running_requests{{{labels}}} 1 {stamp}",
                      f"llm_d_epp_average_queue_size{{{labels}}} 0 {stamp}",
                      f"llm_d_epp_ready_endpoints{{{labels}}} {ready} {stamp}"]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")


def tls_material(tmp_path: Path) -> tuple[ssl.SSLContext, dict[str, str]]:
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.verify_mode = ssl.CERT_REQUIRED
    ca.configure_trust(server)
    ca.issue_cert("site-b.signals", "site-c.signals").configure_cert(server)
    gateway = ca.issue_cert("gateway.site-a")
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    gateway.cert_chain_pems[0].write_to_path(str(tmp_path / "client.pem"))
    gateway.private_key_pem.write_to_path(str(tmp_path / "client.key"))
    return server, {"grid_ca_path": "ca.pem", "client_cert_path": "client.pem", "client_key_path": "client.key"}


def test_routes_by_published_readiness_over_mtls(tmp_path: Path) -> None:
    signals = Signals()
    server_tls, files = tls_material(tmp_path)
    with EchoUpstream("signals", signals.handler, ssl_context=server_tls) as relay, \
            EchoUpstream("b") as b, EchoUpstream("c") as c:
        peers = [{"site": site, "addr": relay.endpoint, "server_name": f"{site}.signals",
                  "authority": f"{site}.signals", "path": "/v1/site/signals", "interval_ms": 100, **files}
                 for site in ("site-b", "site-c")]
        serving = tmp_path / "serving.json"
        serving.write_text(json.dumps({
            "local_site": "site-a", "window_secs": 30, "load_window_ms": 1000,
            "candidates": [{"kind": "inference_model", "name": MODEL, "site": site, "cluster": f"{site}-pool",
                            "fresh": True} for site in ("site-b", "site-c")],
            "peers": peers,
        }))
        config = tmp_path / "praxis.yaml"
        config.write_text(config_text([
            {"filter": "json_body_field", "field": "model", "header": "X-Model"},
            {"filter": "grid_site_route", "model_header": "X-Model"},
            {"filter": "load_balancer", "clusters": [{"name": "site-b-pool", "endpoints": [b.endpoint]},
                                                     {"name": "site-c-pool", "endpoints": [c.endpoint]}]},
        ]))
        with running_gateway(config, env={"GRID_SERVING_CONFIG": str(serving)}) as gateway, client() as http:
            def metric(name: str, **labels: str) -> float | None:
                return metric_value(http.get(gateway.admin_url() + "/metrics").text, name, **labels)

            def post(model: str | None) -> Any:
                body = {"messages": [{"role": "user", "content": "hi"}], **({"model": model} if model else {})}
                return http.post(gateway.url() + "/v1/chat/completions", json=body)

            wait_for(lambda: metric("grid_signals_poll_total", site="site-c", result="ok"), "site-c polled")
            wait_for(lambda: metric("grid_route_site_ceiling", site="site-b", cluster="site-b-pool") == 8,
                     "site-b measured")
            answers = [post(MODEL) for _ in range(20)]
            assert {(r.status_code, r.headers["x-grid-site"], r.headers["x-grid-backend"],
                     r.headers["x-upstream"]) for r in answers} == {(200, "site-b", "site-b-pool", "b")}
            assert signals.peer_certs and all(signals.peer_certs), "the poller presents its client certificate"

            signals.ready["site-c"] = 2
            wait_for(lambda: {post(MODEL).headers.get("x-grid-site") for _ in range(20)} == {"site-b", "site-c"},
                     "both sites chosen once site-c is ready", timeout=5)
            assert (metric("grid_route_selections_total", path="between_two") or 0) > 0

            missing, unknown = post(None), post("no-such-model")
            assert missing.status_code == 400 and missing.json()["error"]["code"] == "model_required"
            assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
            assert "x-grid-site" not in missing.headers
            assert metric("grid_route_decisions_total", site="", cluster="", reason="bad_request") == 2
            assert metric("grid_route_shedding", model=MODEL) == 0
        assert gateway.proc.returncode == 0, gateway.stderr_tail()
        assert "serving config loaded" in gateway.stderr_path.read_text()
