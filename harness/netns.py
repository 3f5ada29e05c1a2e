"""Network namespaces for a run's sites, so mesh suites can cut and heal links between sites.

A `Fabric` puts every site in its own network namespace. A hub namespace holds a Linux bridge; each site
joins it through a veth pair (the site side is `eth0`), and one more veth pair joins the root namespace,
so the harness process reaches every site directly. Addresses come from one /24 of the RFC 2544
benchmarking block 198.18.0.0/15 that is not routed in the root namespace: it exists only inside the
fabric and disappears with it. `partition` installs reject routes inside the site namespaces, so a cut
is symmetric, takes effect at once, and never touches the root namespace.

This needs Linux, root and iproute2; `netns_unavailable()` says why not when it cannot work, so suites
skip with that reason instead of failing. Namespace names carry the owner's pid, so a run that died
without cleaning up is swept by the next one (`cleanup_stale`).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import ipaddress
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

#: Every namespace this module creates starts with this prefix, followed by the owner pid and a dash.
NAMESPACE_PREFIX = "agnc-"
#: The private block fabric addresses come from (RFC 2544, never routed on the internet).
FABRIC_BLOCK = ipaddress.IPv4Network("198.18.0.0/15")
#: Site i listens on host number SITE_HOST_OFFSET + i of the fabric's /24; the root side is host 1.
SITE_HOST_OFFSET = 10
ROOT_HOST = 1
MAX_SITES = 254 - SITE_HOST_OFFSET + 1
#: Linux limit on interface names (IFNAMSIZ - 1).
IFNAME_MAX = 15
#: The name a site's interface has inside its namespace.
SITE_IFNAME = "eth0"

CutKind = Literal["prohibit", "unreachable", "blackhole"]

_IP_TIMEOUT = 20.0
_STALE_RE = re.compile(rf"^{re.escape(NAMESPACE_PREFIX)}(\d+)-")
_ROUTE_TYPES = frozenset(
    {"unicast", "local", "broadcast", "multicast", "anycast", "throw", "unreachable", "prohibit", "blackhole",
     "nat"}
)
_serial = itertools.count()


class FabricError(RuntimeError):
    """An `ip` command failed; carries the command line and what `ip` printed on stderr."""

    def __init__(self, command: Sequence[str], stderr: str, returncode: int | None = None,
                 stdin: str | None = None) -> None:
        self.command = list(command)
        self.stderr = stderr.strip()
        self.returncode = returncode
        self.stdin = stdin
        shown = " ".join(self.command)
        if stdin:
            shown += " <<< " + repr("; ".join(line for line in stdin.splitlines() if line))
        status = f"exit {returncode}" if returncode is not None else "did not finish"
        super().__init__(f"`{shown}` failed ({status}): {self.stderr or '<no stderr>'}")


class NetnsUnavailable(FabricError):
    """Namespaces cannot be used here; the message is the one-line reason from `netns_unavailable()`."""

    def __init__(self, reason: str) -> None:
        RuntimeError.__init__(self, reason)
        self.reason = reason
        self.command = []
        self.stderr = ""
        self.returncode = None
        self.stdin = None


def run_ip(args: Sequence[str], *, netns: str | None = None, stdin: str | None = None,
           missing_ok: bool = False) -> str:
    """Run `ip [-n NETNS] ARGS` and return stdout; raise `FabricError` on failure.

    With `missing_ok`, a failure saying the object does not exist returns "" (teardown is idempotent).
    """
    command = ["ip", *(["-n", netns] if netns else []), *args]
    try:
        done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=_IP_TIMEOUT,
                              check=False)
    except FileNotFoundError as exc:
        raise FabricError(command, f"cannot run ip: {exc}") from exc
    except subprocess.TimeoutExpired as exc:
        raise FabricError(command, f"timed out after {_IP_TIMEOUT:.0f}s", stdin=stdin) from exc
    if done.returncode != 0:
        if missing_ok and _says_missing(done.stderr):
            return ""
        raise FabricError(command, done.stderr, done.returncode, stdin)
    return done.stdout


def _says_missing(stderr: str) -> bool:
    text = stderr.lower()
    return any(marker in text for marker in ("cannot find device", "no such file", "does not exist"))


def _one_line(text: str) -> str:
    return "; ".join(line.strip() for line in text.strip().splitlines() if line.strip()) or "<no stderr>"


@functools.cache
def netns_unavailable() -> str | None:
    """None when fabrics can be built here, else a one-line reason (checked once per process)."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces need Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return f"network namespaces need root (running as uid {os.geteuid()})"
    if shutil.which("ip") is None:
        return "iproute2 `ip` is not on PATH"
    probe = f"{NAMESPACE_PREFIX}{os.getpid()}-probe"
    try:
        run_ip(["netns", "add", probe])
    except FabricError as exc:
        return f"cannot create a network namespace: {_one_line(exc.stderr)}"
    try:
        run_ip(["-batch", "-"], netns=probe, stdin="link add agncprobe0 type veth peer name agncprobe1\n"
                                                    "link add agncprobe2 type bridge\n")
    except FabricError as exc:
        return f"cannot create veth or bridge links in a namespace: {_one_line(exc.stderr)}"
    finally:
        with contextlib.suppress(FabricError):
            run_ip(["netns", "del", probe], missing_ok=True)
    try:
        left = probe in list_namespaces()
    except FabricError as exc:
        return f"cannot list network namespaces: {_one_line(exc.stderr)}"
    return f"cannot delete network namespace {probe}" if left else None


