"""The consumer suite holds cold start and reload to one list of rejections, each marked by its own rule."""

from __future__ import annotations

from typing import Any

from harness import contract
from harness.statements import load_statements
from suites.consumer import test_overlay_validation as validation


def _marks(prefix: str, path: str, statements: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    out = {}
    for param in validation._params(prefix, path, statements):
        (marker,) = [m for m in param.marks if m.name == "conformance"]
        out[param.id] = dict(marker.kwargs)
    return out


def test_every_rejection_is_judged_at_cold_start_and_on_reload_under_the_same_rule() -> None:
    cold = _marks("CONS-COLD-REJECT", validation.COLD, validation.COLD_STATEMENTS)
    reload = _marks("CONS-RELOAD-REJECT", validation.RELOAD, validation.RELOAD_STATEMENTS)
    scope = contract.ScopeSpec("n", "g", "ns", "s")
    base = contract.envelope([contract.candidate("m", "s", c) for c in ("a", "b")], scope)
    names = [case.name for case in contract.rejection_cases(base)]
    catalogue = load_statements()
    assert list(cold) == list(reload) == names
    for name in names:
        c, r = cold[name], reload[name]
        assert (c["level"], c["feature"]) == (r["level"], r["feature"]), name
        assert c["id"].removeprefix("CONS-COLD-REJECT") == r["id"].removeprefix("CONS-RELOAD-REJECT"), name
        assert c["spec"].removesuffix(validation.COLD) == r["spec"].removesuffix(validation.RELOAD), name
        case_statements = [s for s in c["statements"] if s not in validation.COLD_STATEMENTS]
        assert case_statements == [s for s in r["statements"] if s not in validation.RELOAD_STATEMENTS], name
        assert set(validation.COLD_STATEMENTS) <= set(c["statements"]), name
        assert set(validation.RELOAD_STATEMENTS) <= set(r["statements"]), name
        assert set(c["statements"]) | set(r["statements"]) <= set(catalogue), name
    assert {m["feature"] for m in cold.values() if m["level"] == "extended"} == {contract.STRICT, contract.LIMITS,
                                                                                       contract.WEIGHTED}
