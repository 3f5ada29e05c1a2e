"""Whether a model sheds (answers 429): decided at each refresh from its ready sites' views.

A model sheds when shedding is on and every ready site serving it is measured and full; it stops
when any of them is relieved (or stops being measured). Between the two it keeps its state, so a
site hovering at its ceiling does not make the model flap.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from reference.gateway.site_route.availability import SiteView
from reference.gateway.site_route.settings import AvailabilitySettings


def sheds(was_shedding: bool, sites: Sequence[SiteView], settings: AvailabilitySettings) -> bool:
    if not settings.shedding or not sites or not all(s.measured for s in sites):
        return False
    if all(s.full for s in sites):
        return True
    return was_shedding and not any(s.relieved for s in sites)


def retry_after_secs(millis: float) -> int:
    """A Retry-After value: whole seconds, at least 1."""
    return max(1, math.ceil(millis / 1000.0))
