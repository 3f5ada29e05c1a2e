"""Tests for the fake provider backend: the in-process server over real loopback HTTP, and the real
`agn-fake-backend` command as a child process (startup line, ready file, SIGTERM, bad configs)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import selectors
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
from prometheus_client.parser import text_string_to_metric_families

from harness.fakes import FakeBackend, RunningServer, RuntimeConfig, default_metrics, mtls_context, running
from harness.fakes.cli import main as cli_main
from harness.fakes.server import MAX_BODY_BYTES
from harness.pki import ClientFiles, GridPKI, client_context

REPO = Path(__file__).resolve().parents[1]
STARTUP_DEADLINE = 20.0

Scenario = Callable[[RunningServer, httpx.AsyncClient], Awaitable[None]]


def run(scenario: Scenario, backend: FakeBackend | None = None) -> None:
    """Serve a backend on 127.0.0.1:0 for one scenario; the port is released whatever happens."""

    async def body() -> None:
        fake = backend or FakeBackend("east-1", "east")
        async with (
            running(fake, "127.0.0.1", 0) as server,
            httpx.AsyncClient(base_url=server.base_url, timeout=10.0) as client,
        ):
            await scenario(server, client)

    asyncio.run(body())


def assert_identity(response: httpx.Response, name: str = "east-1", site: str = "east") -> None:
    assert response.headers.get("x-agn-backend") == name, dict(response.headers)
    assert response.headers.get("x-agn-site") == site, dict(response.headers)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample on a /metrics page, keyed by name and sorted labels."""
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def families(text: str) -> dict[str, str]:
    return {family.name: family.type for family in text_string_to_metric_families(text)}


# ------------------------------------------------------------------------------------------ model API


def test_chat_completion_echoes_request_and_identity() -> None:
    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        headers = [("X-Trace", "one"), ("x-trace", "two"), ("Authorization", "Bearer t0k")]
        body = json.dumps({"model": "llama-70b", "messages": [{"role": "user", "content": "hi"}]})
        response = await client.post("/v1/chat/completions?tenant=a&x=1", content=body, headers=headers)
        assert response.status_code == 200
        assert_identity(response)
        answer = response.json()
        assert answer["object"] == "chat.completion"
        assert answer["model"] == "llama-70b"
        assert answer["id"] and isinstance(answer["created"], int)
        assert "east-1" in answer["choices"][0]["message"]["content"]
        agn = answer["agn"]
        assert (agn["backend"], agn["site"]) == ("east-1", "east")
        request = agn["request"]
        assert request["method"] == "POST"
        assert request["path"] == "/v1/chat/completions"
        assert request["query"] == "tenant=a&x=1"
        assert request["body_bytes"] == len(body.encode())
        assert request["headers"]["x-trace"] == "one, two"
        assert request["headers"]["authorization"] == "Bearer t0k"
        assert request["headers"]["host"] == server.address
        assert all(name == name.lower() for name in request["headers"])

    run(scenario)


def test_completion_accepts_non_json_body() -> None:
    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        raw = bytes(range(256)) * 3
        response = await client.post("/v1/completions", content=raw)
        assert response.status_code == 200
        assert_identity(response)
        answer = response.json()
        assert answer["object"] == "text_completion"
        assert "model" not in answer
        assert "east-1" in answer["choices"][0]["text"]
        assert answer["agn"]["request"]["body_bytes"] == len(raw)

    run(scenario)


def test_other_paths_and_methods_echo_without_counting() -> None:
    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        for method, path in [("GET", "/"), ("GET", "/healthz"), ("DELETE", "/v1/files/7"), ("PUT", "/x/y"),
                             ("GET", "/v1/chat/completions")]:
            response = await client.request(method, path + "?q=1")
            assert response.status_code == 200, (method, path, response.text)
            assert_identity(response)
            echo = response.json()["agn"]["request"]
            assert (echo["method"], echo["path"], echo["query"]) == (method, path, "q=1")
        head = await client.head("/anything")
        assert head.status_code == 200
        assert_identity(head)
        stats = await client.get("/admin/stats")
        assert stats.json() == {"requests": 0, "metrics_requests": 0, "mcp_requests": 0}

    run(scenario)


def test_models_list_follows_config() -> None:
    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        response = await client.get("/v1/models", headers={"x-probe": "p"})
        assert response.status_code == 200
        assert_identity(response)
        listing = response.json()
        assert listing["object"] == "list"
        assert [m["id"] for m in listing["data"]] == ["m-a", "m-b"]
        assert all(m["object"] == "model" for m in listing["data"])
        assert listing["agn"]["request"]["headers"]["x-probe"] == "p"
        changed = await client.post("/admin/config", json={"models": ["m-c"]})
        assert changed.status_code == 200, changed.text
        listing = (await client.get("/v1/models")).json()
        assert [m["id"] for m in listing["data"]] == ["m-c"]

    config = RuntimeConfig(metrics=default_metrics("east-1"), models=["m-a", "m-b"])
    run(scenario, FakeBackend("east-1", "east", config))


def test_request_body_limit() -> None:
    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        largest = b"x" * MAX_BODY_BYTES
        accepted = await client.post("/v1/chat/completions", content=largest)
        assert accepted.status_code == 200
        assert accepted.json()["agn"]["request"]["body_bytes"] == MAX_BODY_BYTES
        rejected = await client.post("/v1/chat/completions", content=largest + b"y")
        assert rejected.status_code == 413
        assert_identity(rejected)
        assert len(rejected.content) < 200 and "larger than" in rejected.text
        streamed = await client.post("/v1/completions", content=_chunks(largest + b"y"))
        assert streamed.status_code == 413
        stats = (await client.get("/admin/stats")).json()
        assert stats == {"requests": 1, "metrics_requests": 0, "mcp_requests": 0}

    run(scenario)


