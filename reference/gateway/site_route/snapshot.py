"""The immutable view the request path reads: per model, its ready admitted sites, and who sheds.

Built after every poll from the serving config's candidates and each (site, cluster)'s view, then
swapped in whole; a request reads one snapshot reference and never the store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from reference.gateway.site_route import shedding
from reference.gateway.site_route.availability import SiteView
from reference.gateway.site_route.serving_config import ServingCandidate
from reference.gateway.site_route.settings import AvailabilitySettings

INFERENCE_MODEL = "inference_model"


@dataclass(frozen=True)
class ModelRoute:
    name: str
    ready: tuple[SiteView, ...]  # admitted candidates whose site is ready, in serving-config order


@dataclass(frozen=True)
class RouteSnapshot:
    models: Mapping[str, ModelRoute] = field(default_factory=dict)
    shedding: frozenset[str] = frozenset()
    views: Mapping[tuple[str, str], SiteView] = field(default_factory=dict)


def model_sites(candidates: Sequence[ServingCandidate]) -> dict[str, list[ServingCandidate]]:
    """The inference-model candidates grouped by model name, in order."""
    out: dict[str, list[ServingCandidate]] = {}
    for c in candidates:
        if c.kind == INFERENCE_MODEL:
            out.setdefault(c.name, []).append(c)
    return out


def build_snapshot(candidates: Sequence[ServingCandidate], views: Mapping[tuple[str, str], SiteView],
                   was_shedding: frozenset[str], settings: AvailabilitySettings) -> RouteSnapshot:
    models: dict[str, ModelRoute] = {}
    shed: set[str] = set()
    for name, members in model_sites(candidates).items():
        ready: list[SiteView] = []
        for c in members:
            view = views.get((c.site, c.cluster)) or SiteView(c.site, c.cluster)
            if c.admitted and view.ready:
                ready.append(view)
        models[name] = ModelRoute(name, tuple(ready))
        if shedding.sheds(name in was_shedding, ready, settings):
            shed.add(name)
    return RouteSnapshot(models=models, shedding=frozenset(shed), views=dict(views))
