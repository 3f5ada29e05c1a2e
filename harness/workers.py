"""How many pytest-xdist workers a run spreads its tests over.

Most of a conformance run is waiting: for a reload to be served, a reconcile, a SWIM suspicion, a duration
the guide defines. The CPU is idle meanwhile, so a run on the local backend spreads its tests over a few
workers by default (each with its own grid on its own loopback block), more than the machine has cores.
The waits themselves are not shortened: every deadline, sample size and error rate is the same as in a
one-worker run. Clusters are another matter (each worker would build its own), so other backends run
with one worker unless told otherwise. A run whose pytest arguments already say how to distribute (``-n``,
``--dist``, ``-p no:xdist``) is left as the user asked.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence

__all__ = ["AUTO", "MAX_AUTO", "WAITING_EXTRA", "WAITING_PROFILES", "order_slow_first", "resolve", "worker_args"]

AUTO = "auto"
#: Workers `auto` starts on the local backend: twice the cores, at most this many (WAITING_EXTRA more for
#: the WAITING_PROFILES). Past it, start-up and contention cost more than overlapping saves.
MAX_AUTO = 4
#: Profiles whose tests mostly wait on an operator's cadences (minimum state durations, hold-downs, SWIM
#: suspicion), where a run measured faster with more workers: on 2 cores the four default profiles took
#: 65 s with 5 workers against 75 s with 4, and 61 s with 6 against 64 s with 5 (medians of four pairs; 7
#: took 67 s), while the consumer profile alone took 22 s with 5 against 21 s with 4.
WAITING_PROFILES = ("producer", "mesh")
WAITING_EXTRA = 2
#: Suite packages whose tests wait longest (they wait out the guide's default durations) go first, so a
#: long test never starts last and holds the run open while the other workers are idle.
SLOW_FIRST = ("mesh", "producer", "demos", "serving", "provider", "consumer")
_USER_DISTRIBUTES = ("-n", "--numprocesses", "--dist", "--maxprocesses", "-d", "--tx")


def _user_distributes(extra: Sequence[str]) -> bool:
    for index, arg in enumerate(extra):
        if arg.split("=", 1)[0] in _USER_DISTRIBUTES or (arg.startswith("-n") and arg[2:].isdigit()):
            return True
        if arg == "-p" and index + 1 < len(extra) and extra[index + 1] == "no:xdist":
            return True
        if arg == "-pno:xdist":
            return True
    return False


def resolve(value: str, backend: str, extra: Sequence[str] = (), profiles: Sequence[str] = ()) -> int:
    """The workers of a run of `profiles`: `value` is a count or ``auto``; ValueError for anything else."""
    text = value.strip().lower()
    if text == AUTO:
        wanted = min(MAX_AUTO, 2 * (os.cpu_count() or 1)) if backend == "local" else 1
        if backend == "local" and any(name.split(".", 1)[0] in WAITING_PROFILES for name in profiles):
            wanted += WAITING_EXTRA
    else:
        try:
            wanted = int(text)
        except ValueError:
            raise ValueError(f"--workers: expected a number of workers or {AUTO!r}, got {value!r}") from None
        if wanted < 1:
            raise ValueError(f"--workers: expected at least 1, got {value!r}")
    if wanted > 1 and (_user_distributes(extra) or importlib.util.find_spec("xdist") is None):
        return 1
    return wanted


def worker_args(workers: int) -> list[str]:
    """pytest arguments for `workers`: work stealing evens out tests of very different lengths, and each
    worker's first part opens with its share of the long tests (harness.dealing)."""
    return ["-n", str(workers), "--dist", "worksteal"] if workers > 1 else []


def order_slow_first(profiles: Sequence[str]) -> list[str]:
    """The suite packages in the order a distributed run collects them: the longest waits first."""
    rank = {name: index for index, name in enumerate(SLOW_FIRST)}
    return sorted(profiles, key=lambda name: rank.get(name.split(".", 1)[0], len(rank)))