# --- pure helpers: naming, addresses, parsing ---------------------------------------------------------


@dataclass(frozen=True)
class FabricNames:
    """Every name one fabric uses; namespaces carry the owner pid, interfaces a short hash."""

    hub: str
    sites: tuple[str, ...]
    bridge: str
    root_if: str
    hub_root_if: str
    hub_site_ifs: tuple[str, ...]

    def namespaces(self) -> tuple[str, ...]:
        return (*self.sites, self.hub)

    def interfaces(self) -> tuple[str, ...]:
        return (self.bridge, self.root_if, self.hub_root_if, *self.hub_site_ifs)


def fabric_digest(tag: str, pid: int, serial: int) -> str:
    """Six hex digits naming one fabric of one process; interface names derive from it."""
    return hashlib.blake2s(f"{tag}\0{pid}\0{serial}".encode(), digest_size=8).hexdigest()[:6]


def fabric_names(tag: str, pid: int, serial: int, sites: int) -> FabricNames:
    """The names for a fabric with `sites` sites owned by `pid` (pure, so it can be checked anywhere)."""
    if not 1 <= sites <= MAX_SITES:
        raise ValueError(f"a fabric has 1..{MAX_SITES} sites, not {sites}")
    digest = fabric_digest(tag, pid, serial)
    label = re.sub(r"[^a-z0-9]+", "", tag.lower())[:12]
    base = f"{NAMESPACE_PREFIX}{pid}-{digest}" + (f"-{label}" if label else "")
    names = FabricNames(
        hub=f"{base}-hub",
        sites=tuple(f"{base}-s{i}" for i in range(sites)),
        bridge=f"agc{digest}b",
        root_if=f"agc{digest}r",
        hub_root_if=f"agc{digest}h",
        hub_site_ifs=tuple(f"agc{digest}s{i}" for i in range(sites)),
    )
    for name in names.interfaces():
        if len(name) > IFNAME_MAX:  # cannot happen with the formats above; guards future edits
            raise ValueError(f"interface name {name!r} is longer than {IFNAME_MAX} characters")
    return names


def stale_owner(namespace: str) -> int | None:
    """The owner pid encoded in a namespace name this module made, or None for anyone else's."""
    match = _STALE_RE.match(namespace)
    return int(match.group(1)) if match else None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OverflowError:
        return False
    return True


def parse_netns_list(text: str) -> list[str]:
    """Names from `ip netns list` ("name" or "name (id: 3)" per line)."""
    return [line.split()[0] for line in text.splitlines() if line.strip()]


