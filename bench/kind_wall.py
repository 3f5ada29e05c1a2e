"""Wall time of the kind run (`agn-conformance run --backend kind`, the four profiles) and its peak memory.

Opt-in (`--only kind_wall`): it creates up to nine kind clusters and takes the better part of an hour,
so the default bench run leaves it out, and it is skipped with the preflight's reason where kind cannot
run (no Docker engine, no node image, no kind or kubectl). Beside the whole run's wall time it gives the
seconds spent in each profile's tests (a grid's bring-up counts in the first test that needs it) and the
host's peak memory in use (MemTotal - MemAvailable, sampled each second), the clusters' share included.
"""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

from bench.conformance_wall import _print_breakdown, run_profile
from bench.core import ROOT, BenchResult, emit, table
from harness.backends.kube.kind import preflight_kind
from harness.backends.runner import Runner

PROFILES = "consumer,producer,provider,mesh"
TIMEOUT_S = 3 * 3600.0


def used_memory_mib() -> float:
    """MemTotal - MemAvailable of the host, in MiB (what every process and container holds)."""
    fields: dict[str, int] = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        name, _, rest = line.partition(":")
        fields[name] = int(rest.split()[0])
    return (fields["MemTotal"] - fields["MemAvailable"]) / 1024


class PeakMemory:
    """Samples used memory each second on a thread until stopped; keeps the baseline and the peak."""

    def __init__(self) -> None:
        self.baseline = used_memory_mib()
        self.peak = self.baseline
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(1.0):
            self.peak = max(self.peak, used_memory_mib())

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run(quick: bool) -> BenchResult:
    reason = preflight_kind(Runner(), root=ROOT)
    if quick or reason:
        why = "not run in --quick" if quick else f"kind cannot run here: {reason}"
        emit(f"kind_wall: skipped ({why})")
        return BenchResult("kind_wall", skipped=why)
    with tempfile.TemporaryDirectory(prefix="agn-bench-kind-") as tmp, PeakMemory() as memory:
        result = run_profile(PROFILES, Path(tmp), name=f"kind: {PROFILES}", extra=("--backend", "kind"),
                             timeout_s=TIMEOUT_S)
    by_profile = (result.get("breakdown") or {}).get("profiles_s", {})
    code = "-" if result["exit_code"] is None else result["exit_code"]
    emit(table("kind run (the four profiles, one after another in one session)",
               ("what", "value"),
               [("wall s", result["wall_s"]), ("exit code", code),
                *((f"{p} tests s", s) for p, s in sorted(by_profile.items())),
                ("host memory in use before, MiB", memory.baseline), ("peak host memory in use, MiB", memory.peak)]))
    _print_breakdown(result)
    return BenchResult("kind_wall", {"run": result, "seconds_by_profile": by_profile,
                                     "memory_mib": {"baseline": memory.baseline, "peak": memory.peak}})
