"""A gateway's revision entry is found in every known GridNetwork status shape, and only its own."""

from __future__ import annotations

from harness.status_shapes import entries, find_entry


def test_the_reference_shape_is_found_by_gateway_and_namespace() -> None:
    status = {"overlayStatus": [{"gatewayName": "gw", "gatewayNamespace": "other", "renderedRevision": "x"},
                                {"gatewayName": "gw", "gatewayNamespace": "ns", "renderedRevision": "r"}]}
    assert find_entry(status, "gw", "ns") == {"gatewayName": "gw", "gatewayNamespace": "ns", "renderedRevision": "r"}
    assert find_entry(status, "gw", "elsewhere") is None
    assert find_entry(status, "another-gw", "ns") is None


def test_the_public_shapes_are_found_and_named_as_the_reference_names_them() -> None:
    older = {"overlayStatus": [{"gatewayName": "gw", "namespace": "ns", "distributedRevision": "d"}]}
    newer = {"routingMapStatus": [{"gatewayName": "gw", "namespace": "ns", "distributedRevision": "d"}]}
    for status in (older, newer):
        entry = find_entry(status, "gw", "ns")
        assert entry is not None and entry["gatewayNamespace"] == "ns" and entry["distributedRevision"] == "d"
        assert find_entry(status, "gw", "other") is None


def test_entries_skip_what_is_not_an_entry() -> None:
    assert entries({"overlayStatus": ["junk", {"gatewayName": "a"}], "routingMapStatus": None}) == \
        [{"gatewayName": "a"}]
    assert entries({}) == []


def test_a_status_without_the_entry_names_where_it_was_looked_for() -> None:
    """The failure says which paths were read and what the status held, not only that a wait timed out."""
    from harness.status_shapes import missing

    said = missing({}, "edge", "agn-system")
    assert said.startswith("no rendered revision at status.overlayStatus[gatewayName=edge, gatewayNamespace="
                           "agn-system or namespace=agn-system] or status.routingMapStatus[") and "no status" in said
    other = missing({"routingMapStatus": [{"gatewayName": "batch", "namespace": "agn-system"}]}, "edge", "agn-system")
    assert "entries for 'batch' in 'agn-system'" in other
    assert "its keys: gateways, phase" in missing({"phase": "Ready", "gateways": []}, "edge", "agn-system")
