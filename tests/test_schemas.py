"""The JSON Schemas editors check descriptors and options files with (harness/schemas).

A schema that drifts from the parser is worse than none: an editor would flag a descriptor the harness
accepts, or pass one it refuses for a plain typo. So the schemas are loaded as the installed package holds
them, every closed object is compared with the parser's key table it mirrors, everything the project ships
must validate, and the parser's structural refusals must be the schema's too.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from harness import impl, impl_kube, options_file, timeouts
from harness.backends.base import BACKEND_NAMES
from harness.backends.kube.existing import parse_contexts
from harness.features import EXTENDED_FEATURES, FEATURE_DESCRIPTIONS, PROFILES, REQUIRES, parse_profiles
from harness.run_options import RUN_KEYS
from harness.spelling import METRICS_ENDPOINT_KEYS
from harness.workers import resolve as resolve_workers
from tests.test_impl import _BROKEN_BUILD, BAD_DESCRIPTORS, SYNC, VALID

DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"


def _schema(name: str) -> dict[str, Any]:
    """A schema read through the package's resources, so a schema missing from the distribution fails here."""
    text = (resources.files("harness") / "schemas" / f"{name}.schema.json").read_text(encoding="utf-8")
    return json.loads(text)


DESCRIPTOR = _schema("descriptor")
OPTIONS = _schema("options")
DESCRIPTOR_VALIDATOR = jsonschema.Draft202012Validator(DESCRIPTOR)
OPTIONS_VALIDATOR = jsonschema.Draft202012Validator(OPTIONS)


def _closed_objects(node: Any) -> Iterator[dict[str, Any]]:
    """Every subschema that refuses unknown keys: each must mirror a key table of a parser."""
    if isinstance(node, dict):
        if node.get("additionalProperties") is False:
            yield node
        for value in node.values():
            yield from _closed_objects(value)
    elif isinstance(node, list):
        for value in node:
            yield from _closed_objects(value)


def _defs(schema: Mapping[str, Any], name: str) -> dict[str, Any]:
    return schema if name == "#" else schema["$defs"][name]


# ------------------------------------------------------------------------------------------ shape


@pytest.mark.parametrize("schema", [DESCRIPTOR, OPTIONS], ids=["descriptor", "options"])
def test_the_schemas_are_draft_2020_12(schema: dict[str, Any]) -> None:
    assert schema["$schema"] == DRAFT_2020_12
    jsonschema.Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize("schema", [DESCRIPTOR, OPTIONS], ids=["descriptor", "options"])
def test_every_key_says_what_it_is(schema: dict[str, Any]) -> None:
    """Editors show the description on completion and hover: it is what a vendor reads instead of the code."""
    for node in _closed_objects(schema):
        for key, sub in node["properties"].items():
            assert sub.get("description", "").strip(), f"{key} has no description"


#: Descriptor schema object ($defs name, "#" the root) -> the key table its parser reads it with.
DESCRIPTOR_TABLES: dict[str, Mapping[str, bool]] = {
    "#": impl._TOP_KEYS,
    "implementation": impl._IMPLEMENTATION_KEYS,
    "gateway": impl._GATEWAY_KEYS,
    "launcher": impl._LAUNCHER_KEYS,
    "operator": impl._OPERATOR_KEYS,
    "overlaySync": impl._OVERLAY_SYNC_KEYS,
    "breakage": impl._BREAKAGE_KEYS,
    "kubernetes": impl_kube._KUBERNETES_KEYS,
    "operatorWorkload": impl_kube._DEPLOYMENT_KEYS,
    "outputs": impl_kube._OUTPUTS_KEYS,
    "overlayOutput": impl_kube._OVERLAY_KEYS,
    "statusOutput": impl_kube._STATUS_KEYS,
}


@pytest.mark.parametrize("name", DESCRIPTOR_TABLES)
def test_descriptor_objects_have_the_parsers_keys(name: str) -> None:
    node, table = _defs(DESCRIPTOR, name), DESCRIPTOR_TABLES[name]
    assert node["additionalProperties"] is False
    assert set(node["properties"]) == set(table)
    assert set(node.get("required", [])) == {key for key, required in table.items() if required}


