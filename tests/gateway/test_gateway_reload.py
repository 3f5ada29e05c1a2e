"""Hot reload in-process: kubelet-style symlink swaps, unchanged revisions, LKG on bad input."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from gateway_support import (
    ProjectedDir,
    candidate,
    envelope,
    envelope_doc,
    metric_value,
    revision_of,
    route_filter,
)

from reference.gateway.metrics import GatewayMetrics
from reference.gateway.reload import OverlayReloader, load_cold_start
from reference.overlay import OverlayRejected

MODEL = "granite"


async def wait_until(predicate: Any, what: str, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def reloads(metrics: GatewayMetrics, result: str) -> float:
    value = metric_value(
        metrics.render().decode(), "praxis_ai_intelligent_route_snapshot_reloads_total", result=result
    )
    return value or 0.0


def setup(tmp_path: Path, first: bytes, **options: Any) -> tuple[Any, ProjectedDir, GatewayMetrics]:
    projected = ProjectedDir(tmp_path / "routing")
    projected.publish(first)
    metrics = GatewayMetrics()
    route = route_filter(
        {"overlay_file": str(projected.path), "reload": {"debounce_ms": 50}, **options},
        first,
        metrics=metrics,
    )
    return route, projected, metrics


def test_symlink_swap_is_accepted_and_bad_updates_keep_the_last_good(tmp_path: Path) -> None:
    first = envelope([candidate(MODEL, "site-a", "a")])
    second = envelope([candidate(MODEL, "site-b", "b")])
    route, projected, metrics = setup(tmp_path, first, clusters=["a", "b"])

    async def main() -> None:
        reloader = OverlayReloader(route, metrics)
        await reloader.start()
        try:
            assert sum(reloads(metrics, r) for r in ("accepted", "unchanged", "rejected", "read_error")) == 0
            projected.publish(second)
            await wait_until(lambda: route.store.current.revision == revision_of(second), "second revision")
            assert reloads(metrics, "accepted") == 1

            doc = envelope_doc([candidate(MODEL, "site-b", "b")])
            doc["provenance"]["rendered_at"] = "2027-01-01T00:00:00Z"
            doc["provenance"]["source_generation"] = 9
            serving = route.store.current
            projected.publish(json.dumps(doc).encode())
            await wait_until(lambda: reloads(metrics, "unchanged") == 1, "unchanged result")
            assert route.store.current is serving, "an unchanged revision does not replace the snapshot"

            projected.publish(b'{"schema_version": "1.0.0", "revision": 3')
            await wait_until(lambda: reloads(metrics, "rejected") == 1, "rejected result")
            projected.publish(envelope([candidate(MODEL, "site-c", "not-allowed")]))
            await wait_until(lambda: reloads(metrics, "rejected") == 2, "allowlist rejection")
            assert route.store.current is serving

            target = (projected.root / "..data").resolve() / "routing-overlay.json"
            target.unlink()
            await reloader.reload()
            assert reloads(metrics, "read_error") == 1
            assert route.store.current is serving
        finally:
            await reloader.stop()

    asyncio.run(main())


def test_changes_between_cold_start_and_watch_are_caught_up(tmp_path: Path) -> None:
    first = envelope([candidate(MODEL, "site-a", "a")])
    second = envelope([candidate(MODEL, "site-b", "b")])
    route, projected, metrics = setup(tmp_path, first)
    projected.publish(second)  # after the snapshot was built, before the watcher starts

    async def main() -> None:
        reloader = OverlayReloader(route, metrics)
        await reloader.start()
        try:
            assert route.store.current.revision == revision_of(second)
            assert reloads(metrics, "accepted") == 1
        finally:
            await reloader.stop()

    asyncio.run(main())


def test_in_place_rewrite_of_a_plain_file_is_seen(tmp_path: Path) -> None:
    first = envelope([candidate(MODEL, "site-a", "a")])
    second = envelope([candidate(MODEL, "site-b", "b")])
    path = tmp_path / "routing-overlay.json"
    path.write_bytes(first)
    metrics = GatewayMetrics()
    route = route_filter({"overlay_file": str(path), "reload": {"debounce_ms": 0}}, first, metrics=metrics)

    async def main() -> None:
        reloader = OverlayReloader(route, metrics)
        await reloader.start()
        try:
            tmp = tmp_path / ".routing-overlay.json.tmp"
            tmp.write_bytes(second)
            tmp.replace(path)
            await wait_until(lambda: route.store.current.revision == revision_of(second), "second revision")
        finally:
            await reloader.stop()

    asyncio.run(main())


def _rejection_cases() -> list[Any]:
    from harness import contract

    scope = contract.ScopeSpec("net-1", "gw", "ns", "site-a")
    base = contract.envelope([contract.candidate(MODEL, "site-a", c) for c in ("a", "b")], scope)
    return contract.rejection_cases(base)


@pytest.mark.parametrize("case", _rejection_cases(), ids=lambda c: c.name)
def test_cold_start_and_reload_refuse_the_same_overlays(tmp_path: Path, case: Any) -> None:
    """One validation serves both paths: what fails a cold start is rejected on reload, from the twin's LKG."""
    bad = tmp_path / "bad.json"
    bad.write_bytes(case.data)
    with pytest.raises(OverlayRejected):
        load_cold_start(bad, None, None)
    route, projected, metrics = setup(tmp_path, case.twin)
    serving = route.store.current
    projected.publish(case.data)

    async def main() -> None:
        assert await OverlayReloader(route, metrics).reload() == "rejected", case.name
        assert route.store.current is serving

    asyncio.run(main())


def test_the_watch_step_comes_from_the_environment_within_bounds() -> None:
    from reference.gateway.reload import DEFAULT_WATCH_STEP_MS, WATCH_STEP_ENV, watch_step_ms

    assert watch_step_ms({}) == DEFAULT_WATCH_STEP_MS
    assert watch_step_ms({WATCH_STEP_ENV: "10"}) == 10
    assert watch_step_ms({WATCH_STEP_ENV: "0"}) == 1
    assert watch_step_ms({WATCH_STEP_ENV: "tiny"}) == DEFAULT_WATCH_STEP_MS


def test_a_validation_prepared_for_other_bytes_is_not_used(tmp_path: Path) -> None:
    """What is swapped in is what the file holds when the debounce ends, whatever was prepared before."""
    first = envelope([candidate(MODEL, "site-a", "a")])
    second = envelope([candidate(MODEL, "site-b", "b")])
    third = envelope([candidate(MODEL, "site-a", "a"), candidate(MODEL, "site-b", "b")])
    route, projected, metrics = setup(tmp_path, first, clusters=["a", "b"])

    async def main() -> None:
        reloader = OverlayReloader(route, metrics)
        projected.publish(second)
        prepared = await reloader._prepare()
        assert prepared is not None and prepared.snapshot is not None
        projected.publish(third)  # changed again inside the debounce window
        assert await reloader.reload(prepared) == "accepted"
        assert route.store.current.revision == revision_of(third)

        projected.publish(b'{"schema_version": "1.0.0", "revision": 3')
        rejected = await reloader._prepare()
        assert rejected is not None and rejected.rejected is not None
        assert await reloader.reload(rejected) == "rejected"
        projected.publish(second)
        assert await reloader.reload(rejected) == "accepted", "a rejection of older bytes is not reused"
        assert route.store.current.revision == revision_of(second)

    asyncio.run(main())
