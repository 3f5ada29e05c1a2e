"""YAML for kubectl: every string that another YAML reader could take for a number, boolean or null is quoted.

PyYAML writes a string such as ``1e5847`` (a random run id) bare, because under its YAML 1.1 rules it is no
number; Kubernetes reads manifests with a YAML 1.2 reader, takes it for a float and refuses the object
("cannot unmarshal number into ... metadata.labels of type string"). Quoting every such string, and every
word some YAML version reads as a boolean or null, keeps a manifest's meaning the same for both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import yaml

__all__ = ["dump", "dump_all"]

#: Strings a YAML 1.1 or 1.2 reader may resolve to a number (ints, floats, hex, octal, exponents, sexagesimal).
_NUMBER_LIKE = re.compile(r"^[-+]?[.0-9][0-9a-fA-FxXoO_.:eE+-]*$|^[-+]?\.(inf|Inf|INF)$|^\.(nan|NaN|NAN)$")
#: Words some YAML version reads as a boolean or null.
_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~", ""}


class _KubeDumper(yaml.SafeDumper):
    """SafeDumper whose strings are double-quoted wherever a YAML 1.2 reader would not read them back as strings."""


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    quoted = bool(_NUMBER_LIKE.match(value)) or value.lower() in _WORDS
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"' if quoted else None)


_KubeDumper.add_representer(str, _string)


def dump(doc: Any) -> str:
    return yaml.dump(doc, Dumper=_KubeDumper, sort_keys=False)


def dump_all(docs: Iterable[Any]) -> str:
    return yaml.dump_all(list(docs), Dumper=_KubeDumper, sort_keys=False)
