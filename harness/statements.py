"""The spec's normative statements as data, and which conformance tests enforce each.

The catalogue (``suites/statements.yaml``) lists every normative sentence of the spec documents with a
stable id, its document and section, the quoted words, what it is about and what kind of rule it is. A
statement no profile can judge carries ``out_of_scope`` with the reason; one a profile not yet shipped will
judge carries ``pending`` naming that profile (one of ``PENDING_PROFILES``). Conformance
markers name the ids they enforce (``statements=[...]``); coverage joins the two, so a statement with
neither a test nor a reason is visible, and so is a marker naming a statement that does not exist.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from harness import fastyaml

__all__ = ["PENDING_PROFILES", "CatalogueError", "CoverageRow", "Statement", "by_document", "coverage",
           "load_statements", "shipped_statements"]

SUBJECTS = ("consumer", "provider", "producer", "mesh", "overlay-sync", "serving", "demo", "general")
KINDS = ("rejects", "must", "never", "only", "default", "bound", "order", "vocabulary", "metric", "behaviour",
         "startup")
_REQUIRED = ("id", "doc", "section", "quote", "subject", "kind")
_OPTIONAL = ("out_of_scope", "pending")
#: Profiles that will judge catalogued statements but do not ship yet.
PENDING_PROFILES = ("demos",)


class CatalogueError(ValueError):
    """The catalogue cannot be used; the message names the entry and key."""


@dataclass(frozen=True)
class Statement:
    id: str
    doc: str
    section: str
    quote: str
    subject: str
    kind: str
    out_of_scope: str | None = None
    pending: str | None = None


def _entry(raw: Any, index: int) -> Statement:
    where = f"statements[{index}]"
    if not isinstance(raw, dict):
        raise CatalogueError(f"{where}: must be a mapping")
    unknown = sorted(set(raw) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise CatalogueError(f"{where}.{unknown[0]}: unknown key")
    for key in _REQUIRED:
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise CatalogueError(f"{where}.{key}: must be a non-empty string")
    if raw["subject"] not in SUBJECTS:
        raise CatalogueError(f"{where}.subject: {raw['subject']!r} is not one of {', '.join(SUBJECTS)}")
    if raw["kind"] not in KINDS:
        raise CatalogueError(f"{where}.kind: {raw['kind']!r} is not one of {', '.join(KINDS)}")
    reason = raw.get("out_of_scope")
    if reason is not None and (not isinstance(reason, str) or not reason.strip()):
        raise CatalogueError(f"{where}.out_of_scope: must be the reason, a non-empty string")
    if raw.get("pending") is not None and raw["pending"] not in PENDING_PROFILES:
        raise CatalogueError(f"{where}.pending: {raw['pending']!r} is not one of {', '.join(PENDING_PROFILES)}")
    if reason is not None and raw.get("pending") is not None:
        raise CatalogueError(f"{where}.pending: a statement out of scope cannot also be pending a profile")
    return Statement(**{key: raw[key] for key in _REQUIRED}, out_of_scope=raw.get("out_of_scope"),
                     pending=raw.get("pending"))


def load_statements(path: Path | None = None) -> dict[str, Statement]:
    """The catalogue by id, in document order (the shipped one unless `path` names another)."""
    text = path.read_text() if path is not None else resources.files("suites").joinpath("statements.yaml").read_text()
    doc = fastyaml.safe_load(text)
    if not isinstance(doc, dict) or not isinstance(doc.get("statements"), list):
        raise CatalogueError("the catalogue must be a mapping with a `statements` list")
    out: dict[str, Statement] = {}
    for index, raw in enumerate(doc["statements"]):
        statement = _entry(raw, index)
        if statement.id in out:
            raise CatalogueError(f"statements[{index}].id: {statement.id!r} appears twice")
        out[statement.id] = statement
    return out


def shipped_statements() -> dict[str, Statement] | None:
    """The catalogue that ships with the suites, or None where a checkout has none yet."""
    if not resources.files("suites").joinpath("statements.yaml").is_file():
        return None
    return load_statements()


@dataclass(frozen=True)
class CoverageRow:
    statement: Statement
    tests: tuple[str, ...]

    @property
    def status(self) -> str:
        """covered, outOfScope, pending (a profile not yet shipped will judge it) or uncovered."""
        if self.tests:
            return "covered"
        if self.statement.out_of_scope:
            return "outOfScope"
        return "pending" if self.statement.pending else "uncovered"

    @property
    def detail(self) -> str:
        """The tests that enforce the statement, or why none does."""
        if self.tests:
            return ", ".join(self.tests)
        if self.statement.out_of_scope:
            return self.statement.out_of_scope
        return f"pending: the {self.statement.pending} profile, not yet shipped" if self.statement.pending \
            else "NOT ENFORCED"


def coverage(statements: Mapping[str, Statement], enforced: Mapping[str, Iterable[str]]) -> list[CoverageRow]:
    """Each statement with the conformance ids that enforce it; `enforced` maps a test id to statement ids.

    Raises CatalogueError for a test naming a statement the catalogue lacks.
    """
    tests: dict[str, list[str]] = {sid: [] for sid in statements}
    for test_id, ids in sorted(enforced.items()):
        for sid in ids:
            if sid not in tests:
                raise CatalogueError(f"{test_id}: names statement {sid!r}, which the catalogue lacks")
            tests[sid].append(test_id)
    return [CoverageRow(statement, tuple(tests[sid])) for sid, statement in statements.items()]


def by_document(rows: Sequence[CoverageRow]) -> list[dict[str, Any]]:
    """Per document: how many statements, how many covered, out of scope, pending and uncovered (and which)."""
    docs: dict[str, dict[str, Any]] = {}
    for row in rows:
        entry = docs.setdefault(row.statement.doc, {"doc": row.statement.doc, "statements": 0, "covered": 0,
                                                    "outOfScope": 0, "pending": 0, "uncovered": 0,
                                                    "uncoveredStatements": []})
        entry["statements"] += 1
        entry[row.status] += 1
        if row.status == "uncovered":
            entry["uncoveredStatements"].append(row.statement.id)
    return list(docs.values())
