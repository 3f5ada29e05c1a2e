"""Fake provider backends: echo model server plus EPP-style metrics exporter, steerable at runtime."""

from harness.fakes.server import (
    ConfigError,
    EppConfig,
    FakeBackend,
    MetricSample,
    RunningServer,
    RuntimeConfig,
    default_metrics,
    mtls_context,
    parse_config_update,
    running,
    start_server,
)

__all__ = [
    "ConfigError",
    "EppConfig",
    "FakeBackend",
    "MetricSample",
    "RunningServer",
    "RuntimeConfig",
    "default_metrics",
    "mtls_context",
    "parse_config_update",
    "running",
    "start_server",
]
