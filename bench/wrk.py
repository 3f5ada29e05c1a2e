"""Drive load with `wrk` (a C load generator, Debian package `wrk`) and read its results as JSON.

The benchmarks' own Python generator tops out well below what the gateway and backend can serve on a
small machine, so throughput figures come from wrk where it is installed. A Lua script makes every request
the same POST the Python generator sends and, when the run ends, prints one ``WRK_JSON {...}`` line
(requests, duration, errors by kind, latency percentiles in microseconds), so nothing depends on the
layout of wrk's human-readable report.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.core import child_env
from bench.loadgen import loopback_only
from harness.process import ManagedProcess, Supervisor

MARKER = "WRK_JSON "
#: Seconds a run may take beyond its duration before it counts as hung (startup, the final report).
GRACE_S = 30.0
SCRIPT = """\
wrk.method = "POST"
wrk.body = %(body)s
wrk.headers["Content-Type"] = "application/json"
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests":%%d,"duration_us":%%d,"bytes":%%d,'
    .. '"errors":{"connect":%%d,"read":%%d,"write":%%d,"status":%%d,"timeout":%%d},'
    .. '"latency_us":{"min":%%d,"max":%%d,"mean":%%.1f,"stdev":%%.1f,"p50":%%d,"p90":%%d,"p99":%%d,"p999":%%d}}\\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.min, latency.max, latency.mean, latency.stdev,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9)))
end
"""


def find_wrk() -> str | None:
    """The wrk executable on PATH, or None."""
    return shutil.which("wrk")


def lua_string(text: str) -> str:
    """`text` as a Lua string literal (JSON escapes are valid Lua escapes for the characters used here)."""
    return json.dumps(text)


def write_script(directory: Path, body: str) -> Path:
    path = directory / "post.lua"
    path.write_text(SCRIPT % {"body": lua_string(body)})
    return path


class WrkError(RuntimeError):
    """wrk exited badly or printed no result line; carries its output."""


def parse_output(text: str) -> dict[str, Any]:
    """The result the script printed: the last ``WRK_JSON`` line of wrk's output, decoded and checked."""
    lines = [line[len(MARKER):] for line in text.splitlines() if line.startswith(MARKER)]
    if not lines:
        raise WrkError(f"wrk printed no {MARKER.strip()} line:\n{text[-2000:]}")
    try:
        doc = json.loads(lines[-1])
    except json.JSONDecodeError as exc:
        raise WrkError(f"wrk result line is not JSON ({exc}): {lines[-1][:300]}") from exc
    for key in ("requests", "duration_us", "errors", "latency_us"):
        if key not in doc:
            raise WrkError(f"wrk result lacks {key!r}: {lines[-1][:300]}")
    return doc


@dataclass(frozen=True)
class WrkRun:
    """One wrk run: its decoded result, and the summary figures derived from it."""

    result: dict[str, Any]
    connections: int
    threads: int

    @property
    def socket_errors(self) -> int:
        errors = self.result["errors"]
        return int(sum(errors[k] for k in ("connect", "read", "write", "timeout")))

    @property
    def non_2xx(self) -> int:
        """Responses with a status of 400 or more (wrk counts those as status errors)."""
        return int(self.result["errors"]["status"])

    @property
    def rps(self) -> float:
        """Completed responses per second of the run, error statuses excluded."""
        ok = self.result["requests"] - self.non_2xx
        return ok / (self.result["duration_us"] / 1e6)

    def as_row(self) -> dict[str, Any]:
        latency = self.result["latency_us"]
        return {
            "connections": self.connections,
            "threads": self.threads,
            "requests": int(self.result["requests"]),
            "rps": self.rps,
            "p50_ms": latency["p50"] / 1000,
            "p90_ms": latency["p90"] / 1000,
            "p99_ms": latency["p99"] / 1000,
            "mean_ms": latency["mean"] / 1000,
            "non_2xx": self.non_2xx,
            "socket_errors": self.socket_errors,
            "errors": dict(self.result["errors"]),
        }


def start_wrk(supervisor: Supervisor, wrk: str, script: Path, url: str, connections: int, threads: int,
              seconds: int) -> ManagedProcess:
    """Start wrk against a loopback `url` for whole `seconds`; `finish_wrk` collects it."""
    loopback_only(url)
    if seconds < 1:
        raise ValueError("wrk runs for whole seconds (at least 1)")
    threads = max(1, min(threads, connections))
    argv = [wrk, f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--timeout", "10s", "-s", str(script), url]
    return supervisor.start("bench-wrk", argv, env=child_env())


def finish_wrk(supervisor: Supervisor, proc: ManagedProcess, connections: int, seconds: int) -> WrkRun:
    """Wait for a started wrk run and decode its result; WrkError when it failed or hung."""
    try:
        code = proc.wait(seconds + GRACE_S)
    finally:
        supervisor.stop(proc)
    text = proc.log_text()
    if code != 0:
        raise WrkError(f"wrk exited with {code}:\n{text[-2000:]}")
    threads = next((int(a[2:]) for a in proc.argv if a.startswith("-t")), 1)
    return WrkRun(parse_output(text), connections, threads)


def run_wrk(supervisor: Supervisor, wrk: str, script: Path, url: str, connections: int, threads: int,
            seconds: int) -> WrkRun:
    """One wrk run from start to result."""
    proc = start_wrk(supervisor, wrk, script, url, connections, threads, seconds)
    return finish_wrk(supervisor, proc, connections, seconds)
