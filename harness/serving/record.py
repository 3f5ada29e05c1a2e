"""A serving test's timeline of saturation: while a scenario runs, a background thread reads the gateway's
routing metrics (each site's rho and ceiling) and each pool's queue, and records what changed as metric
events of the running test (harness.timeline), beside the requests the load records as they are answered.
The report then shows per site how saturated the gateway read it and how much of the traffic it served."""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from harness.timeline import current

if TYPE_CHECKING:
    from harness.serving.grid import ServingGateway

__all__ = ["SaturationRecorder"]

#: How often the recorder reads: often enough to draw a queue forming, seldom enough to cost nothing.
PERIOD_S = 0.1


class SaturationRecorder:
    """Records `sites`' rho and ceiling as the gateway shows them, and the queue at each site's pool, on the
    running test's timeline until the block ends (nothing outside a test). Reading errors are skipped: the
    recorder draws, it never judges."""

    def __init__(self, gateway: ServingGateway, sites: Sequence[str] | None = None, period: float = PERIOD_S
                 ) -> None:
        self.gateway = gateway
        self.sites = tuple(sites or gateway.sites)
        self.period = period
        self._stop = threading.Event()
        self._seen: dict[tuple[str, str], float] = {}
        self._thread = threading.Thread(target=self._run, name="serving-recorder", daemon=True)

    def __enter__(self) -> SaturationRecorder:
        if current() is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5.0)

    def _note(self, name: str, site: str, value: float | None) -> None:
        timeline = current()
        if timeline is None or value is None or math.isnan(value):
            return
        shown = round(value, 3)
        if self._seen.get((name, site)) == shown:
            return
        self._seen[(name, site)] = shown
        timeline.metric(name, shown, site=site, provider=site)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                metrics = self.gateway.metrics()
                for site in self.sites:
                    self._note("rho", site, metrics.rho.get(site))
                    self._note("ceiling", site, metrics.ceiling.get(site))
                    self._note("queued at the pool", site, self.gateway.grid.queued(site))
            except Exception:  # a reading that failed is left out of the picture, never raised
                pass
            self._stop.wait(self.period)