def test_every_closed_descriptor_object_mirrors_a_key_table() -> None:
    mirrored = {id(_defs(DESCRIPTOR, name)) for name in DESCRIPTOR_TABLES}
    assert all(id(node) in mirrored for node in _closed_objects(DESCRIPTOR))


def test_descriptor_enums_are_the_parsers() -> None:
    feature = DESCRIPTOR["$defs"]["feature"]
    assert set(feature["enum"]) == EXTENDED_FEATURES
    assert feature["enumDescriptions"] == [FEATURE_DESCRIPTIONS[name] for name in feature["enum"]]
    assert DESCRIPTOR["$defs"]["profile"]["enum"] == list(PROFILES)
    metrics_key = DESCRIPTOR["$defs"]["operator"]["properties"]["metrics_endpoint_key"]
    assert metrics_key["enum"] == list(METRICS_ENDPOINT_KEYS)
    assert metrics_key["default"] == impl.OperatorCommand(()).metrics_endpoint_key
    claims = DESCRIPTOR["properties"]["features"]["description"]
    assert all(name in claims for feature, needed in REQUIRES.items() for name in (feature, *needed)), \
        "the features description names every feature that needs another"


def test_options_objects_have_the_loaders_keys() -> None:
    assert set(options_file.KEYS) == {*RUN_KEYS, "profile", "self_check"}
    assert OPTIONS["additionalProperties"] is False
    assert set(OPTIONS["properties"]) == set(options_file.KEYS)
    self_check = OPTIONS["properties"]["self_check"]
    assert set(self_check["properties"]) == set(options_file.SELF_CHECK_KEYS)
    timeout = OPTIONS["properties"]["timeout"]
    assert list(timeout["properties"]) == list(timeouts.NAMES)
    assert {name: sub["default"] for name, sub in timeout["properties"].items()} == \
        {name: getattr(timeouts.Timeouts(), name) for name in timeouts.NAMES}
    assert {id(node) for node in _closed_objects(OPTIONS)} == {id(OPTIONS), id(self_check), id(timeout)}
    assert OPTIONS["$defs"]["profile"]["enum"] == list(PROFILES)
    assert OPTIONS["properties"]["backend"]["examples"] == list(BACKEND_NAMES)


# ------------------------------------------------------------------------------------------ descriptors


def _shipped_descriptors() -> list[tuple[str, Any]]:
    files = sorted((entry for entry in resources.files("harness.impls").iterdir() if entry.name.endswith(".yaml")),
                   key=lambda entry: entry.name)
    return [(entry.name, yaml.safe_load(entry.read_text(encoding="utf-8"))) for entry in files]


_HERE = str(Path(__file__).resolve().parent)  # a directory that exists: the parser checks manifests paths
_KUBE_ONLY = {**copy.deepcopy(VALID), "operator": {"kubernetes": {
    "image": "vendor.example/grid-operator:1.4.0", "manifests": [_HERE],
    "outputs": {"overlay": {"name": "grid-overlay-{network}-{gateway}", "namespace": "{namespace}",
                            "key": "routing-overlay.json"},
                "status": {"resource": "gridnetworks.grid.praxis.fast", "name": "{network}", "field": "status"}}}}}

EXAMPLES: list[tuple[str, Any]] = [
    *_shipped_descriptors(),
    ("reference_document", impl.reference_document()),
    ("VALID", VALID),
    ("VALID with overlay_sync", {**copy.deepcopy(VALID), "overlay_sync": SYNC, "features": ["overlaySync"]}),
    ("VALID with a breakage", {**copy.deepcopy(VALID), "breakages": [_BROKEN_BUILD]}),
    ("an operator installed in clusters only", _KUBE_ONLY),
]


