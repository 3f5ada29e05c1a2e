"""The provider hop: site A's gateway through site B's provider gateway to a fake backend, over mTLS with
keep-alive, side by side with the same path in plaintext; plus what a fresh mTLS handshake per request costs.

A provider pipeline (peer_identity_trust, provider_route, credential_inject) cannot run without a listener
that requires client certificates: the gateway refuses to start it. The plaintext comparison therefore
keeps the process layout (load generator -> A -> B -> backend) but B routes with a static intelligent_route
(json_body_field, intelligent_route, load_balancer) on a plain listener. The full run adds a third path,
the same routing pipeline behind B's mTLS listener, which splits the gap into transport and filters.

All gateways run for the whole benchmark and the paths are measured in alternating order, so each pair of
windows sees the same machine. The handshake comparison sends the same hop requests straight to B's
provider gateway from a TLS client process (this module's ``client`` command) that either keeps its
connections or opens a new one, with a full handshake, for every request.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import yaml

from bench.core import ROOT, BenchResult, Target, child_env, emit, percentile, table
from bench.loadgen import REQUEST_TIMEOUT_S, _wait_go, checked_load, closed_loop
from bench.overlays import KIND, MODEL, SCOPE
from bench.proxy import LoadShape, _cores, _cpu_sample, _loadavg, _sleep_until, _wait_ready, measure
from bench.services import (
    BACKEND_CLUSTER,
    BACKEND_NAME,
    START_TIMEOUT_S,
    Running,
    start_backend,
    wait_for_lines,
    wait_ports_free,
)
from harness import contract
from harness.gateway_config import (
    VARIANTS,
    CredentialRef,
    CredentialSource,
    ListenerTls,
    ProviderRoute,
    TrustedPeer,
    UpstreamTls,
    render_gateway_config,
    render_hop_consumer_config,
    render_provider_gateway_config,
)
from harness.pki import GRID_ORGANIZATION, GridPKI, client_context
from harness.process import ManagedProcess, Supervisor
from harness.projection import project

TARGET_RATIO = 0.70
PATH = "/v1/chat/completions"
SITE_B = "bench-site-b"
HOP_CLUSTER = "bench-provider-b"
CANDIDATE_ID = "bench-cand-b"
SNI = f"provider-gateway.{SITE_B}.grid.test"
CREDENTIAL = CredentialRef("bench-provider-token", "bench-ns", "token")
OVERLAY_FILE = "routing-overlay.json"
CANDIDATE_HEADER = "x-ai-routing-candidate"
REQUEST_ID_HEADER = "x-ai-routing-request-id"
REVISION_HEADER = "x-ai-routing-revision"
PROVIDER_REVISION_HEADER = "x-ai-provider-routing-revision"

MTLS = "mtls"  # B: mTLS listener, peer_identity_trust, provider_route, credential_inject
PLAIN = "plaintext"  # B: plain listener, static intelligent_route (a provider pipeline cannot run plain)
MTLS_ROUTING = "mtls-routing"  # B: mTLS listener, the plaintext path's routing pipeline (full run only)

FULL_SHAPES = (LoadShape(1, 32), LoadShape(1, 1))
QUICK_SHAPES = (LoadShape(1, 16),)
FULL_HANDSHAKE_CONCURRENCY = (1, 16)
QUICK_HANDSHAKE_CONCURRENCY = (1,)
NOTES = (
    "plaintext path: B cannot run its provider pipeline (peer_identity_trust, provider_route, "
    "credential_inject) on a plain listener, since startup validation refuses provider_route without "
    "client_cert_mode: require; plaintext B runs json_body_field + static intelligent_route + "
    "load_balancer to the same backend instead",
    "mtls-routing path (full run): that same routing pipeline behind B's mTLS listener, so "
    "mtls-routing vs plaintext is the transport's cost and mtls vs mtls-routing the provider filters'",
)


@dataclass
class Layout:
    """The running processes: the backend, each path's A and B gateways, and B's provider certificates."""

    backend: Running
    a: dict[str, Running]
    b: dict[str, Running]
    pki: GridPKI
    consumer_cert: Path
    consumer_key: Path
    revision: str
    token: str

    def ports(self) -> list[tuple[str, int]]:
        out = self.backend.ports()
        for gateway in (*self.a.values(), *self.b.values()):
            out += gateway.ports()
        return out


# ------------------------------------------------------------------------------------------ process start


def _launch_gateway(supervisor: Supervisor, workdir: Path, name: str, config: str) -> ManagedProcess:
    path = workdir / f"{name}.yaml"
    path.write_text(config)
    argv = [sys.executable, "-m", "reference.gateway.cli", "-c", str(path)]
    return supervisor.start(f"bench-{name}", argv, env=child_env(), cwd=ROOT)


def _start_gateways(supervisor: Supervisor, workdir: Path, configs: dict[str, str]) -> dict[str, Running]:
    """Start gateways side by side, then wait for each to announce its listener and admin addresses."""
    procs = {name: _launch_gateway(supervisor, workdir, name, config) for name, config in configs.items()}
    patterns = {"listen": r"^LISTENING \S+ (\S+)$", "admin": r"^ADMIN (\S+)$"}
    return {name: Running(proc, wait_for_lines(proc, patterns, START_TIMEOUT_S)) for name, proc in procs.items()}


def _routing_b_config(backend: str, tls: ListenerTls | None) -> str:
    """B without a provider pipeline: one static local candidate on the backend (plain or mTLS listener)."""
    scope_b = contract.ScopeSpec(SCOPE.network, "bench-gateway-b", SCOPE.namespace, SITE_B)
    text = render_gateway_config(
        VARIANTS["static"], listen="127.0.0.1:0", admin="127.0.0.1:0", overlay_file="", scope=scope_b,
        clusters={BACKEND_CLUSTER: backend}, hop_clusters=(), management_cluster=None,
        static_candidates=[contract.candidate(MODEL, SITE_B, BACKEND_CLUSTER, kind=KIND)],
    )
    if tls is None:
        return text
    config = yaml.safe_load(text)
    config["listeners"][0]["tls"] = tls.as_block()
    return yaml.safe_dump(config, sort_keys=False)


def _a_config(overlay_file: Path, b_address: str, hop_tls: UpstreamTls | None) -> str:
    """A: the consumer gateway whose overlay's only candidate is B's, reached as a provider hop cluster."""
    common: dict[str, Any] = {"listen": "127.0.0.1:0", "admin": "127.0.0.1:0", "overlay_file": str(overlay_file),
                              "scope": SCOPE, "clusters": {HOP_CLUSTER: b_address}}
    if hop_tls is None:
        return render_gateway_config(VARIANTS["core"], hop_clusters=[HOP_CLUSTER], management_cluster=None, **common)
    return render_hop_consumer_config(VARIANTS["core"], hop_tls={HOP_CLUSTER: hop_tls}, **common)


def start_layout(supervisor: Supervisor, workdir: Path, paths: Sequence[str]) -> Layout:
    """Backend, then each path's B, then each path's A pointed at it; every process stays up for the run."""
    pki = GridPKI(workdir / "pki")
    server = pki.server("provider-b", "127.0.0.1", SNI)
    consumer = pki.client("consumer-a")
    token = f"bench-token-{secrets.token_hex(16)}"
    token_file = workdir / "credentials" / CREDENTIAL.name / CREDENTIAL.key
    token_file.parent.mkdir(parents=True)
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    listener_tls = ListenerTls(str(server.cert), str(server.key), str(pki.ca_path), "require")
    backend = start_backend(supervisor)
    backend_address = backend.addresses["listen"]
    b_configs: dict[str, str] = {}
    for path in paths:
        if path == MTLS:
            b_configs[path] = render_provider_gateway_config(
                listen="127.0.0.1:0", admin="127.0.0.1:0", tls=listener_tls,
                trusted_peers=[TrustedPeer(organization=GRID_ORGANIZATION)], provider_id=f"{SITE_B}-provider",
                routes=[ProviderRoute(CANDIDATE_ID, MODEL, BACKEND_CLUSTER, (PATH,), CREDENTIAL)],
                credentials=[CredentialSource(CREDENTIAL, file=str(token_file))],
                clusters={BACKEND_CLUSTER: backend_address},
            )
        else:
            b_configs[path] = _routing_b_config(backend_address, listener_tls if path == MTLS_ROUTING else None)
    started = _start_gateways(supervisor, workdir, {f"b-{path}": config for path, config in b_configs.items()})
    b = {path: started[f"b-{path}"] for path in paths}
    overlay = contract.envelope([contract.candidate(MODEL, SITE_B, HOP_CLUSTER, kind=KIND, stable_id=CANDIDATE_ID)],
                                SCOPE, selection_mode="deterministic")
    a_configs: dict[str, str] = {}
    for path in paths:
        overlay_dir = workdir / f"overlay-a-{path}"
        project(overlay_dir, {OVERLAY_FILE: contract.encode(overlay)})
        hop_tls = None if path == PLAIN else UpstreamTls(str(pki.ca_path), str(consumer.cert), str(consumer.key), SNI)
        a_configs[f"a-{path}"] = _a_config(overlay_dir / OVERLAY_FILE, b[path].addresses["listen"], hop_tls)
    started = _start_gateways(supervisor, workdir, a_configs)
    a = {path: started[f"a-{path}"] for path in paths}
    return Layout(backend, a, b, pki, consumer.cert, consumer.key, contract.revision_of(overlay), token)


def check_path(layout: Layout, path: str) -> None:
    """One request through A and B; the backend must answer, and on the mTLS path see the provider's work."""
    url = f"http://{layout.a[path].addresses['listen']}{PATH}"
    resp = httpx.post(url, json={"model": MODEL, "messages": [{"role": "user", "content": "hello"}]}, timeout=10.0)
    try:
        echo = resp.json()["agn"]
    except (ValueError, KeyError, TypeError):
        echo = {}
    if resp.status_code != 200 or echo.get("backend") != BACKEND_NAME:
        raise RuntimeError(f"{path} path: {url} answered {resp.status_code} body={resp.text[:200]!r}")
    if path != MTLS:
        return
    seen = echo["request"]["headers"]
    # compared, never printed: the token must not reach any output
    if seen.get("authorization") != f"Bearer {layout.token}":
        raise RuntimeError("mtls path: the backend did not receive the provider credential")
    if seen.get(PROVIDER_REVISION_HEADER) != layout.revision:
        raise RuntimeError(f"mtls path: backend saw {PROVIDER_REVISION_HEADER}={seen.get(PROVIDER_REVISION_HEADER)!r}, "
                           f"expected A's revision {layout.revision}")


