"""Judging a suite with conformant variants: every core test must pass each of them.

A variant (selfcheck/variants.py) is plugged in the way a vendor's gateway is, through a descriptor that
claims only the variant's own extended features, and the whole suite runs against it at full deadlines.
The verdict lists every test that did not pass and every test that used an extended feature it may not
(harness.feature_use): both are the harness's faults, never the variant's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.feature_use import violations
from harness.impl import reference_document
from harness.plugin import NOT_SELECTED as SLOW_NOT_SELECTED
from selfcheck.judge import ROOT, SuiteRun, SuiteRuns, broken_gateway, reference_gateway, report_outcomes, tail
from selfcheck.operator_variants import DESCRIPTOR_FIELDS as OPERATOR_DESCRIPTOR_FIELDS
from selfcheck.operator_variants import VARIANTS as OPERATOR_VARIANTS
from selfcheck.variants import VARIANTS

__all__ = ["ALL_VARIANTS", "submit_variant", "variant_document", "variant_gateway", "variant_problems",
           "variant_verdict"]

LAUNCHER = "selfcheck.variant_launch"
OPERATOR_LAUNCHER = "selfcheck.operator_variant_launch"
#: Every variant by name: the gateway's and the operator's (names are unique across both).
ALL_VARIANTS = {**VARIANTS, **OPERATOR_VARIANTS}


def variant_gateway(name: str) -> dict[str, Any]:
    """A gateway section starting the reference built as variant `name`, warm-started like the reference."""
    return broken_gateway(LAUNCHER, name, "selfcheck.variants", flag="--variant")


def variant_operator(name: str) -> dict[str, Any]:
    """An operator section starting the reference operator built as variant `name` (the reference's arguments)."""
    operator = dict(reference_document()["operator"])
    operator["command"] = ["{python}", "-m", OPERATOR_LAUNCHER, "--variant", name,
                           *operator["command"][operator["command"].index("run"):]]
    operator["env"] = {"PYTHONPATH": str(ROOT)}
    operator.update(OPERATOR_DESCRIPTOR_FIELDS.get(name, {}))
    return operator


def variant_document(name: str) -> dict[str, Any]:
    """The descriptor a run of variant `name` starts from: the variant's gateway or operator (the reference
    for the other parts) and only the features it claims."""
    if name in OPERATOR_VARIANTS:
        parts = {"gateway": reference_gateway(), "operator": variant_operator(name),
                 "overlay_sync": reference_document()["overlay_sync"]}
    else:
        parts = {"gateway": variant_gateway(name)}
    return {
        "implementation": {"organization": "agn-conformance", "project": f"variant-{name}",
                           "version": "0.0.0", "contact": ["selfcheck"]},
        **parts,
        "features": list(ALL_VARIANTS[name].claims),
    }


def submit_variant(runs: SuiteRuns, name: str) -> Any:
    """Start (once) the run of the whole suite against variant `name`; the future of its SuiteRun."""
    return runs.submit_descriptor(f"variant-{name}", variant_document(name))


def variant_verdict(run: SuiteRun, may_skip: frozenset[str] = frozenset()) -> list[str]:
    """Why `run` does not show the suite passing the variant (empty when it does)."""
    if run.report is None:
        return [f"no conformance report ({run.report_problem})"]
    total, failed, skipped = report_outcomes(run.report)
    problems = [f"{test_id} failed: {tail(message, 8)}" for test_id, message in sorted(failed.items())]
    rows: list[Mapping[str, Any]] = list(run.report.get("results") or [])
    slow = {str(row.get("id")) for row in rows if str(row.get("reason", "")).removeprefix("Skipped: ")
            .startswith(SLOW_NOT_SELECTED)}  # slow tests run only when asked for (--slow)
    unexcused = [test_id for test_id in skipped if test_id.split("[", 1)[0] not in may_skip and test_id not in slow]
    if unexcused:
        problems.append(f"core tests were skipped, so the variant was not judged by them: {unexcused}")
    if total == 0:
        problems.append("no conformance test ran")
    problems += [f"feature use: {problem}" for problem in violations(rows)]
    if not problems and run.returncode != 0:
        problems.append(f"pytest ended with exit code {run.returncode}, not 0")
    return problems


def variant_problems(runs: SuiteRuns, name: str, may_skip: frozenset[str] = frozenset()) -> tuple[list[str], SuiteRun]:
    """What is wrong with the suite's view of variant `name` (nothing: an empty list) and the run it rests on.

    Tests that failed are run once more on their own: many judge timing or a planned sample, and a busy machine
    (CI runs these beside the judges) can miss a deadline once; only a test that fails twice counts, which
    takes a rare false failure from p to p squared. Every other problem (a skip, a feature used) stands.
    """
    run = submit_variant(runs, name).result()
    problems = variant_verdict(run, may_skip)
    failed = sorted(report_outcomes(run.report)[1]) if run.report is not None else []
    if not failed:
        return problems, run
    again = runs.submit_descriptor(f"variant-{name}-again", variant_document(name), failed).result()
    kept = [p for p in problems if not any(p.startswith(f"{test_id} failed:") for test_id in failed)]
    second = variant_verdict(again, may_skip)
    if again.report is None or second:
        return [*kept, *(p for p in problems if p not in kept), "and again, run on their own:", *second], again
    return kept, again