async def _chunks(data: bytes, size: int = 1 << 20) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start:start + size]


def test_keep_alive_serves_several_requests_on_one_connection() -> None:
    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        reader, writer = await asyncio.open_connection(server.host, server.port)
        try:
            for index in range(3):
                body = json.dumps({"model": f"m{index}"}).encode()
                writer.write(
                    b"POST /v1/chat/completions HTTP/1.1\r\nHost: fake\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode() + body
                )
                await writer.drain()
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
                lines = head.decode("latin-1").split("\r\n")
                assert lines[0] == "HTTP/1.1 200 OK", lines
                fields = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
                assert fields.get("connection", "keep-alive").lower() != "close"
                payload = await asyncio.wait_for(reader.readexactly(int(fields["content-length"])), 10)
                assert json.loads(payload)["model"] == f"m{index}"
        finally:
            writer.close()
            await writer.wait_closed()
        assert (await client.get("/admin/stats")).json() == {"requests": 3, "metrics_requests": 0, "mcp_requests": 0}

    run(scenario)


# -------------------------------------------------------------------------------------------- metrics


def test_metrics_default_samples_and_counter() -> None:
    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        for _ in range(4):
            assert (await client.post("/v1/chat/completions", json={})).status_code == 200
        response = await client.get("/metrics")
        assert response.status_code == 200
        assert_identity(response)
        assert response.headers["content-type"].startswith("text/plain")
        found = samples(response.text)
        pool = (("name", "east-1"),)
        assert found[("inference_pool_average_queue_size", pool)] == 0
        assert found[("inference_pool_average_kv_cache_utilization", pool)] == 0
        assert found[("inference_pool_ready_pods", pool)] == 1
        assert found[("agn_fake_requests_total", ())] == 4
        assert families(response.text)["agn_fake_requests"] == "counter"
        assert families(response.text)["inference_pool_ready_pods"] == "gauge"

    run(scenario)


def test_stats_count_metrics_scrapes_apart_from_model_requests() -> None:
    """Suites tell a gateway that scrapes its backends per request from one that does not by this count."""
    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        for _ in range(3):
            assert (await client.get("/metrics")).status_code == 200
        assert (await client.head("/metrics")).status_code == 200
        assert (await client.post("/metrics")).status_code == 405
        assert (await client.post("/v1/chat/completions", json={})).status_code == 200
        assert (await client.get("/admin/stats")).json() == {"requests": 1, "metrics_requests": 4, "mcp_requests": 0}
        reset = await client.post("/admin/reset-stats")
        assert reset.json() == {"requests": 0, "metrics_requests": 0, "mcp_requests": 0}

    run(scenario)


def test_metrics_reflect_admin_changes() -> None:
    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        update = {"metrics": [
            {"name": "vllm:num_requests_waiting", "labels": {"pool": "llama-east", "zone": "a"}, "value": 12},
            {"name": "vllm:num_requests_waiting", "labels": {"pool": "llama-west"}, "value": 3.5},
            {"name": "epp_ready", "value": 0},
        ]}
        response = await client.post("/admin/config", json=update)
        assert response.status_code == 200, response.text
        assert_identity(response)
        text = (await client.get("/metrics")).text
        found = samples(text)
        assert found[("vllm:num_requests_waiting", (("pool", "llama-east"), ("zone", "a")))] == 12
        assert found[("vllm:num_requests_waiting", (("pool", "llama-west"),))] == 3.5
        assert found[("epp_ready", ())] == 0
        assert not any(name.startswith("inference_pool_") for name, _ in found), text
        config = (await client.get("/admin/config")).json()
        assert config["metrics"][0] == {"name": "vllm:num_requests_waiting",
                                        "labels": {"pool": "llama-east", "zone": "a"}, "value": 12.0}
        emptied = await client.post("/admin/config", json={"metrics": []})
        assert emptied.status_code == 200
        assert set(families((await client.get("/metrics")).text)) == {"agn_fake_requests"}

    run(scenario)


def test_metrics_pool_label_configurable() -> None:
    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        found = samples((await client.get("/metrics")).text)
        assert found[("inference_pool_ready_pods", (("name", "llama-70b-east"),))] == 1

    run(scenario, FakeBackend("east-1", "east", RuntimeConfig(metrics=default_metrics("llama-70b-east"))))


# ---------------------------------------------------------------------------------------------- admin


BAD_ADMIN_BODIES: list[tuple[str, Any, str]] = [
    ("not json", b"{metrics: 1", "not valid JSON"),
    ("nan literal", '{"latency_ms": NaN}', "latency_ms: expected a finite number"),
    ("array", "[]", "expected a JSON object"),
    ("unknown key", {"latency_ms": 5, "frobnicate": 1}, "'frobnicate'"),
    ("latency string", {"latency_ms": "5"}, "latency_ms"),
    ("latency negative", {"latency_ms": -1}, "latency_ms"),
    ("latency bool", {"latency_ms": True}, "latency_ms"),
    ("hold not a bool", {"hold": 1}, "hold: expected true or false"),
    ("latency huge", {"latency_ms": 1e308 * 10}, "latency_ms"),
    ("status 200", {"error_status": 200}, "error_status"),
    ("status 600", {"error_status": 600}, "error_status"),
    ("status float", {"error_status": 503.0}, "error_status"),
    ("models not list", {"models": "m"}, "models"),
    ("model empty", {"models": ["a", ""]}, "models[1]"),
    ("metrics not list", {"metrics": {"name": "x"}}, "metrics"),
    ("metric bad name", {"metrics": [{"name": "queue-size", "value": 1}]}, "metrics[0].name"),
    ("metric digit name", {"metrics": [{"name": "9lives", "value": 1}]}, "metrics[0].name"),
    ("metric no value", {"metrics": [{"name": "q"}]}, "metrics[0].value"),
    ("metric text value", {"metrics": [{"name": "q", "value": "1"}]}, "metrics[0].value"),
    ("metric bool value", {"metrics": [{"name": "q", "value": False}]}, "metrics[0].value"),
    ("metric extra key", {"metrics": [{"name": "q", "value": 1, "help": "x"}]}, "'help'"),
    ("label bad name", {"metrics": [{"name": "q", "labels": {"pool-name": "a"}, "value": 1}]}, "pool-name"),
    ("label reserved", {"metrics": [{"name": "q", "labels": {"__name__": "a"}, "value": 1}]}, "__name__"),
    ("label value number", {"metrics": [{"name": "q", "labels": {"pool": 1}, "value": 1}]}, "labels.pool"),
    ("duplicate sample", {"metrics": [{"name": "q", "value": 1}, {"name": "q", "labels": {}, "value": 2}]},
     "duplicate"),
    ("reserved counter", {"metrics": [{"name": "agn_fake_requests_total", "value": 1}]}, "reserved"),
    ("valid then invalid", {"latency_ms": 50, "error_status": 503,
                            "metrics": [{"name": "ok", "value": 1}, {"name": "bad name", "value": 2}]},
     "metrics[1].name"),
]


