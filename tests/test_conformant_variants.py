"""Every core test passes what the spec allows: the consumer, provider, serving, producer and mesh suites, run
against conformant variants of the reference gateway and operator (selfcheck/variants.py,
selfcheck/operator_variants.py), each making another choice the spec leaves open.

Each variant runs the whole suite of each profile its choice can touch, through a descriptor claiming only
the variant's own extended features; every test that ran must pass, and none may use an extended feature it
does not judge (harness.feature_use). A failure here is the harness's: a test asserts what the spec does not.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from selfcheck import judge as shared
from selfcheck.judge import CaseResult, SuiteRuns, hand_made_run
from selfcheck.operator_variants import VARIANTS as OPERATOR_VARIANTS
from selfcheck.profiles import CONSUMER, MESH, PRODUCER, PROVIDER, SERVING
from selfcheck.variant_judge import ALL_VARIANTS as VARIANTS
from selfcheck.variant_judge import submit_variant, variant_document, variant_problems
from selfcheck.variants import VARIANTS as GATEWAY_VARIANTS
from selfcheck.variants import _declined

PROFILES = {"consumer": CONSUMER, "provider": PROVIDER, "serving": SERVING, "producer": PRODUCER, "mesh": MESH}
CASES = [(name, profile) for name, v in VARIANTS.items() for profile in v.profiles]


@pytest.fixture(scope="module")
def variant_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, SuiteRuns]]:
    """One SuiteRuns per profile, every variant's run started at once (they mostly wait on gateways)."""
    jobs = max(1, int(os.environ.get(shared.JOBS_ENV, 3)))
    # the consumer profile has most variants; the others run theirs one at a time, so the machine (which runs
    # the judges beside this module) is not asked for more sessions than it can time fairly
    runs = {name: SuiteRuns(profile, tmp_path_factory.mktemp(f"{name}-variants"),
                            shared.collect_suite_ids(profile), jobs if name == "consumer" else 1)
            for name, profile in PROFILES.items()}
    for variant, profile in CASES:
        submit_variant(runs[profile], variant)
    try:
        yield runs
    finally:
        for one in runs.values():
            one.close()


@pytest.mark.parametrize(("variant", "profile"), CASES, ids=[f"{v}-{p}" for v, p in CASES])
def test_every_core_test_passes_the_variant(variant: str, profile: str, variant_runs: dict[str, SuiteRuns]) -> None:
    problems, run = variant_problems(variant_runs[profile], variant, PROFILES[profile].may_skip)
    assert not problems, f"variant {variant} ({VARIANTS[variant].summary}):\n" + "\n".join(problems) + \
        "\n" + run.describe()


def test_every_variant_names_the_choice_the_spec_leaves_open() -> None:
    for name, v in VARIANTS.items():
        assert v.summary and ("spec" in v.summary or "guide" in v.summary), f"{name} names no sentence or silence"
        assert set(v.profiles) <= set(PROFILES), name
        assert variant_document(name)["features"] == list(v.claims)


@pytest.mark.parametrize(("launcher", "table", "args"), [
    ("selfcheck.variant_launch", GATEWAY_VARIANTS, ["-c", "praxis.yaml"]),
    ("selfcheck.operator_variant_launch", OPERATOR_VARIANTS, ["run"]),
])
def test_unknown_variant_is_refused(launcher: str, table: dict[str, object], args: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", launcher, "--variant", "no-such-variant", *args],
                          cwd=shared.run_dir(Path.cwd()), env=shared.env(), capture_output=True, timeout=60,
                          check=False)
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 2 and "unknown variant 'no-such-variant'" in stderr, stderr
    assert all(name in stderr for name in table), stderr


def test_declining_gateway_refuses_exactly_the_extended_config_keys() -> None:
    """The decline-extended variant refuses a config asking for an extended feature, and takes its twin."""
    def chain(*filters: dict[str, object]) -> dict[str, object]:
        return {"filter_chains": [{"name": "c", "filters": list(filters)}]}

    route = {"filter": "intelligent_route", "session_affinity": {"enabled": True, "header": "x-session-id"}}
    assert _declined(chain(route)) is None
    assert "cookie" in str(_declined(chain({**route, "session_affinity": {"enabled": True, "cookie": "c"}})))
    assert "skip_paths" in str(_declined(chain({**route, "skip_paths": ["/x"]})))
    assert "router" in str(_declined(chain({"filter": "router", "routes": []}, route)))
    assert "value" in str(_declined(chain({"filter": "credential_inject", "credentials": [{"value": "t"}]})))
    assert _declined(chain({"filter": "credential_inject", "credentials": [{"file": "/t"}]})) is None
    assert _declined({"metrics": {"filter_duration": True}}) is not None
    assert _declined({"metrics": {"filter_duration": False}}) is None



class _Prepared:
    """Hands out prepared runs as SuiteRuns.submit_descriptor would start them, noting labels and ids."""

    def __init__(self, *runs: Any) -> None:
        self.runs = list(runs)
        self.asked: list[tuple[str, tuple[str, ...]]] = []

    def submit_descriptor(self, label: str, _document: object, ids: Any = ()) -> Future[Any]:
        self.asked.append((label, tuple(ids)))
        future: Future[Any] = Future()
        future.set_result(self.runs.pop(0))
        return future


def test_a_variant_failure_counts_only_when_it_fails_again_on_its_own() -> None:
    failed = hand_made_run(CONSUMER, "CONS-X", "failed", CaseResult("test_x", failures=["boom"]))
    passed = hand_made_run(CONSUMER, "CONS-X", "passed", CaseResult("test_x"), returncode=0)
    runs = _Prepared(failed, passed)
    problems, _ = variant_problems(runs, "json-logs")  # type: ignore[arg-type]
    assert problems == [] and runs.asked == [("variant-json-logs", ()), ("variant-json-logs-again", ("CONS-X",))]
    runs = _Prepared(failed, failed)
    problems, _ = variant_problems(runs, "json-logs")  # type: ignore[arg-type]
    assert problems[0].startswith("CONS-X failed:") and "and again, run on their own:" in problems
    runs = _Prepared(passed)  # the twin: a clean run is judged at once
    assert variant_problems(runs, "json-logs")[0] == [] and len(runs.asked) == 1  # type: ignore[arg-type]