def _established_to(port: int) -> int:
    """TCP connections in ESTABLISHED state whose remote end is loopback `port` (from /proc/net/tcp*)."""
    count = 0
    for table_name in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/net/{table_name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "01" and int(fields[2].rsplit(":", 1)[1], 16) == port:
                count += 1
    return count


# ---------------------------------------------------------------------------------------- the TLS client


def _hop_headers(revision: str) -> dict[str, str]:
    return {"content-type": "application/json", CANDIDATE_HEADER: CANDIDATE_ID,
            REQUEST_ID_HEADER: secrets.token_hex(16), REVISION_HEADER: revision}


async def tls_generate(url: str, ca: Path, cert: Path, key: Path, revision: str, fresh: bool, concurrency: int,
                       warmup_s: float, duration_s: float, ready_file: Path, go_file: Path) -> dict[str, Any]:
    """Closed-loop hop requests over mTLS; `fresh` closes each connection, so every request handshakes."""
    context = client_context(ca)
    context.load_cert_chain(str(cert), str(key))
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=fresh, ssl=context)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hello"}]}).encode()
    connected_at: list[float] = []  # when each new connection (and so each handshake) completed

    async def on_connect(_session: Any, _ctx: Any, _params: Any) -> None:
        connected_at.append(time.perf_counter())

    trace = aiohttp.TraceConfig()
    trace.on_connection_create_end.append(on_connect)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, trace_configs=[trace]) as session:
        ready_file.write_text(str(os.getpid()))
        start_wall = await _wait_go(go_file)
        await asyncio.sleep(max(0.0, start_wall - time.time()))
        late_s = max(0.0, time.time() - start_wall)
        window_start = time.perf_counter() + warmup_s
        window_end = window_start + duration_s

        tally = await closed_loop(session, url, body, lambda: _hop_headers(revision), concurrency, window_start,
                                  window_end)
    return {"url": url, "fresh": fresh, "concurrency": concurrency, "late_s": late_s, **tally.as_dict(),
            "connections": len(connected_at),
            "connections_in_window": sum(1 for t in connected_at if window_start <= t <= window_end)}