@pytest.mark.parametrize(("body", "named"), [(b, n) for _, b, n in BAD_ADMIN_BODIES],
                         ids=[label for label, _, _ in BAD_ADMIN_BODIES])
def test_bad_admin_config_is_rejected_and_changes_nothing(body: Any, named: str) -> None:
    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        before_config = (await client.get("/admin/config")).json()
        before_metrics = (await client.get("/metrics")).text
        if isinstance(body, dict):
            content = json.dumps(body, allow_nan=True).encode()
        else:
            content = body.encode() if isinstance(body, str) else body
        response = await client.post("/admin/config", content=content)
        assert response.status_code == 400, response.text
        assert_identity(response)
        assert response.headers["content-type"].startswith("text/plain")
        assert named in response.text and len(response.text) < 300, response.text
        assert (await client.get("/admin/config")).json() == before_config
        assert (await client.get("/metrics")).text == before_metrics
        model = await client.post("/v1/chat/completions", json={"model": "m"})
        assert model.status_code == 200

    run(scenario)


def test_admin_merge_keeps_other_fields_and_unknown_routes() -> None:
    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        first = await client.post("/admin/config", json={"latency_ms": 1, "models": ["a"]})
        assert first.status_code == 200
        second = await client.post("/admin/config", json={"error_status": 429})
        assert second.json()["latency_ms"] == 1 and second.json()["models"] == ["a"]
        assert second.json()["error_status"] == 429
        assert (await client.get("/admin/config")).json() == second.json()
        for method, path, status in [("GET", "/admin/nope", 404), ("DELETE", "/admin/config", 405),
                                     ("GET", "/admin/reset-stats", 405), ("POST", "/metrics", 405)]:
            response = await client.request(method, path)
            assert response.status_code == status, (method, path)
            assert_identity(response)
            assert response.headers["content-type"].startswith("text/plain")

    run(scenario)


def test_latency_delays_model_api() -> None:
    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        assert (await client.post("/admin/config", json={"latency_ms": 300})).status_code == 200
        started = time.monotonic()
        response = await client.post("/v1/chat/completions", json={"model": "m"})
        elapsed = time.monotonic() - started
        assert response.status_code == 200
        assert elapsed >= 0.3, f"answered after {elapsed:.3f}s with latency_ms=300"
        concurrent = time.monotonic()
        answers = await asyncio.gather(*(client.post("/v1/completions") for _ in range(4)))
        assert all(a.status_code == 200 for a in answers)
        assert time.monotonic() - concurrent >= 0.3

    run(scenario)


def test_a_hold_keeps_requests_in_flight_until_released() -> None:
    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        assert (await client.post("/admin/config", json={"hold": True})).json()["hold"] is True
        held = [asyncio.ensure_future(client.post("/v1/chat/completions", json={"model": "m"})) for _ in range(2)]
        while server.backend.requests < 2:  # both have reached the model API and are waiting there
            await asyncio.sleep(0.01)
        done, _ = await asyncio.wait(held, timeout=0.2)
        assert not done, "held requests were answered before the release"
        assert (await client.post("/admin/config", json={"hold": False})).status_code == 200
        answers = await asyncio.gather(*held)
        assert [a.status_code for a in answers] == [200, 200]
        assert (await client.post("/v1/completions")).status_code == 200  # not held any more

    run(scenario)


def test_error_status_applies_to_model_api_only() -> None:
    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        assert (await client.post("/admin/config", json={"error_status": 503})).status_code == 200
        for path in ("/v1/chat/completions", "/v1/completions"):
            failed = await client.post(path, json={"model": "m"})
            assert failed.status_code == 503
            assert_identity(failed)
            assert "503" in failed.text and len(failed.content) < 200
        assert (await client.get("/v1/models")).status_code == 200
        assert (await client.get("/metrics")).status_code == 200
        assert (await client.get("/admin/stats")).json() == {"requests": 2, "metrics_requests": 1, "mcp_requests": 0}
        assert (await client.post("/admin/config", json={"error_status": None})).status_code == 200
        assert (await client.post("/v1/chat/completions", json={})).status_code == 200

    run(scenario)


def test_stats_count_and_reset() -> None:
    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        for _ in range(3):
            await client.post("/v1/chat/completions", json={})
        await client.post("/v1/completions", content=b"prompt")
        assert (await client.get("/admin/stats")).json() == {"requests": 4, "metrics_requests": 0, "mcp_requests": 0}
        reset = await client.post("/admin/reset-stats")
        assert reset.status_code == 200
        assert_identity(reset)
        assert (await client.get("/admin/stats")).json() == {"requests": 0, "metrics_requests": 0, "mcp_requests": 0}
        assert samples((await client.get("/metrics")).text)[("agn_fake_requests_total", ())] == 0

    run(scenario)


