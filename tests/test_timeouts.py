"""Named deadlines: parsed strictly, carried to every process of a run, and the only deadlines suites name."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.timeouts import NAMES, TIMEOUTS_ENV, Timeouts, encode, parse_overrides, timeouts

ROOT = Path(__file__).resolve().parents[1]


def test_overrides_parse_by_name() -> None:
    assert parse_overrides(["reload=30", "heal=2.5"]) == {"reload": 30.0, "heal": 2.5}


@pytest.mark.parametrize(("entry", "problem"), [
    ("relod=30", "NAME one of"),
    ("reload", "expected NAME=SECONDS"),
    ("reload=soon", "is not a number"),
    ("reload=0", "positive"),
    ("reload=-1", "positive"),
])
def test_bad_overrides_are_refused_naming_the_entry(entry: str, problem: str) -> None:
    """Each bad entry's nearest good one (reload=30) parses: the refusal is for the stated reason."""
    assert parse_overrides(["reload=30"]) == {"reload": 30.0}
    with pytest.raises(ValueError, match=problem):
        parse_overrides([entry])


def test_the_environment_carries_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TIMEOUTS_ENV, raising=False)
    assert timeouts() == Timeouts()
    monkeypatch.setenv(TIMEOUTS_ENV, encode({"reload": 3.0}))
    assert timeouts().reload == 3.0 and timeouts().reconcile == Timeouts().reconcile


def _run(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_deadline.py").write_text(textwrap.dedent("""
        from harness.timeouts import timeouts

        def test_reload_deadline():
            print("reload deadline", timeouts().reload)
            assert timeouts().reload == 0.5
    """))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", *options,
                           str(tmp_path / "test_deadline.py")], capture_output=True, text=True, cwd=tmp_path,
                          timeout=120)


def test_grid_timeout_reaches_the_tests(tmp_path: Path) -> None:
    done = _run(tmp_path, "--grid-timeout", "reload=0.5")
    assert done.returncode == 0, done.stdout + done.stderr
    refused = _run(tmp_path, "--grid-timeout", "relod=0.5")
    assert refused.returncode == pytest.ExitCode.USAGE_ERROR, refused.stdout + refused.stderr
    assert "relod=0.5" in refused.stderr, refused.stderr


def _literal_deadlines(path: Path, root: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.keyword) and node.arg == "timeout" and isinstance(node.value, ast.Constant):
            found.append(f"{path.relative_to(root)}:{node.value.lineno}: timeout={node.value.value!r}")
    return found


def test_suites_name_their_deadlines(tmp_path: Path) -> None:
    """No `timeout=<number>` in suites/: each wait takes a named deadline (or one the spec gives it)."""
    sample = tmp_path / "sample.py"
    sample.write_text("poll_until(probe, done, what='x', timeout=10)\npoll_until(probe, done, what='y', timeout=t)\n")
    assert len(_literal_deadlines(sample, tmp_path)) == 1, "the scan must see a literal deadline"
    literal = [line for path in sorted((ROOT / "suites").rglob("*.py")) for line in _literal_deadlines(path, ROOT)]
    assert not literal, "literal deadlines in suites (use harness.timeouts): " + "; ".join(literal)


def test_every_deadline_is_documented() -> None:
    lines = (ROOT / "harness" / "timeouts.py").read_text(encoding="utf-8").splitlines()
    tree = ast.parse("\n".join(lines))
    fields = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Timeouts").body
    named = {ast.unparse(f.target): f.lineno for f in fields if isinstance(f, ast.AnnAssign)}
    assert set(named) == set(NAMES)
    undocumented = [name for name, line in named.items() if not lines[line - 2].strip().startswith("#:")]
    assert not undocumented, f"deadlines without a comment saying what they wait for: {undocumented}"