def measure_tls(supervisor: Supervisor, workdir: Path, layout: Layout, fresh: bool, concurrency: int, warmup: float,
                duration: float) -> dict[str, Any]:
    """One window of the TLS client straight to B's provider gateway; throughput, latency, handshakes, CPU."""
    run_dir = Path(tempfile.mkdtemp(prefix="tls-", dir=workdir))
    result, go_file = run_dir / "result.json", run_dir / "go"
    gateway = layout.b[MTLS]
    argv = [sys.executable, "-m", "bench.provider_hop", "client",
            "--url", f"https://{gateway.addresses['listen']}{PATH}", "--ca", str(layout.pki.ca_path),
            "--cert", str(layout.consumer_cert), "--key", str(layout.consumer_key), "--revision", layout.revision,
            "--concurrency", str(concurrency), "--warmup", str(warmup), "--duration", str(duration),
            "--result", str(result), "--go-file", str(go_file)] + (["--fresh"] if fresh else [])
    proc: ManagedProcess = supervisor.start("bench-tls-client", argv, env=child_env(), cwd=ROOT)
    try:
        _wait_ready([proc], [result.with_name(result.name + ".ready")])
        start = time.time() + 0.05
        (run_dir / "go.tmp").write_text(repr(start))
        os.replace(run_dir / "go.tmp", go_file)
        pids = {"provider": [gateway.process.pid], "backend": [layout.backend.process.pid], "client": [proc.pid]}
        _sleep_until(start + warmup)
        before = _cpu_sample(pids)
        _sleep_until(start + warmup + duration)
        after = _cpu_sample(pids)
        code = proc.wait(warmup + duration + 30.0)
        if code != 0:
            raise RuntimeError(f"TLS client exit {code}:\n{proc.log_tail()}")
    finally:
        supervisor.stop(proc)
    doc = json.loads(result.read_text())
    latencies = sorted(doc["latencies_us"])
    if not latencies:
        raise RuntimeError(f"no successful request to B's provider gateway: {doc['statuses']} {doc['errors']}")
    cpu: dict[str, float | None] = {}
    for role in pids:
        first, last = before[role], after[role]
        cpu[role] = None if first is None or last is None else (last - first) / duration
    ok = len(latencies)
    return {
        "requests": ok,
        "rps": ok / duration,
        "p50_ms": percentile(latencies, 50) / 1000,
        "p99_ms": percentile(latencies, 99) / 1000,
        "mean_ms": sum(latencies) / ok / 1000,
        "non_200": sum(n for status, n in doc["statuses"].items() if status != "200"),
        "errors": sum(doc["errors"].values()),
        "connections_in_window": doc["connections_in_window"],
        "max_late_s": doc["late_s"],
        "cpu_cores": cpu,
    }