# ------------------------------------------------------------------------------------------------ CLI


def _port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT leftovers do not count
        try:
            probe.bind((host, port))
            probe.listen(1)
        except OSError:
            return False
    return True


def _read_line(process: subprocess.Popen[bytes], deadline: float) -> str:
    """One stdout line from the child, or a failure naming what was seen before the deadline."""
    return _read_lines(process, 1, deadline)[0]


def _read_lines(process: subprocess.Popen[bytes], count: int, deadline: float) -> list[str]:
    """The first `count` stdout lines of the child, or a failure naming what was seen before the deadline."""
    assert process.stdout is not None
    buffer = b""
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while buffer.count(b"\n") < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"fewer than {count} stdout lines before the deadline; saw {buffer!r}")
            if selector.select(timeout=remaining):
                chunk = os.read(process.stdout.fileno(), 4096)
                if not chunk:
                    stderr = process.stderr.read().decode() if process.stderr else ""
                    raise AssertionError(f"child exited ({process.wait()}) after {buffer!r}; stderr: {stderr}")
                buffer += chunk
    return buffer.decode().splitlines()[:count]


@contextlib.contextmanager
def _child(args: list[str], module: str = "harness.fakes.cli") -> Iterator[subprocess.Popen[bytes]]:
    """`python -m module args` from the checkout, killed and reaped at the end whatever happened."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    process = subprocess.Popen([sys.executable, "-m", module, *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env, cwd=REPO)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_cli_process_serves_and_stops_cleanly(tmp_path: Path, stop_signal: signal.Signals) -> None:
    config = tmp_path / "backend.json"
    config.write_text(json.dumps({"metrics": [{"name": "inference_pool_average_queue_size",
                                               "labels": {"name": "pool-w"}, "value": 7}],
                                  "models": ["ignored"]}))
    ready = tmp_path / "ready" / "addr"
    ready.parent.mkdir()
    args = ["--name", "west-2", "--site", "west", "--listen", "127.0.0.1:0", "--model", "m1", "--model", "m2",
            "--config", str(config), "--ready-file", str(ready)]
    with _child(args) as process:
        line = _read_line(process, time.monotonic() + STARTUP_DEADLINE)
        assert line.startswith("LISTENING 127.0.0.1:"), line
        address = line.split(" ", 1)[1]
        host, port = address.rsplit(":", 1)
        assert int(port) > 0
        assert ready.read_text() == address
        with httpx.Client(base_url=f"http://{address}", timeout=10.0) as client:
            models = client.get("/v1/models")
            assert_identity(models, "west-2", "west")
            assert [m["id"] for m in models.json()["data"]] == ["m1", "m2"]
            chat = client.post("/v1/chat/completions", json={"model": "m2"}, headers={"x-hop": "1"})
            assert chat.json()["agn"]["backend"] == "west-2"
            assert chat.json()["agn"]["request"]["headers"]["x-hop"] == "1"
            found = samples(client.get("/metrics").text)
            assert found[("inference_pool_average_queue_size", (("name", "pool-w"),))] == 7
            assert found[("agn_fake_requests_total", ())] == 1
            assert not _port_is_free(host, int(port))
        process.send_signal(stop_signal)
        assert process.wait(timeout=10) == 0
        assert process.stderr is not None and process.stderr.read() == b""
    assert _port_is_free(host, int(port)), f"port {port} still bound after the backend exited"
    assert not ready.exists()


def test_cli_process_bad_config_exits_2_naming_key(tmp_path: Path) -> None:
    config = tmp_path / "bad.json"
    config.write_text(json.dumps({"latency_ms": 1, "frobnicate": True}))
    with _child(["--name", "a", "--site", "s", "--listen", "127.0.0.1:0", "--config", str(config)]) as process:
        assert process.wait(timeout=STARTUP_DEADLINE) == 2
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.read() == b""
        stderr = process.stderr.read().decode()
    assert "frobnicate" in stderr and str(config) in stderr, stderr


BAD_CLI: list[tuple[str, list[str], Any, str]] = [
    ("unknown key", [], {"latencyMs": 3}, "'latencyMs'"),
    ("bad metric name", [], {"metrics": [{"name": "a b", "value": 1}]}, "metrics[0].name"),
    ("bad label", [], {"metrics": [{"name": "q", "labels": {"a-b": "x"}, "value": 1}]}, "a-b"),
    ("error status", [], {"error_status": 700}, "error_status"),
    ("not json", [], "{nope", "not valid JSON"),
    ("not object", [], [1, 2], "expected a JSON object"),
    ("missing file", [], None, "cannot read"),
    ("bad listen", ["--listen", "localhost"], {}, "--listen"),
    ("bad port", ["--listen", "127.0.0.1:70000"], {}, "70000"),
    ("bad name", ["--name", "two words"], {}, "--name"),
    ("empty model", ["--model", ""], {}, "--model"),
    ("ready dir", ["--ready-file", "/nonexistent-dir/x"], {}, "--ready-file"),
]


@pytest.mark.parametrize(("extra", "content", "named"), [(e, c, n) for _, e, c, n in BAD_CLI],
                         ids=[label for label, _, _, _ in BAD_CLI])
def test_cli_bad_arguments_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str],
                                  content: Any, named: str) -> None:
    config = tmp_path / "config.json"
    if content is not None:
        config.write_text(content if isinstance(content, str) else json.dumps(content))
    args = ["--name", "a", "--site", "s", "--listen", "127.0.0.1:0", "--config", str(config), *extra]
    with pytest.raises(SystemExit) as exit_info:
        cli_main(args)
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert named in captured.err, captured.err
    assert "LISTENING" not in captured.out


def test_cli_port_in_use_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        assert cli_main(["--name", "a", "--site", "s", "--listen", f"127.0.0.1:{port}"]) == 1
    captured = capsys.readouterr()
    assert f"cannot listen on 127.0.0.1:{port}" in captured.err
    assert "LISTENING" not in captured.out


def test_running_context_releases_port() -> None:
    seen: dict[str, int] = {}

    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        seen["port"] = server.port
        assert not _port_is_free("127.0.0.1", server.port)

    run(scenario)
    assert _port_is_free("127.0.0.1", seen["port"])


def test_non_finite_values_never_reach_metrics() -> None:
    backend = FakeBackend("east-1", "east")

    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        response = await client.post("/admin/config", content=b'{"metrics": [{"name": "q", "value": Infinity}]}')
        assert response.status_code == 400
        assert "metrics[0].value" in response.text
        values = samples((await client.get("/metrics")).text).values()
        assert all(math.isfinite(v) for v in values)

    run(scenario, backend)



# ------------------------------------------------------------------------------- non-finite samples


def _strict_json(text: str) -> Any:
    """Parse JSON refusing the NaN/Infinity extensions Python's json module would otherwise accept."""

    def refuse(token: str) -> Any:
        raise AssertionError(f"bare {token} in JSON: {text}")

    return json.loads(text, parse_constant=refuse)


