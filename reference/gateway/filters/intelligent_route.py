"""intelligent_route: pick the upstream cluster for a model or MCP tool from the serving snapshot.

Per request: strip client x-ai-routing-* headers, honour skip paths and earlier cluster choices,
read the capability from MCP metadata or the model header, then resolve session affinity before a
fresh pick in the first viable group. The snapshot reference is read once, so the candidate, the
revision sent on a provider hop and the metadata all come from the same immutable snapshot.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Any

from reference.gateway import hop_headers, routing_input
from reference.gateway.affinity import SessionTable, session_key
from reference.gateway.context import Reject, RequestContext
from reference.gateway.filters.intelligent_route_config import IntelligentRouteConfig
from reference.gateway.logfmt import kv
from reference.gateway.metrics import GatewayMetrics
from reference.gateway.selection import make_rng, pick
from reference.gateway.snapshot import CapabilityPlan, Snapshot
from reference.gateway.snapshot_store import SnapshotStore
from reference.overlay import Candidate

log = logging.getLogger("agn.gateway.intelligent_route")

NS = "intelligent_route."
FULL_WARNING_INTERVAL_SECS = 10.0
OUTCOME = NS + "outcome"
NONE_KIND = "none"

_INVALID_BODY = {
    routing_input.INFERENCE_MODEL: "invalid model name\n",
    routing_input.MCP_TOOL: "invalid MCP tool name\n",
}
_NO_CANDIDATE_BODY = {
    routing_input.INFERENCE_MODEL: "no route candidate for the requested model\n",
    routing_input.MCP_TOOL: "no route candidate for the requested tool\n",
}


def binding_key(kind: str, name: str, session: str) -> str:
    """A session's binding belongs to one capability: the same session key asking for another model (or tool)
    has a binding of its own, and neither replaces the other."""
    return f"{kind}\x1f{name}\x1f{session}"


class IntelligentRouteFilter:
    needs_body = False

    def __init__(
        self,
        config: IntelligentRouteConfig,
        initial: Snapshot,
        metrics: GatewayMetrics,
        *,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        request_id: Callable[[], str] | None = None,
    ) -> None:
        self.config = config
        self.store = SnapshotStore(initial)
        self.metrics = metrics
        self._rng = rng or make_rng()
        self._request_id = request_id or hop_headers.RequestIdGenerator()
        self._full_warned_at = -FULL_WARNING_INTERVAL_SECS
        self._model_header = config.model_header
        self._skip = config.skip_paths
        self._management = config.management_cluster
        self._hop = config.provider_hop_clusters
        affinity = config.affinity
        self.table = SessionTable(affinity.ttl_secs, affinity.max_entries, clock) if affinity else None
        self._session_header = affinity.header if affinity else None
        self._session_cookie = affinity.cookie if affinity else None
        metrics.track(self, self._table_size, self._snapshot_size)

    def _table_size(self) -> int:
        return len(self.table) if self.table is not None else 0

    def _snapshot_size(self) -> int:
        return self.store.current.candidate_count

    def close(self) -> None:
        """Stop publishing this instance's table and snapshot gauges."""
        self.metrics.untrack(self)

    def _skipped(self, path: str) -> bool:
        for prefix in self._skip:
            if path == prefix or path.startswith(prefix) and path[len(prefix) : len(prefix) + 1] == "/":
                return True
        return False

    def _done(self, md: dict[str, Any], outcome: str, kind: str = NONE_KIND) -> None:
        md[OUTCOME] = outcome
        self.metrics.decision(outcome, kind)

    def on_request(self, ctx: RequestContext) -> Reject | None:
        hop_headers.strip(ctx.headers)
        md = ctx.metadata
        if self._skip and self._skipped(ctx.path):
            if self._management is not None and ctx.cluster is None:
                ctx.cluster = self._management
                self._done(md, "management")
            else:
                self._done(md, "preserved" if ctx.cluster is not None else "skipped")
            return None
        if ctx.cluster is not None:
            self._done(md, "preserved")
            return None
        snapshot = self.store.current
        lookup = routing_input.extract(md, ctx.headers, self._model_header)
        if lookup is None:
            self._done(md, "skipped")
            return None
        if isinstance(lookup, routing_input.Invalid):
            self._done(md, "invalid")
            return Reject(400, _INVALID_BODY[lookup.kind])
        kind, name = lookup
        md[NS + "kind"] = kind
        md[NS + "name"] = name
        plan = snapshot.plan(kind, name)
        md[NS + "candidate_count"] = len(plan.candidates) if plan is not None else 0
        if plan is None:
            if self.table is not None:
                self._session_md(md, bound=False, reused=False, failover=False)
            self._done(md, "no_candidate", kind)
            return Reject(404, _NO_CANDIDATE_BODY[kind])
        return self._select(ctx, snapshot, plan)

    def _select(self, ctx: RequestContext, snapshot: Snapshot, plan: CapabilityPlan) -> Reject | None:
        md = ctx.metadata
        kind = plan.kind
        table = self.table
        skey = None
        failover = False
        if table is not None:
            skey = session_key(ctx.headers, self._session_header, self._session_cookie)
            if skey is not None:
                skey = binding_key(plan.kind, plan.name, skey)
                bound = table.lookup(skey)
                if bound is not None:
                    candidate = plan.reusable.get(bound)
                    if candidate is not None:
                        self.metrics.session_event("reused")
                        self._session_md(md, bound=True, reused=True, failover=False)
                        self._route(ctx, snapshot, plan, candidate, "reused")
                        return None
                    failover = True
        candidate = pick(plan, self._rng)
        if candidate is None:
            if table is not None:  # a binding that could not be replaced stays for when its candidate returns
                self._session_md(md, bound=False, reused=False, failover=failover)
            self._done(md, "no_candidate", kind)
            return Reject(404, _NO_CANDIDATE_BODY[kind])
        if table is not None:
            stored = False
            if skey is not None:
                stored = table.bind(skey, candidate.hop_id)
                if stored:
                    self.metrics.session_event("failover" if failover else "bound")
                else:
                    self._table_full()
            self._session_md(md, bound=stored, reused=False, failover=failover)
        self.metrics.selected(candidate.cluster, candidate.site, plan.mode_label)
        self._route(ctx, snapshot, plan, candidate, "routed")
        return None

    def _table_full(self) -> None:
        now = time.monotonic()
        if now - self._full_warned_at >= FULL_WARNING_INTERVAL_SECS:
            self._full_warned_at = now
            log.warning(
                "session binding table full; routing without binding %s", kv(entries=self._table_size())
            )

    @staticmethod
    def _session_md(md: dict[str, Any], *, bound: bool, reused: bool, failover: bool) -> None:
        md[NS + "session.bound"] = bound
        md[NS + "session.reused"] = reused
        md[NS + "session.failover"] = failover

    def _route(
        self,
        ctx: RequestContext,
        snapshot: Snapshot,
        plan: CapabilityPlan,
        candidate: Candidate,
        outcome: str,
    ) -> None:
        ctx.cluster = candidate.cluster
        md = ctx.metadata
        md[NS + "site"] = candidate.site
        md[NS + "cluster"] = candidate.cluster
        md[NS + "local_site"] = snapshot.local_site
        md[NS + "stable_id"] = candidate.hop_id
        md[NS + "admission_state"] = candidate.admission_state
        md[NS + "selection_mode"] = plan.mode_label
        if candidate.rank is not None:
            md[NS + "rank"] = candidate.rank
        if candidate.selection_group is not None:
            md[NS + "selection_group"] = candidate.selection_group
        if candidate.selection_tier is not None:
            md[NS + "selection_tier"] = candidate.selection_tier
        if snapshot.revision is not None:
            md[NS + "revision"] = snapshot.revision
        credential = candidate.credential
        if credential is not None:
            md[NS + "credential.strategy"] = credential.strategy
            md[NS + "credential.name"] = credential.name
            md[NS + "credential.namespace"] = credential.namespace
            md[NS + "credential.key"] = credential.key
        if candidate.cluster in self._hop:
            request_id = self._request_id()
            md[NS + "provider_hop_request_id"] = request_id
            hop_headers.set_hop(ctx.headers, candidate.hop_id, request_id, snapshot.revision)
        self._done(md, outcome, plan.kind)
