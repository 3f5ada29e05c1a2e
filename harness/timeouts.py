"""The suites' named deadlines: one place says how long each kind of wait may take, and a run can change one.

Each is in seconds before `--grid-wait-scale`, which `harness.waiting.poll_until` applies to every wait. A
run overrides one by name (`--grid-timeout reload=30`, repeatable; `agn-conformance run --timeout`); the
plugin carries the overrides to pytest-xdist workers in the environment, as it does the scale. Deadlines a
test derives from the spec (a configured interval plus its slack) are not here: they are the assertion.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

#: Environment variable carrying the overrides (a JSON object of name -> seconds) to every process of a run.
TIMEOUTS_ENV = "AGN_CONFORMANCE_TIMEOUTS"


@dataclass(frozen=True)
class Timeouts:
    """How long the suites wait for each kind of thing, in seconds (before the wait scale)."""

    #: One HTTP exchange with a component (a request through a gateway, a fake backend's admin API).
    request: float = 10.0
    #: A gateway to serve, or refuse, an overlay just written where it reads overlays.
    reload: float = 10.0
    #: The operator to publish what a resource change or a forced refresh asks for.
    reconcile: float = 20.0
    #: The operator to say something: a status field, a log line, a generated object.
    report: float = 10.0
    #: overlay-sync to deliver a revision into the serving file.
    delivery: float = 15.0
    #: The operator to record something in the status of a resource it does not render.
    status: float = 20.0
    #: A mesh to spread a record, a GridSite or an overlay change to every site.
    mesh_convergence: float = 30.0
    #: A mesh member's state to change after a join or a probe (alive, a GridSite probe time).
    member_state: float = 20.0
    #: A request at one site to be served through another site's provider once its overlay names it.
    remote_route: float = 20.0
    #: A crash to be noticed: a member suspect or dead, its candidates no longer fresh.
    failure_detection: float = 10.0
    #: A mesh to heal after a cut link is restored.
    heal: float = 40.0
    #: A grid gateway to show what a site publishes in its routing metrics (a few polls of the site's signals).
    serving_signal: float = 10.0


NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Timeouts))


def parse_overrides(entries: Iterable[str]) -> dict[str, float]:
    """`NAME=SECONDS` entries -> {name: seconds}; an unknown name or a bad number is a ValueError naming it."""
    out: dict[str, float] = {}
    for entry in entries:
        name, sep, value = entry.partition("=")
        name = name.strip()
        if not sep or name not in NAMES:
            raise ValueError(f"timeout {entry!r}: expected NAME=SECONDS with NAME one of {', '.join(NAMES)}")
        try:
            seconds = float(value)
        except ValueError:
            raise ValueError(f"timeout {name}: {value!r} is not a number of seconds") from None
        if not seconds > 0:
            raise ValueError(f"timeout {name}: must be a positive number of seconds, got {value!r}")
        out[name] = seconds
    return out


def encode(overrides: Mapping[str, float]) -> str:
    return json.dumps(dict(overrides), sort_keys=True)


def timeouts() -> Timeouts:
    """The run's deadlines: the defaults with the run's overrides (read from the environment each call, so a
    process forked before the run was configured still sees them)."""
    text = os.environ.get(TIMEOUTS_ENV, "")
    if not text:
        return Timeouts()
    try:
        overrides = json.loads(text)
    except ValueError:
        return Timeouts()
    known = {k: float(v) for k, v in overrides.items() if k in NAMES and isinstance(v, int | float) and v > 0}
    return dataclasses.replace(Timeouts(), **known)