def test_non_finite_metric_values_exposed_and_round_trip() -> None:
    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        metrics = [
            {"name": "epp_queue", "labels": {"pool": "a"}, "value": "NaN"},
            {"name": "epp_queue", "labels": {"pool": "b"}, "value": "+Inf"},
            {"name": "epp_kv", "labels": {}, "value": "-Inf"},
            {"name": "epp_ready", "labels": {}, "value": 2.5},
        ]
        posted = await client.post("/admin/config", json={"metrics": metrics})
        assert posted.status_code == 200, posted.text
        assert _strict_json(posted.text)["metrics"] == metrics
        response = await client.get("/metrics")
        assert response.status_code == 200
        lines = response.text.splitlines()
        assert 'epp_queue{pool="a"} NaN' in lines, response.text
        assert 'epp_queue{pool="b"} +Inf' in lines, response.text
        assert "epp_kv -Inf" in lines, response.text
        found = samples(response.text)
        assert math.isnan(found[("epp_queue", (("pool", "a"),))])
        assert found[("epp_queue", (("pool", "b"),))] == math.inf
        assert found[("epp_kv", ())] == -math.inf
        assert found[("epp_ready", ())] == 2.5
        fetched = await client.get("/admin/config")
        config = _strict_json(fetched.text)
        assert config["metrics"] == metrics
        again = await client.post("/admin/config", json=config)  # what GET returns is accepted back as is
        assert again.status_code == 200, again.text
        assert _strict_json(again.text) == config
        assert (await client.get("/metrics")).text == response.text

    run(scenario)


BAD_SAMPLE_VALUES = ["nan", "Inf", "inf", "+inf", "Infinity", "-NaN", " NaN", "NaN ", "", "1.5", None, [1]]


@pytest.mark.parametrize("value", BAD_SAMPLE_VALUES, ids=[repr(v) for v in BAD_SAMPLE_VALUES])
def test_bad_sample_value_strings_are_rejected(value: Any) -> None:
    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        before = (await client.get("/admin/config")).json()
        update = {"metrics": [{"name": "ok", "value": "NaN"}, {"name": "q", "value": value}]}
        response = await client.post("/admin/config", json=update)
        assert response.status_code == 400, response.text
        assert_identity(response)
        assert response.headers["content-type"].startswith("text/plain")
        expected = 'metrics[1].value: expected a number or one of "NaN", "+Inf", "-Inf"'
        assert expected in response.text and len(response.text) < 300, response.text
        assert (await client.get("/admin/config")).json() == before

    run(scenario)


# ------------------------------------------------------------------------------- metrics failure injection


def test_metrics_error_status_fails_metrics_only() -> None:
    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        assert (await client.get("/admin/config")).json()["metrics_error_status"] is None
        changed = await client.post("/admin/config", json={"metrics_error_status": 503})
        assert changed.status_code == 200, changed.text
        assert changed.json()["metrics_error_status"] == 503
        assert changed.json()["error_status"] is None
        for method in ("GET", "HEAD"):
            failed = await client.request(method, "/metrics")
            assert failed.status_code == 503, (method, failed.text)
            assert_identity(failed)
            assert failed.headers["content-type"].startswith("text/plain")
        failed = await client.get("/metrics")
        assert "503" in failed.text and len(failed.content) < 200, failed.text
        assert "agn_fake_requests" not in failed.text
        chat = await client.post("/v1/chat/completions", json={"model": "m"})
        assert chat.status_code == 200, chat.text
        assert (await client.get("/v1/models")).status_code == 200
        both = await client.post("/admin/config", json={"error_status": 429, "metrics_error_status": 500})
        assert both.status_code == 200, both.text
        assert (await client.post("/v1/completions")).status_code == 429
        assert (await client.get("/metrics")).status_code == 500
        restored = await client.post("/admin/config", json={"metrics_error_status": None, "error_status": None})
        assert restored.status_code == 200
        assert restored.json()["metrics_error_status"] is None
        response = await client.get("/metrics")
        assert response.status_code == 200, response.text
        assert samples(response.text)[("agn_fake_requests_total", ())] == 2

    run(scenario)


