"""A certification submission: the folder `agn-conformance run --submission DIR` writes for a vendor to publish.

Modelled on Gateway API's conformance reports: the report exactly as generated, named
``<profiles>-<implementation version>-<backend>-report.yaml``; a README with a table of contents, the verdict
per profile, the claimed and unsupported features, the failures with their diagnostics, and a "Reproduce"
section (the harness wheel the run used with its SHA-256 and source commit, the exact command with the folder's
own descriptor, the seed, workers, Python and OS); the descriptor used; JUnit XML; the HTML page; and one
diagnostics file per failed test. A published result must name a release, so a
version that reads as a branch (``main``, ``master``, ``HEAD``, empty) is refused before anything runs.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.provenance import SourceCommit, WheelCopy
from harness.report.text import as_list as _list
from harness.report.text import as_mapping as _mapping
from harness.report.text import write_text_atomic

__all__ = ["BRANCH_NAMES", "SubmissionError", "SubmissionPaths", "check_version",
           "diagnostics_name", "paths", "write_descriptor", "write_readme"]

#: Versions that name a moving branch or a floating tag, not a release (compared without case).
BRANCH_NAMES: frozenset[str] = frozenset({"main", "master", "head", "trunk", "develop", "development", "dev",
                                          "latest", "stable", "nightly", "edge", "canary"})


class SubmissionError(ValueError):
    """The submission cannot be made; the message says why and what to change."""


def check_version(version: str) -> None:
    """Refuse an implementation version that is empty or reads as a branch name."""
    text = version.strip()
    if not text:
        raise SubmissionError("implementation.version is empty: a submission names the release it certifies "
                              "(a tag such as v1.4.0 or a commit)")
    if text.lower() in BRANCH_NAMES:
        raise SubmissionError(f"implementation.version {version!r} is a branch name or a floating tag: it moves, so "
                              "the result could not be reproduced; give a release tag (v1.4.0) or a commit SHA")


@dataclass(frozen=True)
class SubmissionPaths:
    """Where each file of a submission goes."""

    root: Path
    report: Path
    html: Path
    junit: Path
    descriptor: Path
    readme: Path
    diagnostics: Path


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", text).strip("_") or "unnamed"


def paths(root: Path, profiles: Sequence[str], version: str, backend: str) -> SubmissionPaths:
    """The submission's files; the report is named as Gateway API names its reports."""
    stem = f"{'-'.join(profiles)}-{_safe(version)}-{_safe(backend)}"
    return SubmissionPaths(root=root, report=root / f"{stem}-report.yaml", html=root / f"{stem}-report.html",
                           junit=root / "junit.xml", descriptor=root / "descriptor.yaml", readme=root / "README.md",
                           diagnostics=root / "diagnostics")


def diagnostics_name(test_id: str) -> str:
    """The file of a failed test's diagnostics (ids hold brackets and other characters paths should not)."""
    return f"{_safe(test_id)}.txt"


def write_descriptor(text: str, target: Path) -> str:
    """Copy the descriptor used, byte for byte, and return its SHA-256 (hex)."""
    data = text.encode("utf-8")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------------------------------ README






def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _verdict_rows(report: Mapping[str, Any]) -> Iterable[str]:
    yield "| Profile | Level | Result | Passed | Failed | Skipped |"
    yield "|---|---|---|---|---|---|"
    for profile in (_mapping(p) for p in _list(report.get("profiles"))):
        for level in ("core", "demo", "extended"):
            section = _mapping(profile.get(level))
            if not section:
                continue
            stats = _mapping(section.get("statistics"))
            yield (f"| {_cell(profile.get('name', '?'))} | {level} | {_cell(section.get('result', '?'))} | "
                   f"{stats.get('passed', 0)} | {stats.get('failed', 0)} | {stats.get('skipped', 0)} |")


def _feature_rows(report: Mapping[str, Any]) -> Iterable[str]:
    yield "| Profile | Claimed and exercised | Not supported |"
    yield "|---|---|---|"
    for profile in (_mapping(p) for p in _list(report.get("profiles"))):
        extended = _mapping(profile.get("extended"))
        claimed = ", ".join(str(f) for f in _list(extended.get("supportedFeatures"))) or "none"
        unsupported = ", ".join(str(f) for f in _list(extended.get("unsupportedFeatures"))) or "none"
        yield f"| {_cell(profile.get('name', '?'))} | {_cell(claimed)} | {_cell(unsupported)} |"


def _failure_lines(report: Mapping[str, Any], diagnostics: Path, root: Path) -> Iterable[str]:
    found = False
    for profile in (_mapping(p) for p in _list(report.get("profiles"))):
        for level in ("core", "demo", "extended"):
            for failure in (_mapping(f) for f in _list(_mapping(profile.get(level)).get("failures"))):
                found = True
                test_id = str(failure.get("id", "?"))
                message = str(failure.get("message", "")).strip().splitlines()
                last = message[0] if message else ""  # the assertion's own first line
                file = diagnostics / diagnostics_name(test_id)
                link = f" ([diagnostics]({file.relative_to(root).as_posix()}))" if file.is_file() else ""
                yield (f"- `{test_id}` ({profile.get('name', '?')}, {level}, feature "
                       f"`{failure.get('feature', '?')}`){link}: {last}")
    if not found:
        yield "No test failed."


