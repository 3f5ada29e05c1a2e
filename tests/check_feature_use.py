"""Fail when a conformance report shows a core test that used an extended feature (or an extended test
that used another one): ``python -m tests.check_feature_use REPORT``. tox's conformance environment runs it
on the reference's full run, where every test passes and so takes its whole path."""

from __future__ import annotations

import sys

from harness.feature_use import violations
from harness.report.writer import load_report


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.check_feature_use REPORT", file=sys.stderr)
        return 2
    report = load_report(argv[0])
    rows = report.get("results") or []
    problems = violations(rows)
    for problem in problems:
        print(f"feature use: {problem}", file=sys.stderr)
    noted = sum(1 for row in rows if row.get("featuresUsed"))
    print(f"feature use: {len(rows)} tests, {noted} noted extended features, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
