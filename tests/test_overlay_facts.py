"""The overlay ConfigMap is found by what the spec says of it (its key, its envelope's scope), not its name."""

from __future__ import annotations

import json
from typing import Any

from harness.overlay_facts import holds_overlay_of, pick_by_facts

KEY = "routing-overlay.json"


def _configmap(name: str, network: str, gateway: str, key: str = KEY) -> dict[str, Any]:
    envelope = {"scope": {"network": network, "gateway": gateway, "namespace": "agn-system", "local_site": "a"}}
    return {"kind": "ConfigMap", "metadata": {"name": name}, "data": {key: json.dumps(envelope)}}


def test_the_configmap_holding_this_scopes_envelope_is_found_whatever_its_name() -> None:
    ours = _configmap("routing-map-net-edge", "net", "edge")
    others = [_configmap("grid-overlay-net-batch", "net", "batch"),
              _configmap("grid-overlay-other-edge", "other", "edge"),
              {"kind": "ConfigMap", "metadata": {"name": "consumer"}, "data": {"praxis.yaml": "x"}},
              {"kind": "ConfigMap", "metadata": {"name": "broken"}, "data": {KEY: "{not json"}}]
    assert pick_by_facts([*others, ours], KEY, "net", "edge") == "routing-map-net-edge"
    assert holds_overlay_of(ours, KEY, "net", "edge") and not holds_overlay_of(ours, KEY, "net", "batch")
    # the twins: under another key, or with two candidates (a guess), nothing is found
    assert pick_by_facts([_configmap("x", "net", "edge", key="overlay.json")], KEY, "net", "edge") is None
    assert pick_by_facts([ours, _configmap("copy", "net", "edge")], KEY, "net", "edge") is None
