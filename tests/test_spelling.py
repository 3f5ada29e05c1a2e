"""A provider's metrics URL is written in the one spelling the operator under test reads."""

from __future__ import annotations

import pytest

from harness import resources
from harness.impl import ImplError, parse_impl, reference_document
from harness.spelling import spelled


def _provider() -> dict[str, object]:
    return resources.inference_provider("p", "net", site="s", cluster="c", models=["m"],
                                        metrics=resources.metrics_config("http://m.test:9090", "pool"))


def test_the_prose_spelling_is_the_default_and_the_guide_spelling_replaces_it() -> None:
    assert spelled(_provider()) == _provider()
    config = spelled(_provider(), "metricsEndpoint")["spec"]["metricsConfig"]  # type: ignore[index]
    assert config["metricsEndpoint"] == "http://m.test:9090" and "endpoint" not in config
    assert _provider()["spec"]["metricsConfig"]["endpoint"] == "http://m.test:9090"  # type: ignore[index]
    network = resources.grid_network("net", [resources.gateway_ref("s")])
    assert spelled(network, "metricsEndpoint") == network
    with pytest.raises(ValueError, match="unknown metrics endpoint spelling"):
        spelled(_provider(), "metrics_endpoint")


def test_a_descriptor_names_the_spelling_its_operator_reads() -> None:
    document = reference_document()
    assert parse_impl(document).operator.metrics_endpoint_key == "endpoint"  # type: ignore[union-attr]
    document["operator"] = {**document["operator"], "metrics_endpoint_key": "metricsEndpoint"}
    assert parse_impl(document).operator.metrics_endpoint_key == "metricsEndpoint"  # type: ignore[union-attr]
    document["operator"]["metrics_endpoint_key"] = "url"
    with pytest.raises(ImplError, match="metrics_endpoint_key"):
        parse_impl(document)
