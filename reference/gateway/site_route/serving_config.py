"""The serving config the site's operator writes and the gateway reads (path in GRID_SERVING_CONFIG).

JSON (YAML accepted too), unknown keys rejected at every level, every error naming its key path:
the local site, how long samples are kept and how fresh a reading must be, the candidates (model,
site, cluster) and the peers whose signals endpoints the gateway polls over mutual TLS.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from reference.gateway.schema import (
    ConfigError,
    address,
    boolean,
    integer,
    item,
    key,
    mapping,
    sequence,
    string,
)
from reference.overlay import CANDIDATE_KINDS

SERVING_ENV = "GRID_SERVING_CONFIG"
MAX_SERVING_BYTES = 4 * 1024 * 1024
MAX_CANDIDATES = 4096
MAX_PEERS = 256
MAX_PATH_BYTES = 4096
MAX_WINDOW_SECS = 86_400
MAX_MS = 3_600_000
ADMITTED = "new_and_existing"
ADMISSIONS = (ADMITTED, "existing_only", "excluded", "none")
_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class ServingCandidate:
    kind: str
    name: str
    site: str
    cluster: str
    fresh: bool = True
    admission: str = ADMITTED

    @property
    def admitted(self) -> bool:
        """Whether new requests may go to this candidate (only "new_and_existing" admits them)."""
        return self.admission == ADMITTED


@dataclass(frozen=True)
class ServingPeer:
    site: str
    addr: tuple[str, int]
    server_name: str
    authority: str
    path: str
    interval_ms: int
    connect_timeout_ms: int
    request_timeout_ms: int
    grid_ca_path: Path
    client_cert_path: Path
    client_key_path: Path

    @property
    def url(self) -> str:
        host, port = self.addr
        return f"https://{f'[{host}]' if ':' in host else host}:{port}{self.path}"


@dataclass(frozen=True)
class ServingConfig:
    local_site: str
    window_secs: int = 60
    load_window_ms: int = 2_000
    candidates: tuple[ServingCandidate, ...] = ()
    peers: tuple[ServingPeer, ...] = ()


_CANDIDATE_KEYS = ("kind", "name", "site", "cluster", "fresh", "admission")
_PEER_REQUIRED = ("site", "addr", "grid_ca_path", "client_cert_path", "client_key_path")
_PEER_OPTIONAL = ("server_name", "authority", "path", "interval_ms", "connect_timeout_ms", "request_timeout_ms")


def _candidate(raw: Any, path: str) -> ServingCandidate:
    mapping(raw, path, required=("kind", "name", "site", "cluster"), optional=("fresh", "admission"))
    kind = string(raw["kind"], key(path, "kind"))
    if kind not in CANDIDATE_KINDS:
        raise ConfigError(key(path, "kind"), f"must be one of {', '.join(sorted(CANDIDATE_KINDS))}")
    admission = raw.get("admission", ADMITTED)
    if admission not in ADMISSIONS:
        raise ConfigError(key(path, "admission"), f"must be one of {', '.join(ADMISSIONS)}")
    return ServingCandidate(
        kind=kind,
        name=string(raw["name"], key(path, "name")),
        site=string(raw["site"], key(path, "site")),
        cluster=string(raw["cluster"], key(path, "cluster")),
        fresh=boolean(raw.get("fresh", True), key(path, "fresh")),
        admission=admission,
    )


def _file(raw: Any, path: str, base: Path | None) -> Path:
    where = Path(string(raw, path, max_len=MAX_PATH_BYTES))
    return where if where.is_absolute() or base is None else base / where


def _peer(raw: Any, path: str, base: Path | None) -> ServingPeer:
    mapping(raw, path, required=_PEER_REQUIRED, optional=_PEER_OPTIONAL)
    host, port = address(raw["addr"], key(path, "addr"))
    if port == 0:
        raise ConfigError(key(path, "addr"), "port must be 1..65535")
    server_name = string(raw.get("server_name", host), key(path, "server_name"))
    request_path = string(raw.get("path", "/v1/site/signals"), key(path, "path"), max_len=MAX_PATH_BYTES)
    if not request_path.startswith("/") or any(ch in request_path for ch in " #"):
        raise ConfigError(key(path, "path"), "must be an absolute request path")
    return ServingPeer(
        site=string(raw["site"], key(path, "site")),
        addr=(host, port),
        server_name=server_name,
        authority=string(raw.get("authority", server_name), key(path, "authority")),
        path=request_path,
        interval_ms=integer(raw.get("interval_ms", 1_000), key(path, "interval_ms"), 10, MAX_MS),
        connect_timeout_ms=integer(raw.get("connect_timeout_ms", 2_000), key(path, "connect_timeout_ms"), 1, MAX_MS),
        request_timeout_ms=integer(raw.get("request_timeout_ms", 2_000), key(path, "request_timeout_ms"), 1, MAX_MS),
        grid_ca_path=_file(raw["grid_ca_path"], key(path, "grid_ca_path"), base),
        client_cert_path=_file(raw["client_cert_path"], key(path, "client_cert_path"), base),
        client_key_path=_file(raw["client_key_path"], key(path, "client_key_path"), base),
    )


def parse_serving(raw: Any, base: Path | None = None) -> ServingConfig:
    """A serving config from parsed data; relative file paths resolve against `base`. Raises ConfigError."""
    mapping(raw, "", required=("local_site", "candidates"),
            optional=("window_secs", "load_window_ms", "peers"))
    candidates = tuple(
        _candidate(entry, item("candidates", i))
        for i, entry in enumerate(sequence(raw["candidates"], "candidates", max_items=MAX_CANDIDATES))
    )
    seen: dict[tuple[str, str, str, str], int] = {}
    for index, c in enumerate(candidates):
        identity = (c.kind, c.name, c.site, c.cluster)
        if identity in seen:
            raise ConfigError(item("candidates", index), f"duplicate of candidates[{seen[identity]}]")
        seen[identity] = index
    peers = tuple(
        _peer(entry, item("peers", i), base)
        for i, entry in enumerate(sequence(raw.get("peers", []), "peers", max_items=MAX_PEERS))
    )
    sites: set[str] = set()
    for index, peer in enumerate(peers):
        if peer.site in sites:
            raise ConfigError(key(item("peers", index), "site"), f"duplicate peer site {peer.site!r}")
        sites.add(peer.site)
    return ServingConfig(
        local_site=string(raw["local_site"], "local_site"),
        window_secs=integer(raw.get("window_secs", 60), "window_secs", 1, MAX_WINDOW_SECS),
        load_window_ms=integer(raw.get("load_window_ms", 2_000), "load_window_ms", 1, MAX_MS),
        candidates=candidates,
        peers=peers,
    )


def parse_serving_bytes(data: bytes, base: Path | None = None) -> ServingConfig:
    if len(data) > MAX_SERVING_BYTES:
        raise ConfigError("", f"exceeds {MAX_SERVING_BYTES} bytes")
    try:
        raw = yaml.load(data.decode("utf-8"), Loader=_YAML_LOADER)  # JSON is YAML; a safe loader
    except UnicodeDecodeError:
        raise ConfigError("", "is not UTF-8") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        raise ConfigError("", f"invalid JSON/YAML{at}") from None
    if raw is None:
        raise ConfigError("", "is empty")
    return parse_serving(raw, base)


def read_serving_bytes(path: Path) -> bytes:
    with open(path, "rb") as handle:
        return handle.read(MAX_SERVING_BYTES + 1)


def load_serving(path: Path) -> ServingConfig:
    """Read and validate the serving config at `path`; raises OSError or ConfigError."""
    return parse_serving_bytes(read_serving_bytes(path), path.parent)


def describe_error(path: Path, exc: BaseException) -> str:
    """One line saying which file and which key is wrong."""
    if isinstance(exc, OSError):
        return f"cannot read serving config {str(path)!r}: {exc.strerror or exc}"
    return f"serving config {str(path)!r}: {exc}"