@pytest.mark.parametrize("document", [d for _, d in EXAMPLES], ids=[name for name, _ in EXAMPLES])
def test_every_descriptor_the_project_ships_validates(document: Any) -> None:
    impl.parse_impl(copy.deepcopy(document))  # the parser accepts it too: a fair example
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in DESCRIPTOR_VALIDATOR.iter_errors(document)]
    assert not errors


#: The parser's refusals (tests/test_impl.py) that are structural: an unknown or missing key, a value of the
#: wrong type, a blank string, an empty list, a feature outside the enum or listed twice. The schema refuses
#: these exactly as the parser does.
STRUCTURAL = {
    "missing block", "missing key", "missing command", "unknown top key", "unknown nested key",
    "block not a mapping", "contact not a list", "contact item not a string", "version_command empty",
    "version_command a string", "version is a number", "empty organization", "command is a string",
    "command is empty", "command item not a string", "env not a mapping", "env value not a string",
    "launcher unknown key", "timeout negative", "timeout boolean", "timeout string", "features not a list",
    "unknown feature", "duplicate feature", "feature not a string",
}
#: Refusals left to the parser: what a command template must contain ({config}, {socket}), which placeholders
#: and template syntax it may use, and {launcher} only with a gateway.launcher. A pattern over argv items
#: would misread literal braces ({{config}}) and format specs, so the schema states these rules in its
#: descriptions and accepts the documents; the parser names the key before a run.
PARSER_ONLY = {
    "command without config", "unknown placeholder", "placeholder with format spec", "placeholder with attribute",
    "malformed template", "env unknown placeholder", "launcher placeholder without a launcher",
    "launcher placeholder in env without a launcher", "launcher without its socket",
    "launcher with a gateway placeholder",
}


def test_every_bad_descriptor_case_is_sorted() -> None:
    """A new refusal in tests/test_impl.py is either the schema's too or explained as the parser's alone."""
    names = {name for name, _, _ in BAD_DESCRIPTORS}
    assert names == STRUCTURAL | PARSER_ONLY and not STRUCTURAL & PARSER_ONLY


@pytest.mark.parametrize("name", sorted(STRUCTURAL))
def test_the_schema_refuses_structural_mistakes(name: str) -> None:
    (document,) = [d for n, d, _ in BAD_DESCRIPTORS if n == name]
    assert not DESCRIPTOR_VALIDATOR.is_valid(document)
    assert DESCRIPTOR_VALIDATOR.is_valid(VALID)  # the twin each case was made from


@pytest.mark.parametrize("name", sorted(PARSER_ONLY))
def test_rules_beyond_the_schema_are_left_to_the_parser(name: str) -> None:
    (document,) = [d for n, d, _ in BAD_DESCRIPTORS if n == name]
    assert DESCRIPTOR_VALIDATOR.is_valid(document)


def _with(path: str, value: Any, base: Mapping[str, Any] = VALID) -> dict[str, Any]:
    """`base` with the dotted `path` set to `value` (missing mappings on the way are made)."""
    data = copy.deepcopy(dict(base))
    *parents, last = path.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return data


_OPERATOR = {"command": ["/opt/op", "{manifests}", "{out}"]}
_WITH_OPERATOR = {**VALID, "operator": _OPERATOR}
_BREAKAGE_NO_SECTION = {key: value for key, value in _BROKEN_BUILD.items() if key != "gateway"}

