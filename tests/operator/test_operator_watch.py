"""The operator's `dir` source is watched: a resource change reconciles at once, not at the next poll."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import yaml

from harness import resources
from reference.operator.core.model import SystemClock
from reference.operator.loop import Operator

NETWORK, SITE = "watch-net", "watch-site"


def write_network(manifests: Path, token: str) -> None:
    obj = resources.grid_network(NETWORK, [resources.gateway_ref(SITE, "gw", "agn-system")], routing="scoreFirst",
                                 scoring="queueDepth", selection="deterministic", refresh="300s")
    obj["metadata"]["annotations"] = {"grid.praxis.fast/force-refresh": token}
    tmp = manifests / ".network.yaml.tmp"
    tmp.write_text(yaml.safe_dump(obj))
    os.replace(tmp, manifests / "network.yaml")


async def until(predicate: object, what: str, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():  # type: ignore[operator]
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def test_a_resource_change_reconciles_long_before_the_next_poll(tmp_path: Path) -> None:
    manifests, out = tmp_path / "manifests", tmp_path / "out"
    manifests.mkdir()
    write_network(manifests, "first")
    provider = resources.inference_provider("p1", NETWORK, site=SITE, cluster="p1", models=("m",),
                                            endpoint="http://127.0.0.1:9")
    (manifests / "providers.yaml").write_text(yaml.safe_dump(provider))
    operator = Operator.for_directories(manifests, out, SystemClock(), poll=60.0)

    async def main() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(operator.run(stop))
        try:
            await until(lambda: operator.triggers.last_run is not None, "the initial reconcile")
            first = operator.triggers.last_tokens
            write_network(manifests, "second")
            # a 60 s poll would not come round within the deadline: only the watch can wake the loop
            await until(lambda: operator.triggers.last_tokens != first, "a reconcile of the new annotation")
        finally:
            stop.set()
            await asyncio.wait_for(task, timeout=10.0)

    asyncio.run(main())
