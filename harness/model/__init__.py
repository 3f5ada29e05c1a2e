"""An executable model of the spec, for generated conformance cases.

For an input (a serving snapshot and a request, say) the model answers with every outcome the spec
permits, never with one implementation's choice: where the spec leaves a choice open, each permitted answer
is in the set. Suites generate inputs (`harness.model.strategies`, built on Hypothesis), send them to the
implementation under test and check that each answer is one of the model's.

The package is pure (no I/O, no clock, no randomness of its own) and independent of `reference/`: it is
written from the spec documents and the statement catalogue (suites/statements.yaml), so a bug in the
reference cannot hide by also being the judge.

- `routing`: the consumer gateway's request-time rules (admission, selection groups, core selection modes,
  session affinity, 404 when nothing may serve).
- `strategies`: Hypothesis strategies of snapshots valid under the overlay contract and of request
  sequences; importing it needs Hypothesis (the project's ``test`` extra).
"""

from __future__ import annotations

from harness.model.routing import (
    ADMISSION_STATES,
    CORE_MODES,
    EXISTING_ONLY,
    NEW_AND_EXISTING,
    NONE,
    NOT_FOUND,
    Allowed,
    Candidate,
    Request,
    Snapshot,
    allowed,
    bindings_after,
    fresh_selection,
)

__all__ = ["ADMISSION_STATES", "CORE_MODES", "EXISTING_ONLY", "NEW_AND_EXISTING", "NONE", "NOT_FOUND", "Allowed",
           "Candidate", "Request", "Snapshot", "allowed", "bindings_after", "fresh_selection"]