#: Rules beyond the key tables that the schema states too, each case with its twin: (name, document, accepted).
AGREEMENT: list[tuple[str, Any, bool]] = [
    ("operator with a command", _WITH_OPERATOR, True),
    ("operator with neither command nor kubernetes", _with("operator", {}), False),
    ("operator with a null kubernetes block only", _with("operator", {"kubernetes": None}), False),
    ("operator with a kubernetes block only", _KUBE_ONLY, True),
    ("null operator", _with("operator", None), True),
    ("null overlay_sync", _with("overlay_sync", None), True),
    ("null features", _with("features", None), True),
    ("null env", _with("gateway.env", None), True),
    ("null run_as", _with("gateway.run_as", None), True),
    ("env value empty", _with("gateway.env", {"GW_FLAG": ""}), True),
    ("env name with =", _with("gateway.env", {"GW=FLAG": "x"}), False),
    ("metrics_endpoint_key spelled as the guide", _with("operator.metrics_endpoint_key", "metricsEndpoint",
                                                        _WITH_OPERATOR), True),
    ("metrics_endpoint_key unknown", _with("operator.metrics_endpoint_key", "url", _WITH_OPERATOR), False),
    ("mesh_args null", _with("operator.mesh_args", None, _WITH_OPERATOR), True),
    ("mesh_args empty", _with("operator.mesh_args", [], _WITH_OPERATOR), False),
    ("dynamic_weights a spec", _with("operator.dynamic_weights", {"placementPolicy": {}}, _WITH_OPERATOR), True),
    ("dynamic_weights empty", _with("operator.dynamic_weights", {}, _WITH_OPERATOR), False),
    ("image without whitespace", _KUBE_ONLY, True),
    ("image with whitespace", _with("operator.kubernetes.image", "vendor/op 1.4", _KUBE_ONLY), False),
    ("manifests as one path", _with("operator.kubernetes.manifests", _HERE, _KUBE_ONLY), True),
    ("manifests empty", _with("operator.kubernetes.manifests", [], _KUBE_ONLY), False),
    ("status field dotted", _with("operator.kubernetes.outputs.status.field", "status.grid", _KUBE_ONLY), True),
    ("status field with an empty step", _with("operator.kubernetes.outputs.status.field", "status..grid",
                                              _KUBE_ONLY), False),
    ("overlay output unknown key", _with("operator.kubernetes.outputs.overlay.file", "x", _KUBE_ONLY), False),
    ("overlay_sync paths absolute", _with("overlay_sync", SYNC), True),
    ("overlay_sync ready_path relative", _with("overlay_sync", {**SYNC, "ready_path": "readyz"}), False),
    ("overlay_sync metrics_path null", _with("overlay_sync", {**SYNC, "metrics_path": None}), False),
    ("breakage replacing the gateway", _with("breakages", [_BROKEN_BUILD]), True),
    ("breakage replacing nothing", _with("breakages", [_BREAKAGE_NO_SECTION]), False),
    ("breakage named in capitals", _with("breakages", [{**_BROKEN_BUILD, "name": "Drops-LKG"}]), False),
    ("breakage of an unknown profile", _with("breakages", [{**_BROKEN_BUILD, "profile": "nosuch"}]), False),
    ("breakage must_fail a string", _with("breakages", [{**_BROKEN_BUILD, "must_fail": "CONS-X"}]), False),
]


@pytest.mark.parametrize(("document", "accepted"), [(d, a) for _, d, a in AGREEMENT],
                         ids=[name for name, _, _ in AGREEMENT])
def test_the_schema_and_the_parser_agree(document: Any, accepted: bool) -> None:
    try:
        impl.parse_impl(copy.deepcopy(document))
        parsed = True
    except impl.ImplError:
        parsed = False
    assert (parsed, DESCRIPTOR_VALIDATOR.is_valid(document)) == (accepted, accepted)


# ------------------------------------------------------------------------------------------ options file

#: An options file with every key.
OPTIONS_EXAMPLE: dict[str, Any] = {
    "backend": "local",
    "image": "agn-conformance/reference:dev",
    "kind_node_image": "agn-conformance/kind-node:v1.31.0",
    "kube_contexts": {"site-a": "ctx1", "site-b": "ctx2"},
    "impl": "reference",
    "report": "conformance-report.yaml",
    "html": "conformance-report.html",
    "junit": "junit.xml",
    "diagnostics": "diagnostics",
    "submission": "submission",
    "force": False,
    "workers": "auto",
    "id": ["CONS-SEL-WEIGHTED", "CONS-COLD-REJECT[not-json]"],
    "keep": False,
    "timeout": {"reload": 20, "reconcile": 40.5},
    "wait_scale": 1.5,
    "slow": True,
    "seed": 7,
    "demo_dir": "../demos/grid-combined-site",
    "profile": ["consumer", "producer", "provider", "mesh"],
    "self_check": {"breakage": ["unchanged-swaps", "slow-reload"], "implementation_test": "CONS-404-UNKNOWN-MODEL",
                   "jobs": 2, "workdir": "self-check-runs"},
}


