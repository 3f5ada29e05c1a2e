"""The raw EPP series a site's operator relays, and reading them out of Prometheus text.

Four inputs, each under llm-d EPP's name first and the legacy inference-pool name second (the first
wins when a site sends both): running and waiting per endpoint (pool averages), ready endpoints, and
what flow control holds. Rows are kept only for the polled peer's own site (label ``grid_site``), per
cluster (label ``grid_provider``), and grouped by their timestamp: the values of one instant are read
together. The parser reads the millisecond timestamps of the text format as seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

SITE_LABEL = "grid_site"
CLUSTER_LABEL = "grid_provider"
#: field -> (preferred name, legacy name)
SERIES: dict[str, tuple[str, str]] = {
    "running": ("llm_d_epp_average_running_requests", "inference_pool_average_running_requests"),
    "waiting": ("llm_d_epp_average_queue_size", "inference_pool_average_queue_size"),
    "ready": ("llm_d_epp_ready_endpoints", "inference_pool_ready_pods"),
    "held": ("llm_d_epp_flow_control_queue_size", "llm_d_epp_flow_control_queue_size"),
}
#: series name -> (field, rank): rank 0 is the preferred name
_BY_NAME: dict[str, tuple[str, int]] = {}
for _field, (_first, _legacy) in SERIES.items():
    _BY_NAME.setdefault(_legacy, (_field, 1))
    _BY_NAME[_first] = (_field, 0)
MAX_CLUSTERS_PER_PEER = 256


@dataclass(frozen=True)
class Sample:
    """One instant of one (site, cluster): the values published together, None where absent."""

    stamp: float | None  # the publisher's timestamp (seconds since the epoch), when the line had one
    running: float | None = None
    waiting: float | None = None
    ready: float | None = None
    held: float | None = None


class SignalsError(ValueError):
    """The body is not Prometheus text the gateway can read."""


def parse_signals(text: str, site: str) -> dict[str, list[Sample]]:
    """Per cluster, the instants `text` publishes for `site`, oldest first; other sites' rows are dropped."""
    groups: dict[tuple[str, float | None], dict[str, tuple[int, float]]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                _collect(groups, sample, site)
    except (ValueError, TypeError, IndexError) as exc:
        raise SignalsError(str(exc) or type(exc).__name__) from None
    out: dict[str, list[Sample]] = {}
    for (cluster, stamp), values in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0.0)):
        if cluster not in out and len(out) >= MAX_CLUSTERS_PER_PEER:
            continue
        out.setdefault(cluster, []).append(Sample(stamp=stamp, **{f: v for f, (_, v) in values.items()}))
    return out


def _collect(groups: dict[tuple[str, float | None], dict[str, tuple[int, float]]], sample: Any, site: str) -> None:
    known = _BY_NAME.get(sample.name)
    if known is None:
        return
    labels = sample.labels
    if labels.get(SITE_LABEL) != site:
        return
    cluster = labels.get(CLUSTER_LABEL)
    if not cluster:
        return
    value = float(sample.value)
    if value != value:  # NaN: no reading
        return
    stamp = sample.timestamp
    stamp = float(stamp) if stamp is not None else None
    field, rank = known
    values = groups.setdefault((cluster, stamp), {})
    held = values.get(field)
    if held is None or rank < held[0]:
        values[field] = (rank, value)
