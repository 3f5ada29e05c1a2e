"""Session bindings kept one per key instead of one per capability: what the breakage that reuses a binding
for any capability and the conformant variants that key bindings by session alone share.

Kept apart from the breakage and variant tables so neither imports the other.
"""

from __future__ import annotations

from reference.gateway.affinity import session_key
from reference.gateway.context import RequestContext
from reference.gateway.filters import intelligent_route
from reference.gateway.filters.intelligent_route import IntelligentRouteFilter
from reference.gateway.snapshot import CapabilityPlan, Snapshot
from reference.overlay import Candidate
from selfcheck.registry import patch

__all__ = ["bound_elsewhere", "one_binding_per_key"]


def one_binding_per_key() -> None:
    """Key session bindings by the session key alone, whatever model or tool a request asks for."""
    patch(intelligent_route, "binding_key", lambda kind, name, session: session)


def bound_elsewhere(route: IntelligentRouteFilter, ctx: RequestContext, current: Snapshot,
                    plan: CapabilityPlan) -> Candidate | None:
    """The candidate the request's session is bound to when it is not one of `plan`'s own (it belongs to another
    capability's plan of the serving snapshot), else None."""
    key = session_key(ctx.headers, route._session_header, route._session_cookie)
    bound = route.table.lookup(key) if route.table is not None and key is not None else None
    if bound is None or bound in plan.reusable:
        return None
    return next((p.reusable[bound] for p in current.plans.values() if bound in p.reusable), None)
