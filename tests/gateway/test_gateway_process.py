"""The real `agn-gateway` process in front of real upstreams on 127.0.0.1."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
from aiohttp import web
from gateway_support import (
    REPO,
    SCOPE,
    EchoUpstream,
    GatewayProcess,
    ProjectedDir,
    candidate,
    client,
    config_text,
    envelope,
    metric_value,
    revision_of,
    running_gateway,
    wait_for,
)

MODEL_A = "granite-a"
MODEL_B = "granite-b"


def overlay_filters(overlay_file: Path, a: Any, b: Any, **route: Any) -> list[dict[str, Any]]:
    return [
        {"filter": "json_body_field", "field": "model", "header": "X-Model"},
        {
            "filter": "intelligent_route",
            "overlay_file": str(overlay_file),
            "model_header": "X-Model",
            "reload": {"enabled": True, "debounce_ms": 100},
            "expected_overlay_scope": dict(SCOPE),
            "clusters": ["cluster-a", "cluster-b"],
            "provider_hop_clusters": ["cluster-b"],
            "session_affinity": {"enabled": True, "header": "x-session-id", "ttl_secs": 60},
            **route,
        },
        {
            "filter": "load_balancer",
            "clusters": [
                {"name": "cluster-a", "endpoints": [a.endpoint]},
                {"name": "cluster-b", "endpoints": [b.endpoint]},
            ],
        },
    ]


def write_config(tmp_path: Path, filters: list[dict[str, Any]], **top: Any) -> Path:
    path = tmp_path / "praxis.yaml"
    path.write_text(config_text(filters, **top))
    return path


def post(http: httpx.Client, url: str, model: str | None, **kwargs: Any) -> httpx.Response:
    body = {"model": model, "messages": []} if model is not None else {"messages": []}
    return http.post(url + "/v1/chat/completions", json=body, **kwargs)


def served_by(response: httpx.Response) -> str | None:
    return response.headers.get("x-upstream")


def test_routing_errors_admin_and_clean_shutdown(tmp_path: Path) -> None:
    projected = ProjectedDir(tmp_path / "routing")
    data = envelope(
        [
            candidate(MODEL_A, "site-a", "cluster-a"),
            candidate(MODEL_B, "site-b", "cluster-b", stable_id="cand-b"),
        ]
    )
    projected.publish(data)
    with EchoUpstream("A") as a, EchoUpstream("B") as b:
        gateway = GatewayProcess(write_config(tmp_path, overlay_filters(projected.path, a, b)))
        try:
            gateway.wait_started()
            url = gateway.url()
            with client() as http:
                assert http.get(gateway.admin_url() + "/ready").json() == {"status": "ok"}
                assert http.get(gateway.admin_url() + "/healthy").json() == {"status": "ok"}
                assert http.get(gateway.admin_url() + "/nope").status_code == 404

                reply = post(http, url + "", MODEL_A, headers={"x-ai-routing-candidate": "spoofed"})
                assert reply.status_code == 200 and served_by(reply) == "A"
                seen_a = reply.json()["headers"]
                assert not any(name.startswith("x-ai-routing-") for name in seen_a), seen_a
                assert seen_a["x-model"] == MODEL_A and seen_a["host"] == a.endpoint

                reply = http.post(
                    url + "/v1/chat/completions?stream=false",
                    json={"model": MODEL_B},
                    headers={
                        "X-Model": "client-choice",
                        "x-ai-routing-revision": "f" * 64,
                        "Connection": "x-drop",
                        "x-drop": "1",
                        "Authorization": "Bearer client-token",
                    },
                )
                assert served_by(reply) == "B"
                seen_b = reply.json()
                assert seen_b["path_qs"] == "/v1/chat/completions?stream=false"
                assert seen_b["headers"]["x-ai-routing-candidate"] == "cand-b"
                assert seen_b["headers"]["x-ai-routing-revision"] == revision_of(data)
                assert len(seen_b["headers"]["x-ai-routing-request-id"]) == 32
                assert "x-drop" not in seen_b["headers"], "headers named by Connection are hop-by-hop"
                assert seen_b["headers"]["x-model"] == MODEL_B

                invalid = post(http, url, "   ")
                assert invalid.status_code == 400 and 0 < len(invalid.content) <= 128
                unknown = post(http, url, "no-such-model")
                assert unknown.status_code == 404 and 0 < len(unknown.content) <= 128
                missing = post(http, url, None)
                assert missing.status_code == 404 and missing.text == "no route\n"

                text = http.get(gateway.admin_url() + "/metrics").text
                name = "praxis_ai_intelligent_route_decisions_total"
                assert metric_value(text, name, outcome="routed", kind="inference_model") == 2
                assert metric_value(text, name, outcome="no_candidate", kind="inference_model") == 1
                assert metric_value(text, name, outcome="skipped", kind="none") == 1
                assert metric_value(text, "praxis_ai_intelligent_route_snapshot_candidates") == 2
                assert (
                    metric_value(
                        text, "praxis_ai_intelligent_route_snapshot_reloads_total", result="accepted"
                    )
                    == 0
                )
                assert "_created" not in text
            assert gateway.terminate() == 0
            log = gateway.stderr_tail()
            assert "startup" in log and "shutdown" in log
            assert "client-token" not in log and "messages" not in log
        finally:
            gateway.stop()


def test_hot_reload_by_symlink_swap_and_last_known_good(tmp_path: Path) -> None:
    projected = ProjectedDir(tmp_path / "routing")
    projected.publish(envelope([candidate(MODEL_A, "site-a", "cluster-a")]))
    with EchoUpstream("A") as a, EchoUpstream("B") as b, client() as http:
        config = write_config(tmp_path, overlay_filters(projected.path, a, b))
        with running_gateway(config) as gateway:
            url, admin = gateway.url(), gateway.admin_url()
            assert served_by(post(http, url, MODEL_A)) == "A"
            second = envelope([candidate(MODEL_A, "site-b", "cluster-b")])
            projected.publish(second)
            wait_for(lambda: served_by(post(http, url, MODEL_A)) == "B", "the new overlay to serve")
            assert post(http, url, MODEL_A).json()["headers"]["x-ai-routing-revision"] == revision_of(second)

            def reloads(result: str) -> float:
                text = http.get(admin + "/metrics").text
                return (
                    metric_value(text, "praxis_ai_intelligent_route_snapshot_reloads_total", result=result)
                    or 0
                )

            assert reloads("accepted") == 1
            projected.publish(b'{"schema_version": "1.0.0"}')
            wait_for(lambda: reloads("rejected") == 1, "the invalid overlay to be rejected")
            assert served_by(post(http, url, MODEL_A)) == "B", "the last known good snapshot keeps serving"
            assert "overlay reload rejected" in gateway.stderr_tail()
            assert http.get(admin + "/ready").status_code == 200


def test_bad_configs_exit_2_with_one_clear_line(tmp_path: Path) -> None:
    projected = ProjectedDir(tmp_path / "routing")
    projected.publish(
        envelope([candidate(MODEL_A, "site-a", "cluster-a")], scope={**SCOPE, "gateway": "other"})
    )
    never = SimpleNamespace(endpoint="127.0.0.1:1")  # startup fails before any upstream is contacted
    cases = [
        (
            overlay_filters(projected.path, never, never, reload={"debounce_ms": 70000}),
            "config error: filter_chains[0].filters[1].reload.debounce_ms: must be an integer 0..60000",
        ),
        (
            overlay_filters(projected.path, never, never),
            "config error: filter_chains[0].filters[1].overlay_file: overlay rejected (scope_mismatch)",
        ),
        (
            overlay_filters(tmp_path / "missing" / "routing-overlay.json", never, never),
            "config error: filter_chains[0].filters[1].overlay_file: cannot read overlay",
        ),
    ]
    for filters, expected in cases:
        path = write_config(tmp_path, filters)
        done = subprocess.run(
            [sys.executable, "-m", "reference.gateway.cli", "-c", str(path)],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=str(REPO),
            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        )
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(expected), done.stderr
        assert done.stdout == ""


def test_upstream_failures_map_to_502_504_503_and_413(tmp_path: Path) -> None:
    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(2)
        return web.Response(text="late")

    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{sock.getsockname()[1]}"
    candidates = [
        {"kind": "inference_model", "name": "dead", "site": "s", "cluster": "dead"},
        {"kind": "inference_model", "name": "slow", "site": "s", "cluster": "slow"},
        {"kind": "inference_model", "name": "empty", "site": "s", "cluster": "empty"},
    ]
    with EchoUpstream("slow", handler=slow) as slow_upstream, client() as http:
        filters: list[dict[str, Any]] = [
            {"filter": "json_body_field", "field": "model", "header": "X-Model"},
            {"filter": "intelligent_route", "local_site": "s", "candidates": candidates},
            {
                "filter": "load_balancer",
                "clusters": [
                    {"name": "dead", "endpoints": [dead]},
                    {"name": "slow", "endpoints": [slow_upstream.endpoint], "read_timeout_ms": 200},
                    {"name": "empty", "endpoints": []},
                ],
            },
        ]
        config = write_config(tmp_path, filters, body_limits={"max_request_bytes": 4096})
        with running_gateway(config) as gateway:
            url = gateway.url()
            assert post(http, url, "dead").status_code == 502
            assert post(http, url, "slow").status_code == 504
            assert post(http, url, "empty").status_code == 503
            big = http.post(
                url + "/v1/chat/completions", content=b'{"model": "slow", "x": "' + b"y" * 8192 + b'"}'
            )
            assert big.status_code == 413
            assert http.get(gateway.admin_url() + "/healthy").status_code == 200
            log = gateway.stderr_tail()
            assert "upstream timeout" in log and "upstream error" in log


def test_sigterm_lets_in_flight_requests_finish(tmp_path: Path) -> None:
    release = threading.Event()

    async def held(request: web.Request) -> web.Response:
        while not release.is_set():
            await asyncio.sleep(0.01)
        return web.Response(text="finished")

    with EchoUpstream("held", handler=held) as upstream, client() as http:
        filters: list[dict[str, Any]] = [
            {
                "filter": "intelligent_route",
                "local_site": "s",
                "candidates": [{"kind": "inference_model", "name": "m", "site": "s", "cluster": "c"}],
            },
            {"filter": "load_balancer", "clusters": [{"name": "c", "endpoints": [upstream.endpoint]}]},
        ]
        gateway = GatewayProcess(write_config(tmp_path, filters))
        try:
            gateway.wait_started()
            result: dict[str, Any] = {}

            def call() -> None:
                result["reply"] = http.post(gateway.url() + "/v1/x", headers={"X-Model": "m"}, content=b"{}")

            worker = threading.Thread(target=call)
            worker.start()
            wait_for(lambda: upstream.requests, "the request to reach the upstream")
            gateway.proc.send_signal(15)
            wait_for(lambda: "shutdown" in gateway.stderr_tail(), "the gateway to begin shutting down")
            release.set()
            worker.join(10)
            assert result["reply"].status_code == 200 and result["reply"].text == "finished"
            assert gateway.proc.wait(10) == 0
        finally:
            release.set()
            gateway.stop()