def _reported_version_lines(impl: Mapping[str, Any]) -> list[str]:
    probe = _mapping(impl.get("reportedVersion"))
    if not probe:
        return []
    said = f"`{_cell(probe['output'])}`" if "output" in probe else f"not known ({_cell(probe.get('error', '?'))})"
    return [f"- Implementation version as `{_cell(probe.get('command', '?'))}` reports it: {said}"]


def _install_lines(root: Path, version: str, wheel: WheelCopy | None, commit: SourceCommit | None) -> list[str]:
    """How to install exactly the harness that judged: the wheel in the folder, else the source commit."""
    if wheel is not None:
        return [f"pip install './{root.name}/{wheel.path.name}'"]
    if commit is not None:
        return [f"# from a checkout of agn-conformance at commit {commit.commit} (the run used a development "
                "install, so no wheel was copied):", "pip install ."]
    return [f"pip install 'agn-conformance=={version}'"]


def _harness_lines(version: str, wheel: WheelCopy | None, commit: SourceCommit | None) -> list[str]:
    lines = [f"- Harness version: `{version}`"]
    if commit is not None:
        lines.append(f"- Harness source commit: `{commit}`")
    if wheel is not None:
        how = "the file it was installed from" if wheel.original else "its installed files, packed as a wheel"
        lines.append(f"- Harness wheel: [`{wheel.path.name}`]({wheel.path.name}) ({how}), SHA-256 `{wheel.sha256}`")
    return lines


def write_readme(target: SubmissionPaths, report: Mapping[str, Any], *, command: Sequence[str],
                 descriptor_sha256: str, implementation_descriptor: str,
                 environment: Mapping[str, str] | None = None, wheel: WheelCopy | None = None,
                 commit: SourceCommit | None = None) -> Path:
    """The README a reviewer reads first: contents, verdicts, features, failures and how to reproduce. The
    Reproduce commands run from the folder's parent: they use the folder's own wheel and descriptor."""
    impl = _mapping(report.get("implementation"))
    summary = _mapping(report.get("summary"))
    verdict = {"passed": "PASSED", "notJudged": "NOT JUDGED"}.get(str(summary.get("verdict")), "FAILED")
    version = str(report.get("harnessVersion", "?"))
    lines = [
        f"# Conformance submission: {impl.get('organization', '?')} {impl.get('project', '?')} "
        f"{impl.get('version', '?')}",
        "",
        f"Verdict: **{verdict}** (backend `{report.get('backend', '?')}`, {report.get('date', '?')}, "
        f"agn-conformance {version}).",
        "",
        "## Contents",
        "",
        "- [Verdict per profile](#verdict-per-profile)",
        "- [Features](#features)",
        "- [Failures](#failures)",
        "- [Files](#files)",
        "- [Reproduce](#reproduce)",
        "",
        "## Verdict per profile",
        "",
        *_verdict_rows(report),
        "",
    ]
    unjudged = _list(summary.get("notJudged"))
    if unjudged:
        lines += ["Not judged (no core test ran): "
                  + "; ".join(f"{_mapping(r).get('profile', '?')}: {_mapping(r).get('reason', '')}" for r in unjudged),
                  ""]
    lines += ["## Features", "", *_feature_rows(report), "",
              "## Failures", "", *_failure_lines(report, target.diagnostics, target.root), "",
              "## Files", "",
              f"- [`{target.report.name}`]({target.report.name}): the conformance report, exactly as generated",
              f"- [`{target.html.name}`]({target.html.name}): the same run as a page to read",
              f"- [`{target.junit.name}`]({target.junit.name}): JUnit XML, one test case per conformance test",
              f"- [`{target.descriptor.name}`]({target.descriptor.name}): the implementation descriptor used",
              f"- `{target.diagnostics.name}/`: for each failed test, its failure and diagnostics (the overlay "
              "serving, component log tails, the requests sent and what answered)",
              "",
              "## Reproduce", "",
              f"From the folder that holds `{target.root.name}/`:", "",
              "```sh",
              *_install_lines(target.root, version, wheel, commit),
              shlex.join(command),
              "```", "",
              *_harness_lines(version, wheel, commit),
              f"- Descriptor: `{implementation_descriptor}`, SHA-256 `{descriptor_sha256}` "
              f"(a copy is [`{target.descriptor.name}`]({target.descriptor.name}))",
              f"- Implementation version: `{impl.get('version', '?')}`",
              *_reported_version_lines(impl),
              *(f"- {name}: `{value}`" for name, value in (environment or {}).items()), ""]
    write_text_atomic(target.readme, "\n".join(lines))
    return target.readme