def test_metrics_latency_delays_metrics() -> None:
    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        changed = await client.post("/admin/config", json={"metrics_latency_ms": 300})
        assert changed.status_code == 200, changed.text
        assert changed.json()["metrics_latency_ms"] == 300
        assert changed.json()["latency_ms"] == 0
        started = time.monotonic()
        response = await client.get("/metrics")
        elapsed = time.monotonic() - started
        assert response.status_code == 200
        assert ("agn_fake_requests_total", ()) in samples(response.text)
        assert elapsed >= 0.3, f"/metrics answered after {elapsed:.3f}s with metrics_latency_ms=300"
        await client.post("/admin/config", json={"metrics_error_status": 502})
        started = time.monotonic()
        failed = await client.get("/metrics")
        elapsed = time.monotonic() - started
        assert failed.status_code == 502
        assert elapsed >= 0.3, f"failing /metrics answered after {elapsed:.3f}s with metrics_latency_ms=300"
        with pytest.raises(httpx.TimeoutException):
            await client.get("/metrics", timeout=0.05)  # a scraper with a short timeout gives up
        reset = await client.post("/admin/config", json={"metrics_latency_ms": 0, "metrics_error_status": None})
        assert reset.status_code == 200
        assert (await client.get("/metrics")).status_code == 200

    run(scenario)


BAD_METRICS_INJECTION: list[tuple[str, Any, str]] = [
    ("metrics status 200", {"metrics_error_status": 200}, "metrics_error_status"),
    ("metrics status 600", {"metrics_error_status": 600}, "metrics_error_status"),
    ("metrics status float", {"metrics_error_status": 503.0}, "metrics_error_status"),
    ("metrics status string", {"metrics_error_status": "503"}, "metrics_error_status"),
    ("metrics status bool", {"metrics_error_status": True}, "metrics_error_status"),
    ("metrics latency negative", {"metrics_latency_ms": -1}, "metrics_latency_ms"),
    ("metrics latency huge", {"metrics_latency_ms": 600_001}, "metrics_latency_ms"),
    ("metrics latency string", {"metrics_latency_ms": "5"}, "metrics_latency_ms"),
    ("metrics latency null", {"metrics_latency_ms": None}, "metrics_latency_ms"),
    ("metrics latency nan", '{"metrics_latency_ms": NaN}', "metrics_latency_ms: expected a finite number"),
    ("metrics latency inf string", {"metrics_latency_ms": "+Inf"}, "metrics_latency_ms"),
    ("valid then invalid", {"metrics_latency_ms": 5, "metrics_error_status": 99}, "metrics_error_status"),
]


@pytest.mark.parametrize(("body", "named"), [(b, n) for _, b, n in BAD_METRICS_INJECTION],
                         ids=[label for label, _, _ in BAD_METRICS_INJECTION])
def test_bad_metrics_injection_config_is_rejected(body: Any, named: str) -> None:
    test_bad_admin_config_is_rejected_and_changes_nothing(body, named)


# ------------------------------------------------------------------------------------------------- TLS


@pytest.fixture
def tls_files(tmp_path: Path) -> tuple[trustme.CA, Path, Path]:
    """A throwaway CA and a 127.0.0.1 server certificate chain and key written as PEM files."""
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1")
    cert, key = tmp_path / "server.crt", tmp_path / "server.key"
    cert.write_bytes(b"".join(pem.bytes() for pem in issued.cert_chain_pems))
    issued.private_key_pem.write_to_path(str(key))
    return ca, cert, key


def _trusting(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


def test_start_server_with_ssl_context_serves_https(tls_files: tuple[trustme.CA, Path, Path]) -> None:
    ca, cert, key = tls_files
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)

    async def body() -> None:
        async with running(FakeBackend("east-1", "east"), "127.0.0.1", 0, ssl_context=server_context) as server:
            assert server.base_url == f"https://127.0.0.1:{server.port}"
            async with httpx.AsyncClient(base_url=server.base_url, verify=_trusting(ca), timeout=10.0) as client:
                chat = await client.post("/v1/chat/completions", json={"model": "m"})
                assert chat.status_code == 200
                assert_identity(chat)
                assert chat.json()["agn"]["request"]["path"] == "/v1/chat/completions"
                assert samples((await client.get("/metrics")).text)[("agn_fake_requests_total", ())] == 1

    asyncio.run(body())


def test_cli_process_serves_https_only(tls_files: tuple[trustme.CA, Path, Path]) -> None:
    ca, cert, key = tls_files
    args = ["--name", "x", "--site", "s", "--listen", "127.0.0.1:0", "--tls-cert", str(cert), "--tls-key", str(key)]
    with _child(args) as process:
        line = _read_line(process, time.monotonic() + STARTUP_DEADLINE)
        assert line.startswith("LISTENING 127.0.0.1:"), line
        address = line.split(" ", 1)[1]
        host, port = address.rsplit(":", 1)
        with httpx.Client(base_url=f"https://{address}", verify=_trusting(ca), timeout=10.0) as client:
            response = client.get("/metrics")
            assert response.status_code == 200
            assert_identity(response, "x", "s")
            assert ("inference_pool_ready_pods", (("name", "x"),)) in samples(response.text)
        with httpx.Client(timeout=10.0) as plain, pytest.raises(httpx.TransportError):
            plain.get(f"http://{address}/metrics")
        with (httpx.Client(verify=ssl.create_default_context(), timeout=10.0) as untrusting,
              pytest.raises(httpx.ConnectError)):
            untrusting.get(f"https://{address}/metrics")  # the certificate really comes from the test CA
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    assert _port_is_free(host, int(port)), f"port {port} still bound after the backend exited"


@pytest.mark.parametrize(("given", "missing"), [("--tls-cert", "--tls-key"), ("--tls-key", "--tls-cert")])
def test_cli_tls_needs_both_files(tls_files: tuple[trustme.CA, Path, Path], capsys: pytest.CaptureFixture[str],
                                  given: str, missing: str) -> None:
    _, cert, key = tls_files
    path = cert if given == "--tls-cert" else key
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["--name", "a", "--site", "s", "--listen", "127.0.0.1:0", given, str(path)])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert missing in captured.err, captured.err
    assert "LISTENING" not in captured.out


