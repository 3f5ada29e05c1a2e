"""The operator's mesh runtime: one SWIM member per site, gossiping announcements, judging peer sites.

`MeshRuntime` owns a UDP member whose name is the site name and whose payload is this site's
announcement (`announce`). It merges what peers announce into one record store, re-publishes whenever
that view changes (so records travel A <- B <- C), and keeps one GridSite per (local network, remote site
in that network). A site's phase comes from `sites.settle`: only a gateway whose certificate matches the
admin's pins, and that accepts a TCP connection, makes it Active. Probes run in the background: sites not
yet Active are retried at most once per `probe_every` seconds, and any site is probed at once when its
pins or address change.

The reconcile loop reads `version` (raised on every change that can alter a render: another site's
records, a member's status, a site's phase, a degraded member's age passing a stale TTL) and waits on
`changed`; it renders with `remote_records()` and `site_specs()`. Everything runs on the event loop; the
SWIM callbacks only schedule work, so the protocol core is never re-entered.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from reference.operator.core.model import GridSiteSpec, MetricSample, RemoteProviderRecord, Resources
from reference.operator.mesh.announce import (
    Announcement,
    AnnouncementTooLarge,
    OwnRecords,
    RecordStore,
    decode_announcement,
    fit_announcement,
)
from reference.operator.mesh.codec import Address
from reference.operator.mesh.records import DocumentError, core_records
from reference.operator.mesh.runner import UdpMember
from reference.operator.mesh.sites import (
    ADDRESS_INVALID,
    CONNECTING,
    DEFAULT_TIMEOUT,
    LABEL_DISCOVERED,
    LEFT,
    MEMBER_LEFT,
    PENDING,
    UNREACHABLE,
    ProbeResult,
    SiteObservation,
    TrustPolicyError,
    check_gateway,
    client_context,
    discovered_site_k8s_name,
    discovered_site_resource,
    fetch_peer_certificate,
    parse_pins,
    pins_from_resource,
    settle,
    split_address,
)
from reference.operator.mesh.swim import ALIVE, DEAD, LOCAL, SUSPECT, MemberView, SwimConfig

log = logging.getLogger("agn-operator.mesh")

Checker = Callable[[str | None, object], Awaitable[ProbeResult]]
HOUSEKEEPING_SECONDS = 0.1
#: How often seeds that are not live members are asked again for the group's state.
SEED_RETRY_SECONDS = 1.0


@dataclass(frozen=True)
class MeshSettings:
    """What `agn-operator run --mesh-*` configures."""

    site: str
    bind: Address
    seeds: tuple[Address, ...] = ()
    #: The address peers send to, announced as this member's (default: the bound one); differs behind NAT.
    advertise: Address | None = None
    gateway: str | None = None
    routing_cluster: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    swim: SwimConfig = LOCAL
    probe_timeout: float = DEFAULT_TIMEOUT
    probe_every: float = 1.0

    @property
    def cluster(self) -> str:
        return self.routing_cluster or self.site


def format_address(address: Address) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def rfc3339(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class SiteState:
    """One discovered GridSite: a remote site as seen in one local network."""

    name: str
    network: str
    site: str
    phase: str = PENDING
    reason: str = ""
    message: str = ""
    inputs: tuple[str | None, Any] = (None, None)
    declared: Mapping[str, Any] | None = None
    announced_gateway: str | None = None
    probe: ProbeResult | None = None
    probe_inputs: tuple[str | None, Any] | None = None
    probe_started: float | None = None
    probe_task: asyncio.Task[None] | None = field(default=None, repr=False)
    last_probe_time: datetime | None = None
    last_transition_time: datetime | None = None

    @property
    def address(self) -> str | None:
        return self.inputs[0]

    @property
    def verdict(self) -> tuple[str, str, str]:
        return (self.phase, self.reason, self.message)


def _freeze(value: Any) -> Any:
    """A hashable, comparable copy of pins as configured (lists become tuples)."""
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def _declared_address(obj: Mapping[str, Any] | None) -> str | None:
    spec = (obj or {}).get("spec")
    endpoint = spec.get("gatewayEndpoint") if isinstance(spec, Mapping) else None
    address = endpoint.get("address") if isinstance(endpoint, Mapping) else None
    return address if isinstance(address, str) and address.strip() else None


def offline_verdict(address: str | None, pins: Any) -> ProbeResult | None:
    """What `check_gateway` would answer without touching the network (no address, bad address, missing or
    malformed pins), so a site shows the real reason at once instead of waiting for its first probe."""
    if not address:
        return None
    try:
        split_address(address)
    except ValueError as error:
        return ProbeResult(ADDRESS_INVALID, str(error))
    try:
        parse_pins(list(pins) if isinstance(pins, tuple) else pins)
    except TrustPolicyError as error:
        return ProbeResult(error.reason, error.message)
    return None


class MeshRuntime:
    """A started site in the mesh. Create, `await start()`, feed `update_local()`, `await close()`."""

    def __init__(
        self,
        settings: MeshSettings,
        *,
        check: Checker | None = None,
        now: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.settings = settings
        self.site = settings.site
        self._now = now
        self._wall = wall
        self._check = check or self._default_checker()
        self.own = OwnRecords(settings.site, settings.cluster, now=now)
        self.store = RecordStore(settings.site, now=now)
        self.version = 0
        self.rejected_announcements = 0
        self.changed = asyncio.Event()
        self.member: UdpMember | None = None
        self.sites: dict[str, SiteState] = {}
        self._announcements: dict[str, Announcement] = {}
        self._processed: dict[str, int] = {}
        self._local_networks: tuple[str, ...] = ()
        self._ttls: tuple[int, ...] = ()
        self._declared: dict[str, Mapping[str, Any]] = {}
        self._statuses: dict[str, str] = {}
        self._ttl_marks: dict[str, tuple[str, int]] = {}
        self._published: bytes | None = None
        self._dirty = True  # the announcement may differ from the published one
        self._size_warning: str | None = None
        self._warned: set[str] = set()
        self._scheduled = False
        self._next_seed_retry = 0.0
        self._task: asyncio.Task[None] | None = None

    def _default_checker(self) -> Checker:
        context = client_context(certfile=self.settings.client_cert, keyfile=self.settings.client_key)
        fetch = functools.partial(fetch_peer_certificate, context=context)
        timeout = self.settings.probe_timeout
        return lambda address, pins: check_gateway(address, pins, fetch=fetch, timeout=timeout)

    # --- lifecycle ------------------------------------------------------------------------------

    @property
    def address(self) -> Address:
        """The address announced to peers (the bound one unless another is advertised)."""
        if self.member is None:
            raise RuntimeError("the mesh runtime is not started")
        return self.member.address

    @property
    def bound(self) -> Address:
        """The local UDP socket address."""
        if self.member is None:
            raise RuntimeError("the mesh runtime is not started")
        return self.member.bound

    async def start(self) -> None:
        """Bind the membership port, join through the seeds and start publishing."""
        settings = self.settings
        host, port = settings.bind
        self.member = await UdpMember.start(
            self.site, host, port, seeds=settings.seeds, config=settings.swim, advertise=settings.advertise
        )
        self.member.node.on_payload(lambda _member, _data: self._schedule())
        self.member.node.on_member_change(lambda _member: self._schedule())
        self._publish()
        self._task = asyncio.create_task(self._housekeeping(), name=f"mesh-{self.site}")

    async def close(self, *, leave: bool = True) -> None:
        """Stop probing and housekeeping; announce leaving (peers see `left`) unless `leave` is False."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        tasks = [s.probe_task for s in self.sites.values() if s.probe_task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.member is not None:
            await self.member.close(leave=leave)

    def _bump(self) -> None:
        self.version += 1
        self.changed.set()

    def _schedule(self) -> None:
        """Process membership news soon, outside the protocol core's own call stack."""
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._process_safely)

    def _process_safely(self) -> None:
        try:
            self._process()
        except Exception:  # a bug here must not stop gossip or the operator; it is logged and retried
            self._scheduled = False
            log.exception("mesh processing failed")

    async def _housekeeping(self) -> None:
        """Timed work: tombstone expiry, TTL crossings, probe retries, seed retries, missed callbacks."""
        while True:
            self._process_safely()
            await asyncio.sleep(HOUSEKEEPING_SECONDS)

    # --- inputs from the reconcile loop ---------------------------------------------------------

    def update_local(
        self, resources: Resources, objects: Iterable[Mapping[str, Any]], samples: Iterable[MetricSample]
    ) -> None:
        """Take this reconcile's resources: own records, local networks, stale TTLs and declared GridSites."""
        networks = tuple(sorted(n.name for n in resources.networks))
        self._dirty = networks != self._local_networks or self._dirty
        self._local_networks = networks
        self._ttls = tuple(
            sorted({n.stale_candidate_ttl_seconds for n in resources.networks if n.stale_candidate_ttl_seconds})
        )
        for network in resources.networks:
            other = sorted({ref.local_site for ref in network.gateway_refs if ref.local_site != self.site})
            warning = (
                f"GridNetwork {network.name}: gatewayRefs localSiteName {', '.join(other)} differs from the mesh "
                f"site {self.site}; remote records are filtered by {self.site}"
            )
            if other and warning not in self._warned:
                self._warned.add(warning)
                log.warning("%s", warning)
        self._declared = {
            str(obj["metadata"]["name"]): obj
            for obj in objects
            if obj.get("kind") == "GridSite" and isinstance(obj.get("metadata"), Mapping)
        }
        self._dirty = self.own.update(resources, samples) or self._dirty
        self._process()

    # --- what render needs ----------------------------------------------------------------------

    @property
    def networks(self) -> tuple[str, ...]:
        """The local GridNetworks of the last `update_local`."""
        return self._local_networks

    def members(self) -> list[MemberView]:
        return self.member.node.members() if self.member is not None else []

    def remote_records(self) -> list[RemoteProviderRecord]:
        """Other sites' records in every local network; Degraded with the member's age when it is suspect
        or dead. Never another network's, never this site's own echo."""
        members = {member.name: member for member in self.members()}
        others = self.store.others()
        out: list[RemoteProviderRecord] = []
        for network in self._local_networks:
            out += core_records(others, network, self.site, members)
        return out

    def site_specs(self, declared: Sequence[GridSiteSpec]) -> tuple[GridSiteSpec, ...]:
        """The GridSites to render with: declared ones, with the computed phase for discovered names, plus
        every discovered site that has no declared object.

        A declared object labelled auto-discovered whose site is not (or no longer) discovered carries no
        phase: its status is this operator's own from an earlier run and vouches for nothing now.
        """
        out = []
        for spec in declared:
            if spec.name in self.sites:
                spec = replace(spec, phase=self.sites[spec.name].phase)
            elif spec.labels.get(LABEL_DISCOVERED) == "true":
                spec = replace(spec, phase=None)
            out.append(spec)
        names = {spec.name for spec in declared}
        for name, state in sorted(self.sites.items()):
            if name not in names:
                labels = discovered_site_resource(state.network, state.site)["metadata"]["labels"]
                out.append(GridSiteSpec(name=name, network=state.network, labels=labels, phase=state.phase))
        return tuple(out)

    def gridsite_objects(self) -> dict[str, dict[str, Any]]:
        """Each discovered GridSite as an object: the declared spec (or the discovered one) and its status."""
        out: dict[str, dict[str, Any]] = {}
        for name, state in sorted(self.sites.items()):
            obj = discovered_site_resource(state.network, state.site, state.announced_gateway)
            if state.declared is not None:
                declared_labels = (state.declared.get("metadata") or {}).get("labels") or {}
                obj["metadata"]["labels"] = {**declared_labels, **obj["metadata"]["labels"]}
                obj["spec"] = copy.deepcopy(dict(state.declared.get("spec") or {}))
            obj["status"] = {
                "phase": state.phase,
                "reason": state.reason,
                "message": state.message,
                "lastProbeTime": rfc3339(state.last_probe_time),
                "lastTransitionTime": rfc3339(state.last_transition_time),
            }
            out[name] = obj
        return out

    def status_document(self) -> dict[str, Any]:
        """What `mesh.state.yaml` shows: this member, the others, and the merged record store."""
        members = [
            {
                "name": m.name,
                "address": format_address(m.address),
                "status": m.status,
                "incarnation": m.incarnation,
                "ageSecs": m.age_secs,
            }
            for m in self.members()
        ]
        records = [
            {
                "network": r.network,
                "site": r.site,
                "provider": r.provider,
                "cluster": r.cluster,
                "models": list(r.models),
                "phase": r.phase,
                "revision": r.revision,
                "writer": r.writer,
            }
            for r in self.store.view(self.own.records())
        ]
        address = format_address(self.member.address) if self.member is not None else None
        return {"site": self.site, "address": address, "members": members, "records": records}

    # --- processing -----------------------------------------------------------------------------

    def _process(self) -> None:
        """Fold in new payloads and membership changes, expire tombstones, judge sites, publish."""
        self._scheduled = False
        if self.member is None:
            return
        views = self.member.node.members()
        relevant = self._take_payloads(views)
        expired = self.store.expire()
        relevant = expired or relevant
        self._dirty = self.own.expire() or expired or self._dirty
        statuses: dict[str, str] = {view.name: view.status for view in views}
        relevant = relevant or statuses != self._statuses
        if set(statuses) - set(self._statuses):
            # A member new to this site: exchange full state with the others now, so that news of a
            # member which reached only part of the mesh does not wait for the next push-pull.
            self.member.node.exchange_state()
        self._statuses = statuses
        relevant = self._refresh_sites(views) or relevant
        relevant = self._ttl_crossed(views) or relevant
        self._publish()
        self._start_probes()
        self._retry_seeds(views)
        if relevant:
            self._bump()

    def _retry_seeds(self, views: Sequence[MemberView]) -> None:
        """Knock again on seeds that are not live members.

        The protocol core stops retrying its seeds once it knows any peer, so a seed that was not up yet
        when this site started (B joined through A before A was listening, then C joined through B) would
        otherwise never be reached, and the group would stay split.
        """
        assert self.member is not None
        now = self._now()
        if now < self._next_seed_retry:
            return
        self._next_seed_retry = now + SEED_RETRY_SECONDS
        live = {view.address for view in views if view.status in (ALIVE, SUSPECT)}
        missing = [seed for seed in self.settings.seeds if seed not in live]
        if missing:
            self.member.node.join(missing)

    def _take_payloads(self, views: Sequence[MemberView]) -> bool:
        """Decode every payload not seen yet; True when other sites' records changed."""
        assert self.member is not None
        changed = False
        for view in views:
            payload = self.member.node.payload(view.name)
            if payload is None or self._processed.get(view.name) == payload[0]:
                continue
            version, data = payload
            self._processed[view.name] = version
            try:
                announcement = decode_announcement(data)
            except DocumentError as error:
                self.rejected_announcements += 1
                log.warning("ignored announcement %d of %s: %s", version, view.name, error)
                continue
            if announcement.site != view.name:
                self.rejected_announcements += 1
                log.warning("ignored announcement of member %s: it claims site %r", view.name, announcement.site)
                continue
            previous = self._announcements.get(view.name)
            self._announcements[view.name] = announcement
            merged = self.store.merge(announcement.records)
            changed = merged or changed
            self._dirty = merged or self._dirty
            for record in announcement.records:
                if record.site == self.site:
                    self._dirty = self.own.observe_echo(record) or self._dirty
            if previous is None or (previous.networks, previous.gateway) != (
                announcement.networks,
                announcement.gateway,
            ):
                changed = True
        return changed

    def _publish(self) -> None:
        """Publish the announcement when its inputs changed (encoding it is the costly part)."""
        assert self.member is not None
        if not self._dirty:
            return
        self._dirty = False
        announcement = Announcement(
            site=self.site,
            gateway=self.settings.gateway,
            networks=self._local_networks,
            records=self.store.view(self.own.records()),
        )
        limit = self.member.node.config.max_payload_bytes
        try:
            data, kept = fit_announcement(announcement, limit)
        except AnnouncementTooLarge as error:
            self._warn_size(f"announcement not published: {error}")
            return
        except DocumentError as error:
            self._warn_size(f"announcement not published: {error}")
            return
        dropped = len(announcement.records) - len(kept.records)
        if dropped:
            self._warn_size(
                f"announcement over {limit} bytes: {dropped} of {len(announcement.records)} records left out"
            )
        if data != self._published:
            self.member.node.set_local_payload(data)
            self._published = data

    def _warn_size(self, message: str) -> None:
        if message != self._size_warning:
            log.warning("%s", message)
            self._size_warning = message

    def _ttl_crossed(self, views: Sequence[MemberView]) -> bool:
        """True when a suspect or dead member's age passed one of the local stale TTLs since last time."""
        marks: dict[str, tuple[str, int]] = {
            view.name: (view.status, sum(1 for ttl in self._ttls if view.age_secs >= ttl))
            for view in views
            if view.status in (SUSPECT, DEAD)
        }
        crossed = marks != self._ttl_marks
        self._ttl_marks = marks
        return crossed

    # --- sites ----------------------------------------------------------------------------------

    def _wanted_sites(self, views: Sequence[MemberView]) -> dict[str, tuple[str, str, str]]:
        """GridSite name -> (network, site, member status) for every remote site in a local network."""
        local = set(self._local_networks)
        wanted: dict[str, tuple[str, str, str]] = {}
        for view in views:
            announcement = self._announcements.get(view.name)
            if announcement is None:
                continue
            for network in announcement.networks:
                if network in local:
                    wanted.setdefault(discovered_site_k8s_name(network, view.name), (network, view.name, view.status))
        return wanted

    def _refresh_sites(self, views: Sequence[MemberView]) -> bool:
        """Recompute every site's phase; True when a site appeared, went away or changed its verdict."""
        wanted = self._wanted_sites(views)
        changed = False
        for name in [name for name in self.sites if name not in wanted]:
            gone = self.sites.pop(name)
            if gone.probe_task is not None:
                gone.probe_task.cancel()
            changed = True
        for name, (network, site, status) in sorted(wanted.items()):
            state = self.sites.get(name)
            if state is None or (state.network, state.site) != (network, site):
                state = self.sites[name] = SiteState(name, network, site)
                changed = True
            announcement = self._announcements[site]
            state.declared = self._declared.get(name)
            state.announced_gateway = announcement.gateway
            address = _declared_address(state.declared) or announcement.gateway
            state.inputs = (address, _freeze(pins_from_resource(state.declared or {})))
            if status != MEMBER_LEFT and state.inputs != state.probe_inputs:
                verdict = offline_verdict(*state.inputs)
                if verdict is not None:  # no connection could change this verdict: take it now
                    state.probe, state.probe_inputs, state.probe_started = verdict, state.inputs, self._now()
                    state.last_probe_time = self._wall()
            changed = self._judge(state, status) or changed
        return changed

    def _judge(self, state: SiteState, status: str) -> bool:
        observation = SiteObservation(member=status, gateway_address=state.address, probe=state.probe)
        transition = settle(state.phase, observation)
        if transition.phase == LEFT:
            state.probe = None  # a site that comes back must prove itself again
            state.probe_inputs = None
            if state.probe_task is not None:
                state.probe_task.cancel()
        if (transition.phase, transition.reason, transition.message) == state.verdict:
            return False
        if transition.phase != state.phase or state.last_transition_time is None:
            state.last_transition_time = self._wall()
        log.info(
            "mesh %s: GridSite %s %s (%s: %s)",
            self.site,
            state.name,
            transition.phase,
            transition.reason,
            transition.message,
        )
        state.phase, state.reason, state.message = transition.phase, transition.reason, transition.message
        return True

    def _start_probes(self) -> None:
        now = self._now()
        for state in self.sites.values():
            if state.phase in (PENDING, LEFT) or state.address is None:
                continue
            running = state.probe_task is not None and not state.probe_task.done()
            inputs_changed = state.inputs != state.probe_inputs
            if running and not inputs_changed:
                continue
            retry = state.phase in (CONNECTING, UNREACHABLE) and (
                state.probe_started is None or now - state.probe_started >= self.settings.probe_every
            )
            if not (inputs_changed or retry):
                continue
            if running and state.probe_task is not None:
                state.probe_task.cancel()
            state.probe_inputs, state.probe_started = state.inputs, now
            state.probe_task = asyncio.create_task(self._probe(state, state.inputs), name=f"probe-{state.name}")

    async def _probe(self, state: SiteState, inputs: tuple[str | None, Any]) -> None:
        address, pins = inputs
        try:
            result = await self._check(address, list(pins) if isinstance(pins, tuple) else pins)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the checks never raise; a bug must not leave the site unjudged
            log.exception("probe of %s failed", state.name)
            result = ProbeResult("ProbeFailed", f"{type(error).__name__}: {error}")
        if self.sites.get(state.name) is not state or state.inputs != inputs:
            return  # superseded: a newer probe with the current pins or address follows
        state.probe = result
        state.last_probe_time = self._wall()
        self._schedule()