def parse_routes(text: str, exclude_dev: str | None = None) -> list[ipaddress.IPv4Network]:
    """IPv4 destinations in `ip -4 route show table all` output, without default routes.

    Routes through `exclude_dev` are left out, so a fabric can check that only it routes its block.
    """
    networks: list[ipaddress.IPv4Network] = []
    for line in text.splitlines():
        if not line or line[0].isspace():  # multipath "nexthop" continuation lines
            continue
        tokens = line.split()
        if tokens[0] in _ROUTE_TYPES:
            tokens = tokens[1:]
        if not tokens or tokens[0] == "default":
            continue
        if exclude_dev is not None and "dev" in tokens:
            at = tokens.index("dev")
            if at + 1 < len(tokens) and tokens[at + 1] == exclude_dev:
                continue
        try:
            networks.append(ipaddress.IPv4Network(tokens[0], strict=False))
        except ValueError:
            continue
    return networks


def choose_subnet(routed: Iterable[ipaddress.IPv4Network], seed: str,
                  avoid: Iterable[ipaddress.IPv4Network] = ()) -> ipaddress.IPv4Network:
    """A /24 of FABRIC_BLOCK that overlaps nothing in `routed` or `avoid`, starting at a seed-derived one.

    Spreading the starting point by seed keeps concurrent runs from racing for the same /24.
    """
    taken = [net for net in (*routed, *avoid) if net.overlaps(FABRIC_BLOCK)]
    candidates = list(FABRIC_BLOCK.subnets(new_prefix=24))
    start = int.from_bytes(hashlib.blake2s(seed.encode(), digest_size=4).digest(), "big") % len(candidates)
    for offset in range(len(candidates)):
        candidate = candidates[(start + offset) % len(candidates)]
        if not any(candidate.overlaps(net) for net in taken):
            return candidate
    raise FabricError(["ip", "-4", "route", "show", "table", "all"],
                      f"every /24 of {FABRIC_BLOCK} is already routed in the root namespace")


def host_address(subnet: ipaddress.IPv4Network, host: int) -> str:
    return str(subnet.network_address + host)


# --- namespace inspection and stale cleanup -----------------------------------------------------------


def list_namespaces() -> list[str]:
    return parse_netns_list(run_ip(["netns", "list"]))


def namespace_pids(namespace: str) -> list[int]:
    """Processes inside `namespace` (zombies hold no namespace and are not listed)."""
    out = run_ip(["netns", "pids", namespace], missing_ok=True)
    return [int(token) for token in out.split() if token.isdigit()]


def kill_namespace_processes(namespace: str, grace: float = 1.0) -> list[int]:
    """SIGTERM everything inside `namespace`, SIGKILL what is left after `grace`; return the pids seen."""
    seen = namespace_pids(namespace)
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 3.0)):
        if not _signal_and_wait(namespace, sig, wait):
            return seen
    left = namespace_pids(namespace)
    raise FabricError(["ip", "netns", "pids", namespace], f"processes {left} survived SIGKILL")


def _signal_and_wait(namespace: str, sig: signal.Signals, wait: float) -> bool:
    """Send `sig` to every process inside; True while some are still there after `wait` seconds."""
    pids = namespace_pids(namespace)
    if not pids:
        return False
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    deadline = time.monotonic() + wait
    while namespace_pids(namespace):
        if time.monotonic() >= deadline:
            return True
        time.sleep(0.02)
    return False


def cleanup_stale() -> list[str]:
    """Delete namespaces left by owners that have exited; return their names.

    Deleting a dead run's hub also destroys its veth into the root namespace (veth ends die together).
    """
    removed: list[str] = []
    for name in list_namespaces():
        owner = stale_owner(name)
        if owner is None or owner == os.getpid() or pid_alive(owner):
            continue
        kill_namespace_processes(name, grace=0.2)
        run_ip(["netns", "del", name], missing_ok=True)
        removed.append(name)
    return removed