def _harness_accepts(data: Any, tmp_path: Path) -> bool:
    """The file's loader, then the checks a run applies to what it loaded (as `agn-conformance run` does)."""
    path = tmp_path / "options.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    try:
        loaded = options_file.load_options(path)
        timeouts.parse_overrides(loaded.get("timeout", []))
        if "profile" in loaded:
            parse_profiles(",".join(loaded["profile"]))
        if "workers" in loaded:
            resolve_workers(loaded["workers"], "local")
        parse_contexts(loaded.get("kube_contexts"))
    except ValueError:  # OptionsFileError is one
        return False
    return True


def test_an_options_file_with_every_key_validates(tmp_path: Path) -> None:
    assert set(OPTIONS_EXAMPLE) == set(options_file.KEYS)
    assert set(OPTIONS_EXAMPLE["self_check"]) == set(options_file.SELF_CHECK_KEYS)
    assert _harness_accepts(OPTIONS_EXAMPLE, tmp_path)
    assert not list(OPTIONS_VALIDATOR.iter_errors(OPTIONS_EXAMPLE))
    assert OPTIONS_VALIDATOR.is_valid(None) and _harness_accepts(None, tmp_path)  # an empty file


#: (what is wrong, the file, its accepted twin): each refused by the schema and the harness alike.
BAD_OPTIONS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("unknown key", {"reprot": "r.yaml"}, {"report": "r.yaml"}),
    ("flag not a boolean", {"keep": "yes"}, {"keep": True}),
    ("integer as a string", {"seed": "7"}, {"seed": 7}),
    ("empty text", {"impl": ""}, {"impl": "my-gateway.yaml"}),
    ("scale not positive", {"wait_scale": 0}, {"wait_scale": 0.5}),
    ("unknown timeout name", {"timeout": {"reload_s": 5}}, {"timeout": {"reload": 5}}),
    ("timeout not positive", {"timeout": {"reload": 0}}, {"timeout": {"reload": 0.5}}),
    ("timeout not a number", {"timeout": {"reload": "5s"}}, {"timeout": {"reload": 5}}),
    ("unknown profile in a string", {"profile": "consumer,mesher"}, {"profile": "consumer, mesh"}),
    ("unknown profile in a list", {"profile": ["consumr"]}, {"profile": ["consumer"]}),
    ("no workers", {"workers": 0}, {"workers": 2}),
    ("workers a word", {"workers": "many"}, {"workers": "AUTO"}),
    ("id an empty list", {"id": []}, {"id": "CONS-SEL-WEIGHTED"}),
    ("kube_contexts without a context", {"kube_contexts": "site-a"}, {"kube_contexts": "site-a=ctx1,site-b=c"}),
    ("self_check unknown key", {"self_check": {"job": 2}}, {"self_check": {"jobs": 2}}),
    ("self_check no jobs", {"self_check": {"jobs": 0}}, {"self_check": {"jobs": 1}}),
]


@pytest.mark.parametrize(("bad", "twin"), [(b, t) for _, b, t in BAD_OPTIONS], ids=[n for n, _, _ in BAD_OPTIONS])
def test_the_options_schema_refuses_what_the_harness_refuses(tmp_path: Path, bad: dict[str, Any],
                                                             twin: dict[str, Any]) -> None:
    assert (OPTIONS_VALIDATOR.is_valid(bad), _harness_accepts(bad, tmp_path)) == (False, False)
    assert (OPTIONS_VALIDATOR.is_valid(twin), _harness_accepts(twin, tmp_path)) == (True, True)
