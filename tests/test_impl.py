"""Implementation descriptors: the bundled reference loads, and every kind of bad descriptor is rejected
with the key path of the problem."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.impl import (
    EXTENDED_FEATURES,
    REFERENCE,
    GatewayCommand,
    Implementation,
    ImplError,
    load_impl,
    parse_impl,
)

VALID: dict[str, Any] = {
    "implementation": {
        "organization": "Example Corp",
        "project": "example-gateway",
        "version": "2.3.1",
        "contact": ["mailto:gateway@example.invalid"],
    },
    "gateway": {
        "command": ["/opt/example/bin/gw", "--config={config}", "--state", "{workdir}/state"],
        "env": {"GW_HOME": "{workdir}", "GW_LOG": "debug"},
        "startup_timeout_s": 7.5,
    },
    "features": ["weightedRandom", "cookieAffinity"],
}


def _write(tmp_path: Path, data: Any, name: str = "impl.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data), encoding="utf-8")
    return path


def _variant(path: str, value: Any) -> dict[str, Any]:
    """VALID with the dotted ``path`` set to ``value`` (``_DELETE`` removes the key)."""
    data = copy.deepcopy(VALID)
    *parents, last = path.split(".")
    node = data
    for part in parents:
        node = node[part]
    if value is _DELETE:
        del node[last]
    else:
        node[last] = value
    return data


_DELETE = object()


def test_reference_descriptor_loads() -> None:
    descriptor = load_impl(REFERENCE)
    assert descriptor.source == REFERENCE
    assert descriptor.implementation.project == "reference-gateway"
    contact = descriptor.implementation.contact
    assert contact and all(isinstance(c, str) for c in contact)
    assert descriptor.features == EXTENDED_FEATURES
    argv, env = descriptor.gateway.render(Path("/tmp/site-a/praxis.yaml"), Path("/tmp/site-a"), Path("/tmp/l.sock"))
    assert argv[0] == sys.executable
    assert "/tmp/site-a/praxis.yaml" in argv and "/tmp/l.sock" in argv
    assert not any("{" in arg for arg in argv)
    assert env == {}
    assert descriptor.gateway.launcher is not None
    launcher, _ = descriptor.gateway.launcher.render(Path("/tmp/l.sock"))
    assert launcher[0] == sys.executable and "/tmp/l.sock" in launcher
    with pytest.raises(ValueError, match="gateway.launcher"):  # a launcher's gateway cannot start without it
        descriptor.gateway.render(Path("/tmp/site-a/praxis.yaml"), Path("/tmp/site-a"))


def test_a_launcher_is_optional_and_renders_its_socket() -> None:
    data = _variant("gateway.launcher", {"command": ["/opt/warm", "--listen={socket}"], "env": {"W": "{python}"}})
    data["gateway"]["command"] = ["gw", "{config}", "--via={launcher}"]
    gateway = parse_impl(data).gateway
    assert gateway.launcher is not None
    assert gateway.launcher.render(Path("/s/l.sock")) == (["/opt/warm", "--listen=/s/l.sock"], {"W": sys.executable})
    assert gateway.render(Path("/c.yaml"), Path("/w"), Path("/s/l.sock"))[0] == ["gw", "/c.yaml", "--via=/s/l.sock"]
    assert parse_impl(VALID).gateway.launcher is None


def test_custom_descriptor_loads_and_renders(tmp_path: Path) -> None:
    descriptor = load_impl(str(_write(tmp_path, VALID)))
    assert descriptor.implementation == Implementation(
        "Example Corp", "example-gateway", "2.3.1", ("mailto:gateway@example.invalid",))
    assert descriptor.features == frozenset({"weightedRandom", "cookieAffinity"})
    assert descriptor.gateway.startup_timeout_s == 7.5
    assert descriptor.source == str(tmp_path / "impl.yaml")
    argv, env = descriptor.gateway.render(Path("/c/p.yaml"), Path("/w"))
    assert argv == ["/opt/example/bin/gw", "--config=/c/p.yaml", "--state", "/w/state"]
    assert env == {"GW_HOME": "/w", "GW_LOG": "debug"}


def test_optional_keys_have_defaults() -> None:
    data = copy.deepcopy(VALID)
    del data["gateway"]["env"], data["gateway"]["startup_timeout_s"], data["features"]
    descriptor = parse_impl(data)
    assert descriptor.features == frozenset()
    assert dict(descriptor.gateway.env) == {}
    assert descriptor.gateway.startup_timeout_s == 20.0


def test_a_version_command_is_a_list_of_strings() -> None:
    """The accepted twin of the version_command rejections below."""
    data = _variant("implementation.version_command", ["/opt/example/bin/gw", "--version"])
    assert parse_impl(data).implementation.version_command == ("/opt/example/bin/gw", "--version")
    assert parse_impl(copy.deepcopy(VALID)).implementation.version_command == ()


def test_literal_braces_survive_rendering() -> None:
    command = GatewayCommand(argv_template=("gw", "{config}", "--json={{\"a\": 1}}"), env={})
    argv, _ = command.render(Path("/c.yaml"), Path("/w"))
    assert argv == ["gw", "/c.yaml", '--json={"a": 1}']
    data = _variant("gateway.command", ["gw", "{config}", "--json={{\"a\": 1}}"])
    assert parse_impl(data).gateway.argv_template[2] == "--json={{\"a\": 1}}"


BAD_DESCRIPTORS = [
    # (what is wrong, descriptor, expected start of the message)
    ("missing block", _variant("implementation", _DELETE), "implementation: missing required key"),
    ("missing key", _variant("implementation.contact", _DELETE),
     "implementation.contact: missing required key"),
    ("missing command", _variant("gateway.command", _DELETE), "gateway.command: missing required key"),
    ("unknown top key", {**VALID, "extras": 1}, "extras: unknown key"),
    ("unknown nested key", _variant("gateway.cmd", ["x"]), "gateway.cmd: unknown key"),
    ("block not a mapping", _variant("gateway", ["gw", "{config}"]), "gateway: must be a mapping"),
    ("contact not a list", _variant("implementation.contact", "me@example.invalid"),
     "implementation.contact: must be a list"),
    ("contact item not a string", _variant("implementation.contact", ["ok", 3]),
     "implementation.contact[1]: must be a string"),
    ("version_command empty", _variant("implementation.version_command", []),
     "implementation.version_command: must be a non-empty list"),
    ("version_command a string", _variant("implementation.version_command", "gw --version"),
     "implementation.version_command: must be a non-empty list"),
    ("version is a number", _variant("implementation.version", 1.5),
     "implementation.version: must be a string"),
    ("empty organization", _variant("implementation.organization", " "),
     "implementation.organization: must not be empty"),
    ("command is a string", _variant("gateway.command", "gw -c {config}"),
     "gateway.command: must be a non-empty list"),
    ("command is empty", _variant("gateway.command", []), "gateway.command: must be a non-empty list"),
    ("command without config", _variant("gateway.command", ["gw", "--dir", "{workdir}"]),
     "gateway.command: must contain {config}"),
    ("command item not a string", _variant("gateway.command", ["gw", "{config}", 8080]),
     "gateway.command[2]: must be a string"),
    ("unknown placeholder", _variant("gateway.command", ["gw", "{config}", "--port={port}"]),
     "gateway.command[2]: unknown placeholder {port}"),
    ("placeholder with format spec", _variant("gateway.command", ["gw", "{config:>40}"]),
     "gateway.command[1]: unknown placeholder {config:>40}"),
    ("placeholder with attribute", _variant("gateway.command", ["gw", "{config}", "{python.real}"]),
     "gateway.command[2]: unknown placeholder {python.real}"),
    ("malformed template", _variant("gateway.command", ["gw", "{config"]),
     "gateway.command[1]: malformed template"),
    ("env not a mapping", _variant("gateway.env", ["A=b"]), "gateway.env: must be a mapping"),
    ("env value not a string", _variant("gateway.env", {"GW_PORT": 80}),
     "gateway.env.GW_PORT: must be a string"),
    ("env unknown placeholder", _variant("gateway.env", {"GW_HOME": "{home}"}),
     "gateway.env.GW_HOME: unknown placeholder {home}"),
    ("launcher placeholder without a launcher", _variant("gateway.command", ["gw", "{config}", "--via={launcher}"]),
     "gateway.command[2]: {launcher} needs a gateway.launcher"),
    ("launcher placeholder in env without a launcher", _variant("gateway.env", {"VIA": "{launcher}"}),
     "gateway.env.VIA: {launcher} needs a gateway.launcher"),
    ("launcher without its socket", _variant("gateway.launcher", {"command": ["warm"]}),
     "gateway.launcher.command: must contain {socket}"),
    ("launcher unknown key", _variant("gateway.launcher", {"command": ["warm", "{socket}"], "cwd": "/"}),
     "gateway.launcher.cwd: unknown key"),
    ("launcher with a gateway placeholder", _variant("gateway.launcher", {"command": ["warm", "{socket}", "{config}"]}),
     "gateway.launcher.command[2]: unknown placeholder {config}"),
    ("timeout negative", _variant("gateway.startup_timeout_s", -1),
     "gateway.startup_timeout_s: must be a positive"),
    ("timeout boolean", _variant("gateway.startup_timeout_s", True),
     "gateway.startup_timeout_s: must be a positive"),
    ("timeout string", _variant("gateway.startup_timeout_s", "20s"),
     "gateway.startup_timeout_s: must be a positive"),
    ("features not a list", _variant("features", "weightedRandom"), "features: must be a list"),
    ("unknown feature", _variant("features", ["weightedRandom", "teleport"]),
     "features[1]: unknown extended feature 'teleport'"),
    ("duplicate feature", _variant("features", ["skipPaths", "skipPaths"]),
     "features[1]: feature 'skipPaths' is listed"),
    ("feature not a string", _variant("features", [{"name": "skipPaths"}]), "features[0]: must be a string"),
]


@pytest.mark.parametrize(("data", "expected"), [(d, e) for _, d, e in BAD_DESCRIPTORS],
                         ids=[name for name, _, _ in BAD_DESCRIPTORS])
def test_bad_descriptor_names_the_key(tmp_path: Path, data: Any, expected: str) -> None:
    path = _write(tmp_path, data)
    with pytest.raises(ImplError) as caught:
        load_impl(str(path))
    assert str(caught.value).startswith(expected), str(caught.value)
    assert caught.value.key == expected.split(":")[0]


def test_descriptor_must_be_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(ImplError, match="descriptor must be a mapping, got a list"):
        load_impl(str(_write(tmp_path, ["implementation"])))
    with pytest.raises(ImplError, match="descriptor must be a mapping, got nothing"):
        load_impl(str(_write(tmp_path, "", name="empty.yaml")))


def test_invalid_yaml_reports_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "implementation:\n  organization: [unclosed\ngateway: {}\n")
    with pytest.raises(ImplError, match=r"not valid YAML at line \d+") as caught:
        load_impl(str(path))
    assert str(path) in str(caught.value)


def test_missing_file_is_an_impl_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ImplError, match="no such descriptor file") as caught:
        load_impl(str(missing))
    assert isinstance(caught.value, ValueError)
    assert str(missing) in str(caught.value)


# ------------------------------------------------------------------------------------------ gateway.run_as


@pytest.fixture
def as_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """Load descriptors as a harness running as root would."""
    monkeypatch.setattr("harness.run_as.os.geteuid", lambda: 0)
    monkeypatch.setattr("harness.run_as.os.getegid", lambda: 0)


def _run_as(tmp_path: Path, text: str) -> Any:
    """A descriptor whose gateway section ends with the YAML line `text`, loaded from a file."""
    gateway = "gateway:\n  command: [gw, '{config}']\n  " + text + "\n"
    head = yaml.safe_dump({key: value for key, value in VALID.items() if key != "gateway"})
    return load_impl(str(_write(tmp_path, head + gateway)))


def test_run_as_is_optional() -> None:
    assert parse_impl(VALID).gateway.run_as is None
    assert parse_impl(_variant("gateway.run_as", None)).gateway.run_as is None


def test_run_as_takes_a_user_name_or_uid_gid(tmp_path: Path, as_root: None) -> None:
    import pwd

    nobody = pwd.getpwnam("nobody")
    by_name = _run_as(tmp_path, "run_as: nobody").gateway.run_as
    assert (by_name.spec, by_name.uid, by_name.gid) == ("nobody", nobody.pw_uid, nobody.pw_gid)
    numeric = _run_as(tmp_path, 'run_as: "1000:50"').gateway.run_as
    assert (numeric.uid, numeric.gid) == (1000, 50)  # need not exist in the user database
    assert str(numeric) == "uid 1000, gid 50" and "nobody" in str(by_name)


RUN_AS_ERRORS = [
    ("unknown user", "run_as: no-such-user-4711", "unknown user 'no-such-user-4711'"),
    ("root by name", "run_as: root", "'root' is root"),
    ("root by number", 'run_as: "0:0"', "'0:0' is root"),
    ("root's group", 'run_as: "1000:0"', "'1000:0' has group 0 (root)"),
    ("too many fields", 'run_as: "1:2:3"', "malformed value '1:2:3'"),
    ("not numbers", 'run_as: "web:web"', "malformed value 'web:web'"),
    ("a bare number", 'run_as: "65534"', "malformed value '65534'"),
    ("empty", 'run_as: " "', "must not be empty"),
    ("out of range", 'run_as: "4294967295:1"', "uid and gid must be at most"),
    ("YAML reads it as a number", "run_as: 1000:50", 'got a number (quote "uid:gid": YAML reads'),
    ("a list", "run_as: [nobody]", 'must be a user name or "uid:gid", got a list'),
]


@pytest.mark.parametrize(("text", "expected"), [(t, e) for _, t, e in RUN_AS_ERRORS],
                         ids=[name for name, _, _ in RUN_AS_ERRORS])
def test_bad_run_as_names_the_key(tmp_path: Path, as_root: None, text: str, expected: str) -> None:
    with pytest.raises(ImplError) as caught:
        _run_as(tmp_path, text)
    assert caught.value.key == "gateway.run_as"
    assert str(caught.value).startswith("gateway.run_as: ") and expected in str(caught.value), str(caught.value)


def test_run_as_another_user_needs_a_root_harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("harness.run_as.os.geteuid", lambda: 1000)
    monkeypatch.setattr("harness.run_as.os.getegid", lambda: 1000)
    with pytest.raises(ImplError) as caught:
        _run_as(tmp_path, "run_as: nobody")
    assert caught.value.key == "gateway.run_as"
    assert "runs as uid 1000, gid 1000, not root, so it cannot start the gateway as nobody" in str(caught.value)
    with pytest.raises(ImplError, match="cannot start the gateway as uid 1000, gid 50"):
        _run_as(tmp_path, 'run_as: "1000:50"')
    same = _run_as(tmp_path, 'run_as: "1000:1000"').gateway.run_as  # its own user: nothing to switch
    assert (same.uid, same.gid) == (1000, 1000) and not same.active


SYNC: dict[str, Any] = {
    "command": ["/opt/sync", "--from", "{configmap}", "--into", "{target}/{file}", "--scope", "{scope}",
                "--gw", "{gateway}", "--admin", "{admin}"],
    "ready_path": "/readyz", "live_path": "/livez",
}


def test_overlay_sync_section_renders_every_placeholder(tmp_path: Path) -> None:
    descriptor = parse_impl({**copy.deepcopy(VALID), "overlay_sync": SYNC, "features": ["overlaySync"]})
    assert descriptor.overlay_sync is not None
    scope = {"network": "n", "gateway": "g", "namespace": "ns", "local_site": "s"}
    argv, env = descriptor.overlay_sync.render(configmap=tmp_path / "cm.yaml", key="k", target=tmp_path / "t",
                                               file="f.json", scope=scope, admin="127.0.0.1:9", workdir=tmp_path)
    assert argv == ["/opt/sync", "--from", str(tmp_path / "cm.yaml"), "--into", f"{tmp_path / 't'}/f.json",
                    "--scope", "network=n,gateway=g,namespace=ns,local_site=s", "--gw", "g", "--admin", "127.0.0.1:9"]
    assert env == {} and descriptor.overlay_sync.ready_path == "/readyz"


@pytest.mark.parametrize(("change", "expected"), [
    ({"command": ["/opt/sync", "{target}", "{admin}"]}, "overlay_sync.command: must contain {configmap}"),
    ({"command": [*SYNC["command"], "{config}"]}, "overlay_sync.command[11]: unknown placeholder"),
    ({"ready_path": "readyz"}, "overlay_sync.ready_path: must be an absolute HTTP path"),
    ({"live_path": None}, "overlay_sync.live_path"),
    ({"startup_timeout_s": 0}, "overlay_sync.startup_timeout_s: must be a positive number"),
    ({"port": 9}, "overlay_sync.port"),
])
def test_bad_overlay_sync_section_names_the_key(change: dict[str, Any], expected: str) -> None:
    section = {**SYNC, **change}
    with pytest.raises(ImplError) as info:
        parse_impl({**copy.deepcopy(VALID), "overlay_sync": section})
    assert expected in str(info.value)
    parse_impl({**copy.deepcopy(VALID), "overlay_sync": SYNC})  # the unchanged section loads


def test_overlay_sync_feature_needs_the_section() -> None:
    with pytest.raises(ImplError, match="overlaySync is claimed but there is no overlay_sync section"):
        parse_impl({**copy.deepcopy(VALID), "features": ["overlaySync"]})
    parse_impl({**copy.deepcopy(VALID), "overlay_sync": SYNC, "features": ["overlaySync"]})


def test_overlay_sync_metrics_feature_needs_a_metrics_path() -> None:
    claimed = ["overlaySync", "overlaySyncMetrics"]
    with pytest.raises(ImplError, match="overlay_sync.metrics_path does not say"):
        parse_impl({**copy.deepcopy(VALID), "overlay_sync": SYNC, "features": claimed})
    descriptor = parse_impl({**copy.deepcopy(VALID), "overlay_sync": {**SYNC, "metrics_path": "/metrics"},
                             "features": claimed})
    assert descriptor.overlay_sync is not None and descriptor.overlay_sync.metrics_path == "/metrics"


def test_dynamic_weights_need_the_switch_the_operator_names() -> None:
    """dynamicWeights has no stable GridNetwork field: a descriptor claiming it names the spec that turns it on."""
    operator = {"command": ["/opt/op", "{manifests}", "{out}"]}
    with pytest.raises(ImplError, match="dynamicWeights is claimed but operator.dynamic_weights"):
        parse_impl({**copy.deepcopy(VALID), "operator": operator, "features": ["dynamicWeights"]})
    with pytest.raises(ImplError, match="operator.dynamic_weights: must be a non-empty mapping"):
        parse_impl({**copy.deepcopy(VALID), "operator": {**operator, "dynamic_weights": []}})
    descriptor = parse_impl({**copy.deepcopy(VALID), "features": ["dynamicWeights"],
                             "operator": {**operator, "dynamic_weights": {"placementPolicy": {"strategy": "dyn"}}}})
    assert descriptor.operator is not None
    assert dict(descriptor.operator.dynamic_weights or {}) == {"placementPolicy": {"strategy": "dyn"}}


_SIGNALS_ARGS = ["--signals", "{signals_address}", "--cert", "{signals_cert}", "--key", "{signals_key}",
                 "--ca", "{signals_client_ca}", "--site", "{signals_site}"]


def test_signals_relay_needs_the_arguments_that_serve_it(tmp_path: Path) -> None:
    """signalsRelay is claimed with operator.signals_args, appended (placeholders filled) only when asked for."""
    operator = {"command": ["/opt/op", "{manifests}", "{out}"]}
    with pytest.raises(ImplError, match="signalsRelay is claimed but operator.signals_args"):
        parse_impl({**copy.deepcopy(VALID), "operator": operator, "features": ["signalsRelay"]})
    descriptor = parse_impl({**copy.deepcopy(VALID), "features": ["signalsRelay"],
                             "operator": {**operator, "signals_args": _SIGNALS_ARGS}})
    assert descriptor.operator is not None
    plain, _ = descriptor.operator.render(tmp_path / "m", tmp_path / "o", tmp_path, tmp_path / "ca.pem")
    assert plain == ["/opt/op", str(tmp_path / "m"), str(tmp_path / "o")]
    values = {"signals_address": "127.0.0.1:17980", "signals_cert": "c.pem", "signals_key": "k.pem",
              "signals_client_ca": "ca.pem", "signals_site": "site-a"}
    argv, _ = descriptor.operator.render(tmp_path / "m", tmp_path / "o", tmp_path, tmp_path / "ca.pem",
                                         signals=values)
    assert argv[3:] == ["--signals", "127.0.0.1:17980", "--cert", "c.pem", "--key", "k.pem", "--ca", "ca.pem",
                        "--site", "site-a"]
    without = parse_impl({**copy.deepcopy(VALID), "operator": operator}).operator
    assert without is not None
    with pytest.raises(ValueError, match="operator.signals_args: not given"):
        without.render(tmp_path / "m", tmp_path / "o", tmp_path, tmp_path / "ca.pem", signals=values)


@pytest.mark.parametrize(("signals_args", "expected"), [
    ("--signals {signals_address}", "operator.signals_args: must be a non-empty list"),
    ([], "operator.signals_args: must be a non-empty list"),
    ([a for a in _SIGNALS_ARGS if a != "{signals_client_ca}"],
     "operator.signals_args: must contain {signals_client_ca}"),
    ([*_SIGNALS_ARGS, "{mesh_bind}"], "operator.signals_args[10]: unknown placeholder {mesh_bind}"),
])
def test_bad_signals_args_name_the_key(signals_args: Any, expected: str) -> None:
    operator = {"command": ["/opt/op", "{manifests}", "{out}"], "signals_args": signals_args}
    with pytest.raises(ImplError) as caught:
        parse_impl({**copy.deepcopy(VALID), "operator": operator})
    assert str(caught.value).startswith(expected), str(caught.value)


# ----------------------------------------------------------------------------- descriptor breakages

_BROKEN_BUILD = {"name": "drops-lkg", "summary": "forgets the last good overlay", "profile": "consumer",
                 "must_fail": ["CONS-RELOAD-REJECT[*]"],
                 "gateway": {"command": ["/opt/example/bin/gw-broken", "--config={config}"]}}


def test_a_breakage_replaces_component_sections_and_names_its_profile() -> None:
    descriptor = parse_impl({**VALID, "breakages": [_BROKEN_BUILD]})
    (breakage,) = descriptor.breakages
    assert (breakage.name, breakage.profile) == ("drops-lkg", "consumer")
    assert breakage.must_fail == ("CONS-RELOAD-REJECT[*]",)
    assert breakage.sections["gateway"]["command"][0] == "/opt/example/bin/gw-broken"
    assert descriptor.gateway.argv_template[0] == "/opt/example/bin/gw"  # the descriptor's own is unchanged
    assert parse_impl(VALID).breakages == ()


@pytest.mark.parametrize(("change", "key"), [
    ({"profile": "nosuch"}, "breakages[0].profile"),
    ({"name": "Drops LKG"}, "breakages[0].name"),
    ({"gateway": {"command": ["/opt/gw-broken"]}}, "breakages[0].gateway.command"),  # never receives {config}
    ({"must_fail": "CONS-X"}, "breakages[0].must_fail"),
    ({"colour": "red"}, "breakages[0]"),
])
def test_a_bad_breakage_is_refused_naming_its_key(change: dict[str, Any], key: str) -> None:
    parse_impl({**VALID, "breakages": [_BROKEN_BUILD]})  # the twin: the breakage as written is accepted
    with pytest.raises(ImplError) as caught:
        parse_impl({**VALID, "breakages": [{**_BROKEN_BUILD, **change}]})
    assert str(caught.value).startswith(key), caught.value


def test_a_breakage_must_replace_a_section_and_be_named_once() -> None:
    no_section = {k: v for k, v in _BROKEN_BUILD.items() if k != "gateway"}
    with pytest.raises(ImplError, match="names no component section"):
        parse_impl({**VALID, "breakages": [no_section]})
    with pytest.raises(ImplError, match="named twice"):
        parse_impl({**VALID, "breakages": [_BROKEN_BUILD, _BROKEN_BUILD]})