# --- the fabric ---------------------------------------------------------------------------------------


class Fabric:
    """Sites in network namespaces on one bridge, reachable from the root namespace, with cuttable links."""

    def __init__(self, tag: str, names: FabricNames, subnet: ipaddress.IPv4Network) -> None:
        self.tag = tag
        self.names = names
        self.subnet = subnet
        self.owner_pid = os.getpid()
        self._cuts: dict[frozenset[int], CutKind] = {}
        self._closed = False
        atexit.register(self._close_at_exit)

    # construction

    @classmethod
    def create(cls, tag: str, sites: int) -> Fabric:
        """Build a fabric of `sites` sites; raise `NetnsUnavailable` (with the reason) where that cannot work."""
        reason = netns_unavailable()
        if reason is not None:
            raise NetnsUnavailable(reason)
        cleanup_stale()
        names = fabric_names(tag, os.getpid(), next(_serial), sites)
        fabric = cls(tag, names, FABRIC_BLOCK)  # subnet is settled once the root link exists
        try:
            fabric._build()
        except BaseException:
            with contextlib.suppress(FabricError):
                fabric.close()
            raise
        return fabric

    def _build(self) -> None:
        n = self.names
        for namespace in (n.hub, *n.sites):
            run_ip(["netns", "add", namespace])
        hub_lines = [f"link add {n.bridge} type bridge", f"link set {n.bridge} up"]
        for hub_if, site in zip(n.hub_site_ifs, n.sites, strict=True):
            hub_lines += [f"link add {hub_if} type veth peer name {SITE_IFNAME} netns {site}",
                          f"link set {hub_if} master {n.bridge} up"]
        run_ip(["-batch", "-"], netns=n.hub, stdin="\n".join(hub_lines) + "\n")
        run_ip(["link", "add", n.root_if, "type", "veth", "peer", "name", n.hub_root_if, "netns", n.hub])
        run_ip(["link", "set", n.hub_root_if, "master", n.bridge, "up"], netns=n.hub)
        self.subnet = self._claim_subnet()
        for i, site in enumerate(n.sites):
            run_ip(["-batch", "-"], netns=site, stdin=(
                "link set lo up\n"
                f"addr add {self.site_address(i)}/{self.subnet.prefixlen} dev {SITE_IFNAME}\n"
                f"link set {SITE_IFNAME} up\n"))

    def _claim_subnet(self) -> ipaddress.IPv4Network:
        """Give the root link a /24 nobody else routes; re-check after adding it to catch a concurrent run."""
        tried: list[ipaddress.IPv4Network] = []
        seed = f"{self.names.root_if}:{self.owner_pid}"
        for _ in range(8):
            subnet = choose_subnet(self._root_routes(), seed, avoid=tried)
            address = f"{host_address(subnet, ROOT_HOST)}/{subnet.prefixlen}"
            run_ip(["addr", "add", address, "dev", self.names.root_if])
            run_ip(["link", "set", self.names.root_if, "up"])
            if not any(net.overlaps(subnet) for net in self._root_routes()):
                return subnet
            run_ip(["addr", "del", address, "dev", self.names.root_if])
            tried.append(subnet)
        raise FabricError(["ip", "addr", "add"], f"no /24 of {FABRIC_BLOCK} stayed free; tried {tried}")

    def _root_routes(self) -> list[ipaddress.IPv4Network]:
        return parse_routes(run_ip(["-4", "route", "show", "table", "all"]), exclude_dev=self.names.root_if)

    # addressing

    @property
    def sites(self) -> int:
        return len(self.names.sites)

    @property
    def root_address(self) -> str:
        """The root namespace's address on the fabric (the harness process talks from here)."""
        return host_address(self.subnet, ROOT_HOST)

    @property
    def root_interface(self) -> str:
        return self.names.root_if

    def _index(self, i: int) -> int:
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < self.sites:
            raise IndexError(f"site index {i!r} out of range 0..{self.sites - 1}")
        return i

    def site_address(self, i: int) -> str:
        return host_address(self.subnet, SITE_HOST_OFFSET + self._index(i))

    def namespace(self, i: int) -> str:
        return self.names.sites[self._index(i)]

    def exec_prefix(self, i: int) -> list[str]:
        """Prepend to an argv to run it inside site i (`ip netns exec` execs it, so the pid is the process)."""
        return ["ip", "netns", "exec", self.namespace(i)]

    # partitions

    @property
    def cuts(self) -> set[frozenset[int]]:
        """The site pairs that currently cannot reach each other."""
        return set(self._cuts)

    @property
    def closed(self) -> bool:
        return self._closed

    def partition(self, group_a: Iterable[int], group_b: Iterable[int], *, kind: CutKind = "prohibit") -> None:
        """Cut traffic both ways between every site in `group_a` and every site in `group_b`.

        Each side gets a reject route for the other's /32, so senders fail at once ("prohibit": EACCES,
        "unreachable": EHOSTUNREACH, "blackhole": EINVAL). The root namespace still reaches every site.
        """
        self._require_open()
        if kind not in ("prohibit", "unreachable", "blackhole"):
            raise ValueError(f"unknown cut kind {kind!r}")
        a = {self._index(i) for i in group_a}
        b = {self._index(i) for i in group_b}
        if a & b:
            raise ValueError(f"sites {sorted(a & b)} are on both sides of the partition")
        routes: dict[int, list[str]] = {}
        for x, y in itertools.product(sorted(a), sorted(b)):
            routes.setdefault(x, []).append(f"route replace {kind} {self.site_address(y)}/32")
            routes.setdefault(y, []).append(f"route replace {kind} {self.site_address(x)}/32")
        for site, lines in sorted(routes.items()):
            run_ip(["-batch", "-"], netns=self.namespace(site), stdin="\n".join(lines) + "\n")
        for x, y in itertools.product(a, b):
            self._cuts[frozenset((x, y))] = kind

    def heal(self) -> None:
        """Remove every cut."""
        self._require_open()
        routes: dict[int, list[str]] = {}
        for pair in self._cuts:
            x, y = sorted(pair)
            routes.setdefault(x, []).append(f"route del {self.site_address(y)}/32")
            routes.setdefault(y, []).append(f"route del {self.site_address(x)}/32")
        for site, lines in sorted(routes.items()):
            run_ip(["-batch", "-"], netns=self.namespace(site), stdin="\n".join(lines) + "\n")
        self._cuts.clear()

    def _require_open(self) -> None:
        if self._closed:
            raise FabricError(["ip"], f"fabric {self.tag!r} is closed")

    # teardown

    def close(self) -> None:
        """Kill what still runs inside, delete the namespaces and the root link; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self._close_at_exit)
        errors: list[FabricError] = []
        try:
            existing = set(list_namespaces())
        except FabricError as exc:
            errors.append(exc)
            existing = set(self.names.namespaces())
        ours = [ns for ns in self.names.namespaces() if ns in existing]
        for namespace in ours:
            try:
                kill_namespace_processes(namespace)
            except FabricError as exc:
                errors.append(exc)
        steps: list[tuple[list[str], str | None]] = [(["link", "del", self.names.root_if], None)]
        steps += [(["netns", "del", ns], None) for ns in ours]
        for args, netns in steps:
            try:
                run_ip(args, netns=netns, missing_ok=True)
            except FabricError as exc:
                errors.append(exc)
        self._cuts.clear()
        if errors:
            raise FabricError(errors[0].command, "; ".join(str(exc) for exc in errors), errors[0].returncode)

    def _close_at_exit(self) -> None:
        if os.getpid() != self.owner_pid:  # a forked child must not tear down its parent's fabric
            return
        try:
            self.close()
        except FabricError as exc:
            print(f"agn-conformance: fabric {self.tag!r} cleanup failed: {exc}", file=sys.stderr)

    def __enter__(self) -> Fabric:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self.sites} sites on {self.subnet}"
        return f"Fabric({self.tag!r}, {state})"