BAD_TLS: list[tuple[str, str]] = [
    ("missing cert", "--tls-cert"),
    ("missing key", "--tls-key"),
    ("garbage cert", "--tls-cert"),
    ("key as cert", "--tls-cert"),
    ("cert as key", "--tls-key"),
    ("mismatched key", "cannot load certificate chain and key"),
]


@pytest.mark.parametrize(("case", "named"), BAD_TLS, ids=[case for case, _ in BAD_TLS])
def test_cli_unloadable_tls_files_exit_2(tls_files: tuple[trustme.CA, Path, Path], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str], case: str, named: str) -> None:
    ca, cert, key = tls_files
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    other_key = tmp_path / "other.key"
    ca.issue_cert("127.0.0.1").private_key_pem.write_to_path(str(other_key))
    files = {
        "missing cert": (tmp_path / "absent.crt", key),
        "missing key": (cert, tmp_path / "absent.key"),
        "garbage cert": (garbage, key),
        "key as cert": (key, key),
        "cert as key": (cert, cert),
        "mismatched key": (cert, other_key),
    }[case]
    args = ["--name", "a", "--site", "s", "--listen", "127.0.0.1:0",
            "--tls-cert", str(files[0]), "--tls-key", str(files[1])]
    with pytest.raises(SystemExit) as exit_info:
        cli_main(args)
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert named in captured.err, captured.err
    assert "LISTENING" not in captured.out


def test_cli_process_unreadable_cert_exits_2(tls_files: tuple[trustme.CA, Path, Path], tmp_path: Path) -> None:
    _, _, key = tls_files
    absent = tmp_path / "no-such.crt"
    args = ["--name", "x", "--site", "s", "--listen", "127.0.0.1:0", "--tls-cert", str(absent), "--tls-key", str(key)]
    with _child(args) as process:
        assert process.wait(timeout=STARTUP_DEADLINE) == 2
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.read() == b""
        stderr = process.stderr.read().decode()
    assert "--tls-cert" in stderr and str(absent) in stderr, stderr


# ------------------------------------------------------------------------------------------------ mTLS


@pytest.fixture
def grid_pki(tmp_path: Path) -> GridPKI:
    """A run CA with a 127.0.0.1 server certificate for the fake's mTLS listener."""
    pki = GridPKI(tmp_path / "pki")
    pki.server("fake", "127.0.0.1", "fake.site.backend.grid.test")
    return pki


def _client(pki: GridPKI, client: ClientFiles | None) -> ssl.SSLContext:
    return client_context(pki.ca_path, client)


def _handshake_refused(url: str, verify: ssl.SSLContext) -> bool:
    """True when the server turns the client away in the TLS layer (no answer comes back)."""
    try:
        with httpx.Client(verify=verify, timeout=10.0) as client:
            client.post(f"{url}/v1/chat/completions", json={"model": "m"})
    except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError):
        return True
    return False


def test_mtls_listener_echoes_the_verified_client_certificate(grid_pki: GridPKI) -> None:
    server_files = grid_pki.directory / "fake.crt", grid_pki.directory / "fake.key"
    context = mtls_context(*server_files, grid_pki.ca_path)
    consumer = grid_pki.client("consumer")

    async def body() -> None:
        async with running(FakeBackend("east-1", "east"), "127.0.0.1", 0, mtls=("127.0.0.1", 0, context)) as server:
            assert server.mtls_url is not None and server.mtls_port != server.port
            async with httpx.AsyncClient(base_url=server.mtls_url, verify=_client(grid_pki, consumer),
                                         timeout=10.0) as client:
                chat = await client.post("/v1/chat/completions", json={"model": "m"}, headers={"x-hop": "1"})
                assert chat.status_code == 200
                assert_identity(chat)
                agn = chat.json()["agn"]
                assert agn["listener"] == "mtls"
                assert agn["peer"] == {"cert_digest": consumer.digest, "organization": "ai-grid",
                                       "common_name": "consumer"}
                assert agn["request"]["headers"]["x-hop"] == "1"
            async with httpx.AsyncClient(base_url=server.base_url, timeout=10.0) as plain:
                echo = (await plain.post("/v1/chat/completions", json={"model": "m"})).json()["agn"]
                assert (echo["listener"], echo["peer"]) == ("plain", None)
                stats = await plain.get("/admin/stats")  # the admin API stays on the plain listener
                assert stats.json() == {"requests": 2, "metrics_requests": 0, "mcp_requests": 0}
                config = await plain.post("/admin/config", json={"latency_ms": 1})
                assert config.status_code == 200

    asyncio.run(body())


def test_mtls_listener_refuses_clients_without_a_grid_certificate(grid_pki: GridPKI) -> None:
    context = mtls_context(grid_pki.directory / "fake.crt", grid_pki.directory / "fake.key", grid_pki.ca_path)
    foreign = grid_pki.foreign_client("intruder")
    backend = FakeBackend("east-1", "east")

    async def body() -> None:
        async with running(backend, "127.0.0.1", 0, mtls=("127.0.0.1", 0, context)) as server:
            url = server.mtls_url
            assert url is not None
            loop = asyncio.get_running_loop()
            # the blocking clients run in a thread: the server answers on this loop meanwhile
            assert await loop.run_in_executor(None, _handshake_refused, url, _client(grid_pki, None))
            assert await loop.run_in_executor(None, _handshake_refused, url, _client(grid_pki, foreign))
            async with httpx.AsyncClient(base_url=url, verify=_client(grid_pki, None), timeout=10.0) as anonymous:
                with pytest.raises(httpx.TransportError):
                    await anonymous.get("/admin/stats")  # the admin API too needs a certificate there

    asyncio.run(body())
    assert backend.requests == 0  # nothing reached the model API


