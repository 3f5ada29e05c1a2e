"""Repo-root conftest: registers the harness plugin for in-repo runs when it is not installed."""

import importlib.metadata
import os

_installed = any(ep.value == "harness.plugin" for ep in importlib.metadata.entry_points(group="pytest11"))
if not _installed or os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
    pytest_plugins = ["harness.plugin"]
