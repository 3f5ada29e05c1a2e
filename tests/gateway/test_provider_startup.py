"""Startup refusals for provider-side configs: each exits 2 with one stderr line naming the key."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from gateway_support import REPO, config_text
from provider_tls_support import Pki
from test_provider_side import ENV_NAME, TOKEN_ENV, TOKEN_VALUE, provider_filters

from reference.gateway.config import parse_config
from reference.gateway.schema import ConfigError

Mutation = Callable[[dict[str, Any], Pki], object]


def _chain(raw: dict[str, Any]) -> list[dict[str, Any]]:
    return raw["filter_chains"][0]["filters"]  # type: ignore[no-any-return]


def _tls(raw: dict[str, Any]) -> dict[str, Any]:
    return raw["listeners"][0]["tls"]  # type: ignore[no-any-return]


def _move_peer_trust(raw: dict[str, Any], to: int) -> None:
    filters = _chain(raw)
    filters.insert(to, filters.pop(0))


CASES: list[tuple[str, Mutation, str, str]] = [
    ("no tls", lambda r, p: r["listeners"][0].pop("tls"), "listeners[0].tls",
     "provider_route requires tls.client_cert_mode: require"),
    ("no client_ca", lambda r, p: _tls(r).pop("client_ca"), "listeners[0].tls.client_ca",
     "client_ca is required"),
    ("client_cert_mode request", lambda r, p: _tls(r).update(client_cert_mode="request"),
     "listeners[0].tls.client_cert_mode", "provider_route requires tls.client_cert_mode: require"),
    ("client_cert_mode none", lambda r, p: _tls(r).update(client_cert_mode="none"),
     "listeners[0].tls.client_cert_mode", "provider_route requires tls.client_cert_mode: require"),
    ("peer_identity_trust not first", lambda r, p: _move_peer_trust(r, 1),
     "filter_chains[0].filters[1].filter", "peer_identity_trust must be the first filter"),
    ("peer_identity_trust after provider_route", lambda r, p: _move_peer_trust(r, 2),
     "filter_chains[0].filters[1].filter", "provider_route requires a preceding peer_identity_trust"),
    ("no peer_identity_trust", lambda r, p: _chain(r).pop(0),
     "filter_chains[0].filters[1].filter", "provider_route requires a preceding peer_identity_trust"),
    ("unreadable server cert", lambda r, p: _tls(r)["certificates"][0].update(cert_path=str(p.root / "nope.crt")),
     "listeners[0].tls.certificates[0].cert_path", "cannot read"),
    ("key of another cert", lambda r, p: _tls(r)["certificates"][0].update(key_path=str(p.client.key)),
     "listeners[0].tls.certificates[0].key_path", "does not match"),
    ("missing credential file", lambda r, p: _chain(r)[3]["credentials"][2].update(file=str(p.root / "none")),
     "filter_chains[0].filters[3].credentials[2].file", "cannot read credential file"),
    ("unset credential env var", lambda r, p: _chain(r)[3]["credentials"][1].update(env_var="AGN_TEST_UNSET_VAR"),
     "filter_chains[0].filters[3].credentials[1].env_var", "is not set"),
    ("two token sources", lambda r, p: _chain(r)[3]["credentials"][0].update(env_var=ENV_NAME),
     "filter_chains[0].filters[3].credentials[0].env_var", "multiple token sources"),
    ("provider_route cluster not declared", lambda r, p: _chain(r)[2]["routes"][0].update(cluster="elsewhere"),
     "filter_chains[0].filters[2].routes[0].cluster", "not declared"),
    ("bad trusted digest", lambda r, p: _chain(r)[0].update(trusted_peers=[{"cert_digest": "AB" * 32}]),
     "filter_chains[0].filters[0].trusted_peers[0].cert_digest", "64 lowercase hex"),
]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


PROCESS_CASES = ("no client_ca", "client_cert_mode request", "peer_identity_trust not first",
                 "peer_identity_trust after provider_route", "missing credential file")


def _raw(tmp_path: Path, pki: Pki) -> dict[str, Any]:
    token_file = tmp_path / "token"
    token_file.write_text("file-token\n")
    listeners = [{"name": "provider", "address": "127.0.0.1:0", "filter_chains": ["main"],
                  "tls": pki.listener_tls()}]
    raw: dict[str, Any] = yaml.safe_load(
        config_text(provider_filters("127.0.0.1:9", token_file), listeners=listeners)
    )
    return raw


@pytest.mark.parametrize(("name", "mutate", "path", "fragment"), CASES, ids=[c[0] for c in CASES])
def test_provider_config_refused(
    tmp_path: Path, pki: Pki, monkeypatch: pytest.MonkeyPatch, name: str, mutate: Mutation, path: str,
    fragment: str,
) -> None:
    monkeypatch.setenv(ENV_NAME, TOKEN_ENV)
    monkeypatch.delenv("AGN_TEST_UNSET_VAR", raising=False)
    raw = _raw(tmp_path, pki)
    mutate(raw, pki)
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    assert info.value.path == path, str(info.value)
    assert fragment in info.value.message, str(info.value)
    for token in (TOKEN_VALUE, TOKEN_ENV, "file-token"):
        assert token not in str(info.value), "a token value appeared in a config error"


@pytest.mark.parametrize("name", PROCESS_CASES)
def test_gateway_process_exits_2_naming_the_key(tmp_path: Path, pki: Pki, name: str) -> None:
    _, mutate, path, fragment = next(case for case in CASES if case[0] == name)
    raw = _raw(tmp_path, pki)
    mutate(raw, pki)
    config = tmp_path / "praxis.yaml"
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    env = {**os.environ, "PYTHONPATH": str(REPO), ENV_NAME: TOKEN_ENV}
    result = subprocess.run(
        [sys.executable, "-m", "reference.gateway.cli", "-c", str(config)],
        capture_output=True, text=True, env=env, cwd=str(REPO), timeout=60,
    )
    assert result.returncode == 2, (name, result.returncode, result.stderr)
    assert result.stdout == "", "a refused config must not bind or announce listeners"
    line = result.stderr.strip()
    assert line.startswith(f"config error: {path}:") and fragment in line, line
    for token in (TOKEN_VALUE, TOKEN_ENV, "file-token"):
        assert token not in result.stderr, "a token value appeared in a config error"


def test_the_valid_provider_config_passes_check(tmp_path: Path, pki: Pki) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("file-token\n")
    listeners = [{"name": "provider", "address": "127.0.0.1:0", "filter_chains": ["main"],
                  "tls": pki.listener_tls()}]
    config = tmp_path / "praxis.yaml"
    config.write_text(config_text(provider_filters("127.0.0.1:9", token_file), listeners=listeners))
    result = subprocess.run(
        [sys.executable, "-m", "reference.gateway.cli", "-c", str(config), "--check"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO), ENV_NAME: TOKEN_ENV},
        cwd=str(REPO), timeout=30,
    )
    assert (result.returncode, result.stdout.strip()) == (0, "config ok"), result.stderr
