"""How many workers a run uses: several on the local backend by default, one on clusters, and whatever the
user's own pytest arguments say."""

from __future__ import annotations

import os

import pytest

from harness import cli
from harness.workers import MAX_AUTO, WAITING_EXTRA, WAITING_PROFILES, order_slow_first, resolve, worker_args


def test_auto_spreads_a_local_run_and_keeps_a_cluster_run_on_one_worker() -> None:
    assert resolve("auto", "local") == min(MAX_AUTO, 2 * (os.cpu_count() or 1))
    assert resolve("auto", "kind") == 1 and resolve("auto", "existing") == 1
    assert resolve("3", "kind") == 3  # asked for explicitly, even on clusters
    assert resolve("1", "local") == 1 and worker_args(1) == []
    assert worker_args(3) == ["-n", "3", "--dist", "worksteal"]


def test_auto_adds_a_worker_where_the_profiles_mostly_wait() -> None:
    base = min(MAX_AUTO, 2 * (os.cpu_count() or 1))
    assert resolve("auto", "local", profiles=["consumer"]) == base  # the twin: traffic-bound, no extra worker
    assert resolve("auto", "local", profiles=["consumer", "producer"]) == base + WAITING_EXTRA
    assert resolve("auto", "local", profiles=["mesh"]) == base + WAITING_EXTRA and "mesh" in WAITING_PROFILES
    assert resolve("auto", "kind", profiles=["mesh"]) == 1 and resolve("3", "local", profiles=["mesh"]) == 3


@pytest.mark.parametrize("extra", [["-n", "2"], ["-n2"], ["--numprocesses=2"], ["-p", "no:xdist"], ["--dist", "load"]])
def test_the_users_own_distribution_wins(extra: list[str]) -> None:
    assert resolve("4", "local", ["-k", "reload"]) == 4  # the twin: other pytest arguments change nothing
    assert resolve("4", "local", extra) == 1


@pytest.mark.parametrize("value", ["0", "-2", "many", ""])
def test_a_bad_worker_count_is_refused(value: str) -> None:
    resolve("2", "local")
    with pytest.raises(ValueError, match="--workers"):
        resolve(value, "local")


def test_packages_with_the_longest_waits_are_collected_first() -> None:
    assert order_slow_first(["consumer", "producer", "provider", "mesh"]) == ["mesh", "producer", "provider",
                                                                              "consumer"]
    assert order_slow_first(["demos.test_grid_glb_demo"]) == ["demos.test_grid_glb_demo"]


def test_a_run_passes_its_workers_to_pytest(monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr(cli, "run_pytest", lambda args, **_: seen.append(list(args)) or 5)
    cli.main(["run", "--profile", "consumer,mesh", "--workers", "3", "--report", f"{tmp_path}/r.yaml"])
    args = seen[0]
    assert args[args.index("-n") + 1] == "3" and args[args.index("--dist") + 1] == "worksteal"
    assert args.index("suites.mesh") < args.index("suites.consumer")
    seen.clear()
    cli.main(["run", "--profile", "consumer", "--workers", "1", "--report", f"{tmp_path}/r.yaml"])
    assert "-n" not in seen[0]
