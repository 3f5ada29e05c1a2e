"""The command-line tools the Kubernetes backends need, and the checks that they are there and usable."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from harness import http_get
from harness.backends.runner import Runner
from harness.waiting import poll_until


def repo_root() -> Path:
    """The checkout holding reference/Dockerfile, manifests/ and clusters/kind/."""
    here = Path(__file__).resolve().parents[3]
    return here if (here / "manifests").is_dir() else Path.cwd()


def missing_tools(runner: Runner, tools: Sequence[str]) -> list[str]:
    return [tool for tool in tools if runner.which(tool) is None]


#: The oldest kubectl the backends work with: `kubectl patch --subresource=status` appeared in 1.24.
MIN_KUBECTL = (1, 24)


def kubectl_too_old(runner: Runner) -> str | None:
    """Why the kubectl on PATH is too old (None: new enough, or its version cannot be read)."""
    done = runner.run(["kubectl", "version", "--client", "-o", "json"], check=False, timeout=60)
    try:
        version = json.loads(done.stdout)["clientVersion"]
        found = (int(version["major"]), int(re.sub(r"\D.*$", "", str(version["minor"]))))
    except (ValueError, KeyError, TypeError):
        return None  # an unusual build: the first command that needs a newer kubectl says so itself
    if found < MIN_KUBECTL:
        return (f"kubectl {found[0]}.{found[1]} is too old: the cluster backends need kubectl >= "
                f"{MIN_KUBECTL[0]}.{MIN_KUBECTL[1]} (patch --subresource=status)")
    return None


def wait_http(url: str, what: str, timeout: float) -> None:
    poll_until(lambda: http_get.get(url, timeout=2.0).status_code, lambda s: s == 200, what=f"{what} to answer 200",
               timeout=timeout, interval=0.1, max_interval=1.0)
