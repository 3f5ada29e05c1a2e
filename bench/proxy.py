"""Proxied throughput and latency: the same load generator against a fake backend directly and through
the reference gateway, in the same run, side by side.

The machine's cores are shared by the load generator(s), the gateway and the backend, so the direct
run is also the load generator's own ceiling: the gateway figure can never exceed it. Each
configuration (number of load-generator processes x connections each) is measured direct and then
through the gateway. A single-connection run shows the latency the gateway adds without queueing.
The CPU each process used in the measured window is read from /proc so the reader can see who was
saturated.

The Python generator saturates a core before the gateway does, so where `wrk` is installed the same
comparison (backend direct, then through the gateway, 32 connections and 1) is also driven by wrk, and the
targets are judged on wrk's figures: the gateway's throughput as a ratio of the backend's own. Without
wrk those figures are skipped with the reason and the targets fall back to the Python generator's best
shape.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.core import ROOT, BenchResult, Target, child_env, emit, percentile, table
from bench.overlays import MODEL
from bench.services import check_routes, start_backend, start_gateway, wait_ports_free
from bench.wrk import find_wrk, finish_wrk, run_wrk, start_wrk, write_script
from harness.process import ManagedProcess, Supervisor

TARGET_RPS = 5_000.0
TARGET_ADDED_P50_MS = 2.0
PATH = "/v1/chat/completions"
READY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class LoadShape:
    """How load is generated: `processes` generator processes with `concurrency` connections each."""

    processes: int
    concurrency: int

    @property
    def label(self) -> str:
        return f"{self.processes}x{self.concurrency}"


# 1x1 is unloaded latency: what one request costs with no queueing behind other requests
FULL_SHAPES = (LoadShape(1, 32), LoadShape(2, 16), LoadShape(1, 1))
QUICK_SHAPES = (LoadShape(1, 32),)
#: wrk connection counts (one wrk thread: on a small machine the gateway and backend need the other cores)
WRK_FULL_CONNECTIONS = (32, 1)
WRK_QUICK_CONNECTIONS = (32,)
WRK_THREADS = 1
#: The request body every generator sends (the model the bench overlay routes).
BODY = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hello"}]})


def _cpu_seconds(pid: int) -> float | None:
    """User+system CPU seconds of a process so far, from /proc (None where unavailable)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine_busy_seconds() -> float | None:
    """CPU seconds all cores spent busy since boot (everything but idle and iowait), from /proc/stat."""
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    ticks = [int(v) for v in first[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def _cpu_sample(pids: dict[str, list[int]]) -> dict[str, float | None]:
    out: dict[str, float | None] = {"machine": _machine_busy_seconds()}
    for role, ids in pids.items():
        values = [_cpu_seconds(pid) for pid in ids]
        out[role] = None if any(v is None for v in values) else sum(v for v in values if v is not None)
    return out


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def _sleep_until(wall: float) -> None:
    """Wait for a point in wall-clock time (the measured window is defined by time itself)."""
    while (remaining := wall - time.time()) > 0:
        time.sleep(min(remaining, 0.1))


def _wait_ready(procs: list[ManagedProcess], ready: list[Path]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not all(path.exists() for path in ready):
        for proc in procs:
            if not proc.running():
                raise RuntimeError(f"load generator exited with {proc.returncode}:\n{proc.log_tail()}")
        if time.monotonic() >= deadline:
            raise RuntimeError(f"load generators not ready within {READY_TIMEOUT_S:.0f}s")
        time.sleep(0.01)


def measure(supervisor: Supervisor, workdir: Path, url: str, shape: LoadShape, warmup: float, duration: float,
            servers: dict[str, int]) -> dict[str, Any]:
    """One measured window of `shape` against `url`; merged throughput, latency and CPU shares."""
    run_dir = Path(tempfile.mkdtemp(prefix="load-", dir=workdir))
    go_file = run_dir / "go"
    results = [run_dir / f"result-{i}.json" for i in range(shape.processes)]
    procs: list[ManagedProcess] = []
    try:
        for result in results:
            argv = [sys.executable, "-m", "bench.loadgen", "--url", url,
                    "--concurrency", str(shape.concurrency), "--warmup", str(warmup),
                    "--duration", str(duration), "--result", str(result), "--go-file", str(go_file)]
            procs.append(supervisor.start("bench-loadgen", argv, env=child_env(), cwd=ROOT))
        _wait_ready(procs, [r.with_name(r.name + ".ready") for r in results])
        start = time.time() + 0.05
        tmp = run_dir / "go.tmp"
        tmp.write_text(repr(start))
        os.replace(tmp, go_file)
        pids = {**{role: [pid] for role, pid in servers.items()}, "loadgen": [p.pid for p in procs]}
        _sleep_until(start + warmup)
        before = _cpu_sample(pids)
        _sleep_until(start + warmup + duration)
        after = _cpu_sample(pids)
        for proc in procs:
            code = proc.wait(warmup + duration + 30.0)
            if code != 0:
                raise RuntimeError(f"load generator exit {code}:\n{proc.log_tail()}")
    finally:
        for proc in procs:
            supervisor.stop(proc)
    docs = [json.loads(r.read_text()) for r in results]
    latencies = sorted(v for doc in docs for v in doc["latencies_us"])
    ok = len(latencies)
    if ok == 0:
        raise RuntimeError(f"no successful request to {url}: {[(d['statuses'], d['errors']) for d in docs]}")
    non_ok = sum(n for doc in docs for status, n in doc["statuses"].items() if status != "200")
    errors = sum(sum(doc["errors"].values()) for doc in docs)
    cpu = _cpu_shares(before, after, duration, pids)
    return {
        "requests": ok,
        "rps": ok / duration,
        "p50_ms": percentile(latencies, 50) / 1000,
        "p99_ms": percentile(latencies, 99) / 1000,
        "mean_ms": sum(latencies) / ok / 1000,
        "non_200": non_ok,
        "errors": errors,
        "max_late_s": max(doc["late_s"] for doc in docs),
        "cpu_cores": cpu,
    }


def _cpu_shares(before: dict[str, float | None], after: dict[str, float | None], window: float,
                pids: dict[str, list[int]]) -> dict[str, float | None]:
    """Cores each role used in the window, and 'other': the rest of the machine's busy time."""
    cpu: dict[str, float | None] = {}
    for role in before:
        first, last = before[role], after[role]
        cpu[role] = None if first is None or last is None else (last - first) / window
    ours = [cpu[role] for role in pids]
    machine = cpu.pop("machine")
    # whatever else ran on the machine in the window (other processes, the kernel outside our processes)
    known = None if machine is None or None in ours else sum(v or 0.0 for v in ours)
    cpu["other"] = None if machine is None or known is None else max(0.0, machine - known)
    return cpu


def measure_wrk(supervisor: Supervisor, wrk: str, script: Path, url: str, connections: int, warmup: int,
                duration: int, servers: dict[str, int]) -> dict[str, Any]:
    """A warm-up run, then one measured wrk run; its figures and the CPU shares in (most of) its window."""
    if warmup > 0:
        run_wrk(supervisor, wrk, script, url, connections, WRK_THREADS, warmup)
    proc = start_wrk(supervisor, wrk, script, url, connections, WRK_THREADS, duration)
    pids = {**{role: [pid] for role, pid in servers.items()}, "loadgen": [proc.pid]}
    began = time.time()
    # inside wrk's run: after its connections are up, before it stops sending
    first, last = began + min(0.2, duration / 4), began + duration - min(0.1, duration / 4)
    _sleep_until(first)
    before = _cpu_sample(pids)
    _sleep_until(last)
    after = _cpu_sample(pids)
    run = finish_wrk(supervisor, proc, connections, duration)
    return {**run.as_row(), "cpu_cores": _cpu_shares(before, after, last - first, pids)}


def _cpu_per_request(row: dict[str, Any]) -> float | None:
    """Gateway CPU microseconds per proxied request in the window: its cost independent of core sharing."""
    cores = row["cpu_cores"].get("gateway")
    return None if cores is None or not row["rps"] else cores / row["rps"] * 1e6


def _cores(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def run(quick: bool) -> BenchResult:
    warmup, duration = (0.3, 1.0) if quick else (1.0, 5.0)
    shapes = QUICK_SHAPES if quick else FULL_SHAPES
    emit(f"proxy: POST {PATH} ({warmup:g} s warm-up + {duration:g} s measured per run), "
         f"{os.cpu_count()} cores shared by load generator(s), gateway and backend; "
         f"load average {_loadavg()}")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="agn-bench-proxy-") as tmp:
        workdir = Path(tmp)
        supervisor = Supervisor(workdir / "logs")
        ports: list[tuple[str, int]] = []
        busy: list[tuple[str, int]] = []
        try:
            backend = start_backend(supervisor)
            ports += backend.ports()
            gateway = start_gateway(supervisor, workdir, backend.addresses["listen"])
            ports += gateway.ports()
            urls = {"direct": f"http://{backend.addresses['listen']}{PATH}",
                    "gateway": f"http://{gateway.addresses['listen']}{PATH}"}
            for url in urls.values():
                check_routes(url)
            servers = {"backend": backend.process.pid, "gateway": gateway.process.pid}
            for shape in shapes:
                for path, url in urls.items():
                    emit(f"  measuring {path} with {shape.processes} load generator(s) x {shape.concurrency} "
                         "connections ...")
                    # the gateway's CPU is only meaningful on the runs that go through it
                    roles = servers if path == "gateway" else {"backend": servers["backend"]}
                    result = measure(supervisor, workdir, url, shape, warmup, duration, roles)
                    rows.append({"path": path, "load": shape.label, "processes": shape.processes,
                                 "concurrency": shape.concurrency, **result})
            wrk = find_wrk()
            if wrk is None:
                wrk_section: dict[str, Any] = {"skipped": WRK_MISSING}
            else:
                wrk_section = {"runs": _wrk_runs(supervisor, wrk, workdir, urls, servers, quick)}
        finally:
            supervisor.stop_all()
            busy = wait_ports_free(ports)
        if busy:
            raise RuntimeError(f"ports still bound after stopping the benchmark processes: {busy}")
    return _report(rows, warmup, duration, len(ports), wrk_section)


WRK_MISSING = "wrk is not installed (Debian: apt-get install wrk); the wrk throughput figures are skipped"


def _wrk_runs(supervisor: Supervisor, wrk: str, workdir: Path, urls: dict[str, str], servers: dict[str, int],
              quick: bool) -> list[dict[str, Any]]:
    """Direct then through the gateway with wrk, for each connection count."""
    warmup, duration = (1, 1) if quick else (1, 5)
    script = write_script(workdir, BODY)
    rows = []
    for connections in WRK_QUICK_CONNECTIONS if quick else WRK_FULL_CONNECTIONS:
        for path, url in urls.items():
            emit(f"  measuring {path} with wrk, {WRK_THREADS} thread x {connections} connections "
                 f"({warmup} s warm-up + {duration} s) ...")
            roles = servers if path == "gateway" else {"backend": servers["backend"]}
            result = measure_wrk(supervisor, wrk, script, url, connections, warmup, duration, roles)
            rows.append({"path": path, "load": f"wrk {connections}c", **result})
    return rows


def _wrk_report(section: dict[str, Any]) -> list[dict[str, Any]]:
    """Print wrk's table and its gateway-vs-direct pairs; returns the pairs (none when wrk was skipped)."""
    if "skipped" in section:
        emit(f"wrk: SKIPPED ({section['skipped']})")
        return []
    rows = section["runs"]
    emit(table(
        "proxy throughput and latency with wrk (direct = the backend's own ceiling with this generator)",
        ("path", "load", "req/s", "p50 ms", "p99 ms", "mean ms", "non-2xx", "socket errors", "cpu gw",
         "cpu backend", "cpu wrk", "cpu other"),
        [(r["path"], r["load"], r["rps"], r["p50_ms"], r["p99_ms"], r["mean_ms"], r["non_2xx"], r["socket_errors"],
          *(_cores(r["cpu_cores"].get(role)) for role in ("gateway", "backend", "loadgen", "other")))
         for r in rows],
    ))
    pairs = _emit_pairs(rows, "gateway vs direct with wrk")
    section["comparison"] = pairs
    return pairs


def _emit_pairs(rows: list[dict[str, Any]], title: str) -> list[dict[str, Any]]:
    """Print the gateway-against-direct table of `rows` under `title`, and return its pairs."""
    pairs = _pairs(rows)
    emit(table(
        f"{title} (ratio = gateway req/s / direct req/s; added = gateway - direct latency)",
        ("load", "direct req/s", "gateway req/s", "ratio", "added p50 ms", "added p99 ms", "gw cpu us/req"),
        [(p["load"], p["direct_rps"], p["gateway_rps"], p["ratio"], p["added_p50_ms"], p["added_p99_ms"],
          "n/a" if p["gateway_cpu_us_per_request"] is None else p["gateway_cpu_us_per_request"])
         for p in pairs],
    ))
    return pairs


def _pairs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per load: the gateway run against the direct run of the same generator and shape."""
    pairs = []
    for label in dict.fromkeys(r["load"] for r in rows):
        direct = next(r for r in rows if r["load"] == label and r["path"] == "direct")
        via = next(r for r in rows if r["load"] == label and r["path"] == "gateway")
        pairs.append({
            "load": label,
            "direct_rps": direct["rps"],
            "gateway_rps": via["rps"],
            "ratio": via["rps"] / direct["rps"],
            "added_p50_ms": via["p50_ms"] - direct["p50_ms"],
            "added_p99_ms": via["p99_ms"] - direct["p99_ms"],
            "gateway_cpu_us_per_request": _cpu_per_request(via),
        })
    return pairs


def _report(rows: list[dict[str, Any]], warmup: float, duration: float, port_count: int,
            wrk_section: dict[str, Any]) -> BenchResult:
    emit(table(
        "proxy throughput and latency (same load generator; direct = its own ceiling)",
        ("path", "load", "req/s", "p50 ms", "p99 ms", "mean ms", "non-200", "errors", "cpu gw", "cpu backend",
         "cpu loadgen", "cpu other"),
        [(r["path"], r["load"], r["rps"], r["p50_ms"], r["p99_ms"], r["mean_ms"], r["non_200"], r["errors"],
          *(_cores(r["cpu_cores"].get(role)) for role in ("gateway", "backend", "loadgen", "other")))
         for r in rows],
    ))
    pairs = _emit_pairs(rows, "gateway vs direct")
    best = max(pairs, key=lambda p: p["gateway_rps"])
    late = max(r["max_late_s"] for r in rows)
    if late > 0.1:
        emit(f"note: a load generator started up to {late:.2f} s after the shared start time, "
             "so the measured windows overlap less")
    ceiling = max(p["direct_rps"] for p in pairs)
    emit("cpu columns: cores used in the measured window (1.00 = one full core); "
         "'other' is load on the machine from anything else")
    emit(f"Python load generator ceiling (direct to the backend): {ceiling:,.0f} req/s")
    wrk_pairs = _wrk_report(wrk_section)
    if wrk_pairs:
        headline = max(wrk_pairs, key=lambda p: p["gateway_rps"])
        source = f"wrk, {headline['load'].removeprefix('wrk ').removesuffix('c')} connections"
        emit(f"wrk: the gateway serves {headline['ratio']:.0%} of the backend-direct throughput "
             f"({headline['gateway_rps']:,.0f} vs {headline['direct_rps']:,.0f} req/s, {source})")
    else:
        headline, source = best, f"Python load generator, best load shape {best['load']}"
        if ceiling < TARGET_RPS:
            emit(f"note: the Python load generator's own ceiling is below the {TARGET_RPS:,.0f} req/s target on "
                 "this machine, so that target cannot be reached with it whatever the gateway does")
    targets = [
        Target(f"proxied req/s ({source})", headline["gateway_rps"], ">=", TARGET_RPS, "req/s"),
        Target(f"added p50 latency ({source})", headline["added_p50_ms"], "<=", TARGET_ADDED_P50_MS, "ms"),
    ]
    for target in targets:
        emit(target.line())
    data = {"warmup_s": warmup, "window_s": duration, "runs": rows, "comparison": pairs,
            "headline": headline, "headline_source": source, "wrk": wrk_section, "ports_checked": port_count,
            "ports_released": True}
    return BenchResult("proxy", data, targets)