# ------------------------------------------------------------------------------------------------- run


def run(quick: bool) -> BenchResult:
    warmup, duration = (0.3, 1.0) if quick else (1.0, 4.0)
    shapes = QUICK_SHAPES if quick else FULL_SHAPES
    rounds = 1 if quick else 2
    paths = (PLAIN, MTLS) if quick else (PLAIN, MTLS, MTLS_ROUTING)
    handshake_concurrency = QUICK_HANDSHAKE_CONCURRENCY if quick else FULL_HANDSHAKE_CONCURRENCY
    emit(f"provider_hop: POST {PATH} load generator -> A -> B -> backend ({warmup:g} s warm-up + {duration:g} s "
         f"measured per run, {rounds} round(s) per path), {os.cpu_count()} cores shared by every process; "
         f"load average {_loadavg()}")
    for note in NOTES[: 1 if quick else 2]:
        emit(f"note: {note}")
    rows: list[dict[str, Any]] = []
    handshakes: list[dict[str, Any]] = []
    loadavg_start = _loadavg()
    with tempfile.TemporaryDirectory(prefix="agn-bench-provider-hop-") as tmp:
        workdir = Path(tmp)
        supervisor = Supervisor(workdir / "logs")
        ports: list[tuple[str, int]] = []
        busy: list[tuple[str, int]] = []
        try:
            layout = start_layout(supervisor, workdir, paths)
            ports = layout.ports()
            for path in paths:
                check_path(layout, path)
            for shape in shapes:
                for index in range(rounds):
                    # alternate the order each round so drift in machine load does not favour one path
                    order = paths if index % 2 == 0 else tuple(reversed(paths))
                    for path in order:
                        emit(f"  measuring {path} hop, round {index + 1}, {shape.processes} load generator(s) x "
                             f"{shape.concurrency} connections ...")
                        servers = {"gateway_a": layout.a[path].process.pid, "gateway_b": layout.b[path].process.pid,
                                   "backend": layout.backend.process.pid}
                        url = f"http://{layout.a[path].addresses['listen']}{PATH}"
                        result = measure(supervisor, workdir, url, shape, warmup, duration, servers)
                        b_port = int(layout.b[path].addresses["listen"].rsplit(":", 1)[1])
                        rows.append({"path": path, "load": shape.label, "round": index + 1,
                                     "hop_connections_open": _established_to(b_port), **result})
            for concurrency in handshake_concurrency:
                for fresh in (False, True):
                    mode = "fresh" if fresh else "keep-alive"
                    emit(f"  measuring {mode} mTLS client straight to B, {concurrency} connection(s) ...")
                    result = measure_tls(supervisor, workdir, layout, fresh, concurrency, warmup, duration)
                    handshakes.append({"client": mode, "concurrency": concurrency, **result})
        finally:
            supervisor.stop_all()
            busy = wait_ports_free(ports)
        if busy:
            raise RuntimeError(f"ports still bound after stopping the benchmark processes: {busy}")
    return _report(rows, handshakes, warmup, duration, len(ports), loadavg_start, quick)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _gateway_cpu_us(row: dict[str, Any]) -> float | None:
    """A's plus B's CPU microseconds per request in the window: the hop's cost apart from core sharing."""
    cores = [row["cpu_cores"].get(role) for role in ("gateway_a", "gateway_b")]
    if None in cores or not row["rps"]:
        return None
    return sum(c for c in cores if c is not None) / row["rps"] * 1e6