def test_mtls_context_must_require_client_certificates(grid_pki: GridPKI) -> None:
    lax = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    lax.load_cert_chain(grid_pki.directory / "fake.crt", grid_pki.directory / "fake.key")

    async def body() -> None:
        with pytest.raises(ValueError, match="require client certificates"):
            async with running(FakeBackend("e", "s"), "127.0.0.1", 0, mtls=("127.0.0.1", 0, lax)):
                pass

    asyncio.run(body())




def test_cli_process_serves_plain_and_mtls(grid_pki: GridPKI, tmp_path: Path) -> None:
    cert, key = grid_pki.directory / "fake.crt", grid_pki.directory / "fake.key"
    consumer = grid_pki.client("consumer")
    ready = tmp_path / "ready"
    args = ["--name", "x", "--site", "s", "--listen", "127.0.0.1:0", "--mtls-listen", "127.0.0.1:0",
            "--tls-cert", str(cert), "--tls-key", str(key), "--client-ca", str(grid_pki.ca_path),
            "--ready-file", str(ready)]
    with _child(args) as process:
        first, second = _read_lines(process, 2, time.monotonic() + STARTUP_DEADLINE)
        assert first.startswith("LISTENING-MTLS 127.0.0.1:"), first
        assert second.startswith("LISTENING 127.0.0.1:"), second
        mtls_address, address = first.split(" ", 1)[1], second.split(" ", 1)[1]
        assert ready.read_text() == address  # the ready file names the plain listener
        with httpx.Client(base_url=f"http://{address}", timeout=10.0) as plain:
            assert plain.get("/admin/stats").json() == {"requests": 0, "metrics_requests": 0, "mcp_requests": 0}
        with httpx.Client(base_url=f"https://{mtls_address}", verify=_client(grid_pki, consumer),
                          timeout=10.0) as client:
            agn = client.post("/v1/chat/completions", json={"model": "m"}).json()["agn"]
            assert agn["peer"]["cert_digest"] == consumer.digest and agn["peer"]["organization"] == "ai-grid"
        assert _handshake_refused(f"https://{mtls_address}", _client(grid_pki, None))
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    for bound in (address, mtls_address):
        host, port = bound.rsplit(":", 1)
        assert _port_is_free(host, int(port)), f"{bound} still bound after the backend exited"


MTLS_ARGS: list[tuple[str, list[str], str]] = [
    ("no client ca", ["--mtls-listen", "127.0.0.1:0", "--tls-cert", "{cert}", "--tls-key", "{key}"], "--client-ca"),
    ("no mtls listen", ["--client-ca", "{ca}", "--tls-cert", "{cert}", "--tls-key", "{key}"], "--mtls-listen"),
    ("no certificate", ["--mtls-listen", "127.0.0.1:0", "--client-ca", "{ca}"], "--tls-cert"),
    ("bad mtls listen", ["--mtls-listen", "nowhere", "--client-ca", "{ca}", "--tls-cert", "{cert}",
                         "--tls-key", "{key}"], "--mtls-listen"),
    ("client ca not pem", ["--mtls-listen", "127.0.0.1:0", "--client-ca", "{key}", "--tls-cert", "{cert}",
                           "--tls-key", "{key}"], "--client-ca"),
    ("client ca missing", ["--mtls-listen", "127.0.0.1:0", "--client-ca", "{absent}", "--tls-cert", "{cert}",
                           "--tls-key", "{key}"], "--client-ca"),
]


@pytest.mark.parametrize(("extra", "named"), [(e, n) for _, e, n in MTLS_ARGS], ids=[c for c, _, _ in MTLS_ARGS])
def test_cli_mtls_arguments_are_checked(grid_pki: GridPKI, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        extra: list[str], named: str) -> None:
    values = {"cert": str(grid_pki.directory / "fake.crt"), "key": str(grid_pki.directory / "fake.key"),
              "ca": str(grid_pki.ca_path), "absent": str(tmp_path / "absent.pem")}
    args = ["--name", "a", "--site", "s", "--listen", "127.0.0.1:0", *[a.format(**values) for a in extra]]
    with pytest.raises(SystemExit) as exit_info:
        cli_main(args)
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert named in captured.err, captured.err
    assert "LISTENING" not in captured.out


def test_mcp_server_lists_the_configured_tools_and_the_probe_reads_them() -> None:
    """No MCP server until mcp_tools is set; then the operator's discovery probe reads the list (one
    counted tools/list each time), follows a change, and a server that stops serving fails the probe."""
    from reference.operator import tool_probe

    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        endpoint = f"{server.base_url}/mcp"
        echo = await client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert "result" not in echo.json(), "without mcp_tools /mcp is the ordinary echo"
        assert (await client.post("/admin/config", json={"mcp_tools": ["alpha", "beta", "alpha"]})).status_code == 200
        async with httpx.AsyncClient(timeout=5.0) as probe_client:
            assert await tool_probe.probe(probe_client, endpoint) == ("alpha", "beta")
            await client.post("/admin/config", json={"mcp_tools": ["gamma"]})
            assert await tool_probe.probe(probe_client, endpoint) == ("gamma",)
            assert (await client.get("/admin/stats")).json()["mcp_requests"] == 2
            await client.post("/admin/config", json={"mcp_tools": None})
            with pytest.raises(tool_probe.ProbeError, match="no tools list|no result|no JSON"):
                await tool_probe.probe(probe_client, endpoint)
        bad = await client.post("/admin/config", json={"mcp_tools": ["", "x"]})
        assert bad.status_code == 400 and "mcp_tools" in bad.text

    run(scenario)


def test_discovery_probe_of_a_closed_port_is_a_probe_error() -> None:
    from reference.operator import tool_probe

    found, failed = asyncio.run(tool_probe.probe_all({"t": "http://127.0.0.1:9/mcp"}))
    assert found == {} and "ConnectError" in failed["t"]
