"""Manifests for kubectl keep every string a string, under the YAML 1.2 rules Kubernetes reads them by."""

from __future__ import annotations

import re

import pytest
import yaml

from harness.backends.kube import kube_yaml

#: YAML 1.2 core schema: what a plain (unquoted) scalar resolves to when it is not a string.
CORE_NON_STRING = re.compile(r"^(null|Null|NULL|~|true|True|TRUE|false|False|FALSE|[-+]?[0-9]+|0o[0-7]+|"
                             r"0x[0-9a-fA-F]+|[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?|"
                             r"[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN))$")


@pytest.mark.parametrize("value", ["1e5847", "12e4", "123456", "0x1f", "0o17", "1.5", ".inf", "yes", "On", "",
                                   "null", "~", "1_000", "1:30"])
def test_a_string_a_yaml_reader_could_take_for_another_type_is_quoted(value: str) -> None:
    """A run id such as 1e5847 is a string to PyYAML (no dot, so no float under YAML 1.1), a float to the YAML
    1.2 reader of kubectl: found by a real kind run, whose label of that value was refused."""
    text = kube_yaml.dump({"metadata": {"labels": {"agn-conformance/run": value}}})
    written = text.split("agn-conformance/run:", 1)[1].strip()
    assert written.startswith('"'), f"{value!r} written bare: {text!r}"
    assert yaml.safe_load(text) == {"metadata": {"labels": {"agn-conformance/run": value}}}


@pytest.mark.parametrize("value", ["agn-4f1c2a", "west", "v1.31.0", "1e5847-site-a x"])
def test_other_strings_stay_plain_and_read_back_the_same(value: str) -> None:
    text = kube_yaml.dump_all([{"name": value, "port": 30080, "ready": True}])
    written = text.split("name:", 1)[1].splitlines()[0].strip()
    assert not CORE_NON_STRING.match(written), f"{written!r} would not read back as a string"
    assert yaml.safe_load(text) == {"name": value, "port": 30080, "ready": True}, "numbers and booleans stay so"


def test_pyyaml_alone_writes_the_run_id_bare() -> None:
    """The twin: what the plain SafeDumper writes, which a YAML 1.2 reader takes for a number."""
    written = yaml.safe_dump({"run": "1e5847"}).split("run:", 1)[1].strip()
    assert CORE_NON_STRING.match(written), written
