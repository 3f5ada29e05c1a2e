"""Reading YAML quickly: the statement catalogue, reports and CRDs, and what operators render, polled.

PyYAML's pure-Python loader spends about 0.6 s on the statement catalogue, and every pytest session that
collects conformance tests reads it. libyaml's safe loader (when PyYAML was built with it, as its wheels
are) builds the same objects in a tenth of the time; without it this falls back to the pure-Python one.
"""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["safe_load"]

_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(text: str) -> Any:
    """`yaml.safe_load`, on libyaml where available; raises `yaml.YAMLError` the same way."""
    return yaml.load(text, Loader=_LOADER)  # a safe loader: plain data only