def _aggregate(rows: list[dict[str, Any]], path: str, load: str) -> dict[str, float | None]:
    mine = [r for r in rows if r["path"] == path and r["load"] == load]
    out: dict[str, float | None] = {key: _mean([r[key] for r in mine]) for key in ("rps", "p50_ms", "p99_ms")}
    cpu = [_gateway_cpu_us(r) for r in mine]
    out["gw_cpu_us"] = None if None in cpu else _mean([c for c in cpu if c is not None])
    return out


def _opt(value: float | None) -> float | str:
    return "n/a" if value is None else value


def _us_per_request(cores: float | None, rps: float) -> float | str:
    return "n/a" if cores is None or not rps else cores / rps * 1e6


def _report(rows: list[dict[str, Any]], handshakes: list[dict[str, Any]], warmup: float, duration: float,
            port_count: int, loadavg_start: str, quick: bool) -> BenchResult:
    emit(table(
        "provider hop: load generator -> A -> B -> backend (cpu columns in cores, 1.00 = one full core; hop conns = "
        "connections A holds open to B after the window, idle ones from earlier windows included)",
        ("path", "load", "round", "req/s", "p50 ms", "p99 ms", "non-200", "errors", "hop conns", "cpu A", "cpu B",
         "cpu backend", "cpu loadgen", "cpu other"),
        [(r["path"], r["load"], r["round"], r["rps"], r["p50_ms"], r["p99_ms"], r["non_200"], r["errors"],
          r["hop_connections_open"],
          *(_cores(r["cpu_cores"].get(role)) for role in ("gateway_a", "gateway_b", "backend", "loadgen", "other")))
         for r in rows],
    ))
    loads = list(dict.fromkeys(r["load"] for r in rows))
    paths = list(dict.fromkeys(r["path"] for r in rows))
    comparison = []
    for load in loads:
        plain = _aggregate(rows, PLAIN, load)
        for path in paths:
            if path == PLAIN:
                continue
            other = _aggregate(rows, path, load)
            p_rps, o_rps = float(plain["rps"] or 0.0), float(other["rps"] or 0.0)
            p50, o50 = float(plain["p50_ms"] or 0.0), float(other["p50_ms"] or 0.0)
            p99, o99 = float(plain["p99_ms"] or 0.0), float(other["p99_ms"] or 0.0)
            comparison.append({"path": path, "load": load, "plaintext_rps": p_rps, "path_rps": o_rps,
                               "ratio": o_rps / p_rps, "plaintext_p50_ms": p50, "path_p50_ms": o50,
                               "plaintext_p99_ms": p99, "path_p99_ms": o99, "added_p50_ms": o50 - p50,
                               "added_p99_ms": o99 - p99, "plaintext_gw_cpu_us_per_request": plain["gw_cpu_us"],
                               "path_gw_cpu_us_per_request": other["gw_cpu_us"],
                               # what the throughput ratio would be if the gateways' CPU were the only limit
                               "cpu_ratio": None if not plain["gw_cpu_us"] or not other["gw_cpu_us"]
                               else plain["gw_cpu_us"] / other["gw_cpu_us"]})
    emit(table(
        "vs plaintext (means over rounds; ratio = path req/s / plaintext req/s; added = path - plaintext latency; "
        "gw us/req = CPU of A and B per request; cpu ratio = plain gw us/req / path gw us/req)",
        ("path", "load", "plain req/s", "path req/s", "ratio", "plain p50", "path p50", "plain p99", "path p99",
         "added p50 ms", "added p99 ms", "plain gw us/req", "path gw us/req", "cpu ratio"),
        [(c["path"], c["load"], c["plaintext_rps"], c["path_rps"], c["ratio"], c["plaintext_p50_ms"],
          c["path_p50_ms"], c["plaintext_p99_ms"], c["path_p99_ms"], c["added_p50_ms"], c["added_p99_ms"],
          _opt(c["plaintext_gw_cpu_us_per_request"]), _opt(c["path_gw_cpu_us_per_request"]), _opt(c["cpu_ratio"]))
         for c in comparison],
    ))
    emit(table(
        "mTLS client straight to B's provider gateway: keep-alive vs a fresh handshake per request",
        ("client", "conns", "req/s", "p50 ms", "p99 ms", "non-200", "errors", "handshakes", "cpu B", "B us/req",
         "cpu client"),
        [(h["client"], h["concurrency"], h["rps"], h["p50_ms"], h["p99_ms"], h["non_200"], h["errors"],
          h["connections_in_window"], _cores(h["cpu_cores"]["provider"]),
          _us_per_request(h["cpu_cores"]["provider"], h["rps"]), _cores(h["cpu_cores"]["client"]))
         for h in handshakes],
    ))
    handshake_cost = []
    for concurrency in dict.fromkeys(h["concurrency"] for h in handshakes):
        keep = next(h for h in handshakes if h["concurrency"] == concurrency and h["client"] == "keep-alive")
        fresh = next(h for h in handshakes if h["concurrency"] == concurrency and h["client"] == "fresh")
        keep_us, fresh_us = (_us_per_request(h["cpu_cores"]["provider"], h["rps"]) for h in (keep, fresh))
        cost = {"concurrency": concurrency, "keepalive_rps": keep["rps"], "fresh_rps": fresh["rps"],
                "fresh_over_keepalive_rps": fresh["rps"] / keep["rps"],
                "added_p50_ms": fresh["p50_ms"] - keep["p50_ms"], "added_p99_ms": fresh["p99_ms"] - keep["p99_ms"],
                "provider_cpu_us_per_handshake": fresh_us - keep_us
                if isinstance(fresh_us, float) and isinstance(keep_us, float) else None}
        handshake_cost.append(cost)
        emit(f"fresh handshake cost at {concurrency} connection(s): +{cost['added_p50_ms']:.2f} ms p50, "
             f"+{cost['added_p99_ms']:.2f} ms p99, {cost['fresh_over_keepalive_rps']:.0%} of keep-alive req/s"
             + ("" if cost["provider_cpu_us_per_handshake"] is None
                else f", B spends +{cost['provider_cpu_us_per_handshake']:,.0f} us CPU per request"))
    late = max(r["max_late_s"] for r in [*rows, *handshakes])
    if late > 0.1:
        emit(f"note: a load generator started up to {late:.2f} s after the shared start time")
    headline = max((c for c in comparison if c["path"] == MTLS), key=lambda c: c["plaintext_rps"])
    loadavg_end = _loadavg()
    emit(f"load average at start {loadavg_start}, at end {loadavg_end}")
    targets = [Target(f"mTLS hop req/s / plaintext (load {headline['load']})", headline["ratio"], ">=", TARGET_RATIO,
                      "x")]
    for target in targets:
        emit(target.line())
    data = {"warmup_s": warmup, "window_s": duration, "rounds": max(r["round"] for r in rows),
            "notes": list(NOTES[: 1 if quick else 2]), "runs": rows, "comparison": comparison,
            "headline": headline, "handshake": {"runs": handshakes, "cost": handshake_cost},
            "loadavg": {"start": loadavg_start, "end": loadavg_end},
            "ports_checked": port_count, "ports_released": True}
    return BenchResult("provider_hop", data, targets)


# ------------------------------------------------------------------------------------ client entry point


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.provider_hop",
                                     description="the benchmark's mTLS hop client (run by the benchmark)")
    sub = parser.add_subparsers(dest="command", required=True)
    client = sub.add_parser("client", help="closed-loop hop requests straight to a provider gateway over mTLS")
    client.add_argument("--url", required=True, help="loopback https URL of the provider gateway")
    for name in ("--ca", "--cert", "--key", "--result", "--go-file"):
        client.add_argument(name, type=Path, required=True)
    client.add_argument("--revision", required=True, help="the x-ai-routing-revision to send (64 hex)")
    client.add_argument("--fresh", action="store_true", help="a new TLS connection for every request")
    client.add_argument("--concurrency", type=int, default=1)
    client.add_argument("--warmup", type=float, default=1.0)
    client.add_argument("--duration", type=float, default=5.0)
    args = parser.parse_args(argv)
    url = checked_load(parser, args)
    ready = args.result.with_name(args.result.name + ".ready")
    result = asyncio.run(tls_generate(url, args.ca, args.cert, args.key, args.revision, args.fresh,
                                      args.concurrency, args.warmup, args.duration, ready, args.go_file))
    tmp = args.result.with_name(args.result.name + ".tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, args.result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
