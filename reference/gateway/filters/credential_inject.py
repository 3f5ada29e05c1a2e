"""credential_inject: replace the caller's Authorization with the provider credential a route selected.

A routing filter earlier in the pipeline (provider_route, or intelligent_route on a consumer's final
hop) publishes a credential *reference* in request metadata: ``intelligent_route.credential.strategy``,
``.name``, ``.namespace`` and ``.key``. This filter looks the reference up in the credentials it read at
startup and sets ``Authorization: Bearer <token>``. With ``projected_credential_mount_base`` a reference
the startup table lacks is read, per request, from ``<base>/<namespace>/<name>/<key>``: a Secret mounted
there after startup (or selected by a later overlay) is used without rebuilding the pipeline. No
reference at all means the route needs no credential and the request passes untouched; a partial,
unsupported or unknown reference fails closed with 503. Token values live only inside this filter:
they never reach logs, metrics, metadata or error bodies, and config errors name the offending key,
never a value.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any

from reference.gateway.context import Reject, RequestContext
from reference.gateway.logfmt import kv
from reference.gateway.schema import ConfigError, item, key, mapping, sequence

TYPE = "credential_inject"
MAX_CREDENTIALS = 1024
MAX_REFERENCE_LEN = 256
MAX_SOURCE_LEN = 4096
MAX_TOKEN_BYTES = 16 * 1024
STRATEGY_BEARER_TOKEN = "bearer_token"
SOURCES = ("value", "env_var", "file")
NS = "intelligent_route.credential."
UNAVAILABLE = Reject(503, "provider credential unavailable\n")
_TOKEN = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?")

log = logging.getLogger("agn.gateway.credential_inject")

Reference = tuple[str, str, str]  # (name, namespace, key)


@dataclass(frozen=True)
class CredentialInjectConfig:
    # The assembled header values, by reference. Excluded from repr so a config dump cannot leak them.
    headers: dict[Reference, str] = field(repr=False)
    # Where projected Secrets are mounted (<base>/<namespace>/<name>/<key>); None: the startup table only.
    mount_base: str | None = None


def _bounded(raw: Any, path: str, limit: int) -> str:
    if not isinstance(raw, str) or not raw.strip() or len(raw.encode("utf-8", "surrogatepass")) > limit:
        raise ConfigError(path, f"must contain 1-{limit} bytes")
    return raw


def _checked_token(token: str, path: str, source: str) -> str:
    """Validate a token without ever echoing it."""
    if not token or len(token.encode("utf-8", "surrogatepass")) > MAX_TOKEN_BYTES:
        raise ConfigError(path, f"credential from {source} must contain 1-{MAX_TOKEN_BYTES} bytes")
    if not _TOKEN.fullmatch(token):
        raise ConfigError(path, f"credential from {source} is not a valid header value (visible ASCII only)")
    return token


def _read_file(file_path: str, path: str) -> str:
    try:
        with open(file_path, "rb") as handle:
            data = handle.read(MAX_TOKEN_BYTES + 1)
    except OSError as exc:
        raise ConfigError(path, f"cannot read credential file {file_path!r}: {exc.strerror or exc}") from None
    if len(data) > MAX_TOKEN_BYTES:
        raise ConfigError(path, f"credential file {file_path!r} exceeds {MAX_TOKEN_BYTES} bytes")
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise ConfigError(path, f"credential file {file_path!r} is not a valid header value") from None
    return _checked_token(text.strip(), path, f"file {file_path!r}")


def _token(raw: dict[str, Any], path: str) -> str:
    given = [name for name in SOURCES if raw.get(name) is not None]
    if not given:
        raise ConfigError(path, "must have exactly one of 'value', 'env_var', or 'file'")
    if len(given) > 1:
        raise ConfigError(
            key(path, given[1]), "has multiple token sources; use exactly one of 'value', 'env_var', or 'file'"
        )
    source = given[0]
    where = key(path, source)
    if source == "value":
        if not isinstance(raw["value"], str):
            raise ConfigError(where, "must be a string")
        return _checked_token(raw["value"], where, "value")
    if source == "env_var":
        name = _bounded(raw["env_var"], where, MAX_SOURCE_LEN)
        value = os.environ.get(name)
        if value is None:
            raise ConfigError(where, f"environment variable {name!r} is not set")
        return _checked_token(value, where, f"environment variable {name!r}")
    return _read_file(_bounded(raw["file"], where, MAX_SOURCE_LEN), where)


def parse(raw: dict[str, Any], path: str) -> CredentialInjectConfig:
    mapping(raw, path, required=("filter",), optional=("credentials", "projected_credential_mount_base"))
    mount_base = None
    if raw.get("projected_credential_mount_base") is not None:
        base_path = key(path, "projected_credential_mount_base")
        mount_base = _bounded(raw["projected_credential_mount_base"], base_path, MAX_SOURCE_LEN)
        if not os.path.isabs(mount_base):
            raise ConfigError(base_path, "must be an absolute path")
    where = key(path, "credentials")
    entries = sequence(raw.get("credentials", []), where, max_items=MAX_CREDENTIALS)
    if not entries and mount_base is None:
        raise ConfigError(where, "empty credentials requires projected_credential_mount_base")
    headers: dict[Reference, str] = {}
    for index, entry in enumerate(entries):
        entry_path = item(where, index)
        mapping(entry, entry_path, required=("name", "namespace", "key"), optional=("strategy", "header", *SOURCES))
        strategy = entry.get("strategy", STRATEGY_BEARER_TOKEN)
        if strategy != STRATEGY_BEARER_TOKEN:
            shown = strategy if isinstance(strategy, str) else repr(strategy)
            raise ConfigError(
                key(entry_path, "strategy"),
                f"unsupported strategy {shown!r} (this gateway build supports 'bearer_token')",
            )
        if entry.get("header") is not None:
            raise ConfigError(key(entry_path, "header"), "'header' is not valid for strategy 'bearer_token'")
        reference = (
            _bounded(entry["name"], key(entry_path, "name"), MAX_REFERENCE_LEN),
            _bounded(entry["namespace"], key(entry_path, "namespace"), MAX_REFERENCE_LEN),
            _bounded(entry["key"], key(entry_path, "key"), MAX_REFERENCE_LEN),
        )
        if reference in headers:
            raise ConfigError(entry_path, "duplicate credential entry for '{}/{}/{}'".format(*reference))
        headers[reference] = "Bearer " + _token(entry, entry_path)
    return CredentialInjectConfig(headers, mount_base)


def _segment(value: str) -> bool:
    """A reference field usable as one path component under the mount base (no separators, no dot names)."""
    return bool(value) and value not in (".", "..") and "/" not in value and "\\" not in value and "\0" not in value


def read_projected(base: str, name: str, namespace: str, ref_key: str) -> str | None:
    """The header value of a projected Secret key, or None when it is absent or unusable (never raises)."""
    if not (_segment(name) and _segment(namespace) and _segment(ref_key)):
        return None
    try:
        with open(os.path.join(base, namespace, name, ref_key), "rb") as handle:
            data = handle.read(MAX_TOKEN_BYTES + 1)
        token = data.decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if len(data) > MAX_TOKEN_BYTES or not _TOKEN.fullmatch(token):
        return None
    return "Bearer " + token


class CredentialInjectFilter:
    needs_body = False

    def __init__(self, config: CredentialInjectConfig) -> None:
        self._headers = config.headers
        self._mount_base = config.mount_base

    def __repr__(self) -> str:
        return f"CredentialInjectFilter(credentials={len(self._headers)}, projected={self._mount_base is not None})"

    def on_request(self, ctx: RequestContext) -> Reject | None:
        md = ctx.metadata
        strategy = md.get(NS + "strategy")
        name = md.get(NS + "name")
        namespace = md.get(NS + "namespace")
        ref_key = md.get(NS + "key")
        if strategy is None and name is None and namespace is None and ref_key is None:
            return None
        if strategy != STRATEGY_BEARER_TOKEN or name is None or namespace is None or ref_key is None:
            log.warning(
                "credential_inject: incomplete or unsupported credential reference; failing closed %s",
                kv(strategy=strategy if isinstance(strategy, str) else "missing"),
            )
            return UNAVAILABLE
        value = self._headers.get((name, namespace, ref_key))
        if value is None and self._mount_base is not None:
            value = read_projected(self._mount_base, name, namespace, ref_key)
        if value is None:
            log.warning(
                "credential_inject: no configured token for selected credential; failing closed %s",
                kv(name=name, namespace=namespace, key=ref_key),
            )
            return UNAVAILABLE
        headers = ctx.headers
        headers.popall("Authorization", None)
        headers.popall("x-api-key", None)
        headers["Authorization"] = value
        return None
