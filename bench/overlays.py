"""Overlay documents for the benchmarks: one capability served by N candidates in a chosen mode."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness import contract

SCOPE = contract.ScopeSpec("bench-net", "bench-gateway", "bench-ns", "bench-site")
KIND = "inference_model"
MODEL = "bench-model"


@dataclass(frozen=True)
class Shape:
    """How the candidates of the capability are laid out: one group in `mode`, or no groups."""

    label: str
    mode: str | None  # overlay selection_policy.mode; None leaves the policy out
    grouped: bool


SHAPES: tuple[Shape, ...] = (
    Shape("roundRobin", "roundRobin", True),
    Shape("weightedRandom", "weightedRandom", True),
    Shape("deterministic", "deterministic", True),
    Shape("ungrouped-deterministic", None, False),
)


def candidates(count: int, shape: Shape) -> list[dict[str, Any]]:
    """`count` candidates of one model on distinct sites and clusters, all in group 0 when grouped."""
    out = []
    for index in range(count):
        extra: dict[str, Any] = {"stable_id": f"bench-{index:04d}"}
        if shape.grouped:
            extra["selection_group"] = 0
        if shape.mode == "weightedRandom":
            extra["traffic_weight"] = 1 + (index * 37) % 1000
        out.append(contract.candidate(MODEL, f"site-{index:04d}", f"cluster-{index:04d}", **extra))
    return out


def envelope_bytes(count: int, shape: Shape) -> bytes:
    """A valid, sealed v1 envelope for the shape, encoded as a producer would write it."""
    doc = contract.envelope(candidates(count, shape), SCOPE, selection_mode=shape.mode)
    return contract.encode(doc)
