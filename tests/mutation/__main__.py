"""Sample mutants of one reference module, judge each with the suite tests that exercise it, triage.

    python -m tests.mutation reference/overlay/validate.py [--sample 40] [--seed 1]
    python -m tests.mutation --score

Mutants come from mutmut (its operators, applied to one source file). The mutated file is written in
place, so the gateway, operator and overlay-sync processes the suites start import it (the checkout
must be installed editable, as `tox -e mutation` does); the original is restored after every mutant,
also on Ctrl-C. A mutant is killed when the mapped suite tests fail; the conformance ids that failed
are recorded. Results are appended to tests/mutation/triage.yaml: a survivor stays "untriaged" until
someone marks it equivalent (with why), open (with the spec sentence that leaves the behaviour open)
or writes the test that kills it. Mutations of error and log texts are not sampled: the suites require
no error body and no log format.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from tests.mutation.targets import MODULES, Target

REPO = Path(__file__).resolve().parents[2]
TRIAGE = Path(__file__).with_name("triage.yaml")
DEFAULT_SAMPLE = 40
DEFAULT_TIMEOUT_S = 900.0
VERDICTS = ("killed", "timeout", "survived")
TRIAGE_STATES = ("untriaged", "equivalent", "open", "tested")


@dataclass(frozen=True)
class Mutant:
    module: str
    line_number: int
    index: int
    original: str
    mutated: str
    source: str  # the whole mutated file

    @property
    def key(self) -> str:
        return f"{self.module}:{self.line_number}:{self.index}"


def mutants(module: str, source: str | None = None) -> list[Mutant]:
    """Every mutant mutmut makes of `module` (or of `source`, as if it were that module's text), except
    changes to error and log texts."""
    from mutmut import ALL, Context, list_mutations, mutate

    source = (REPO / module).read_text() if source is None else source
    lines = source.splitlines()
    out = []
    for mutation_id in list_mutations(Context(source=source, mutation_id=ALL, filename=module)):
        mutated, _ = mutate(Context(source=source, mutation_id=mutation_id, filename=module))
        changed = [new for old, new in zip(lines, mutated.splitlines(), strict=False) if old != new]
        original = lines[mutation_id.line_number]
        if not changed or _only_message_changed(original, changed[0]):
            continue
        out.append(Mutant(module, mutation_id.line_number + 1, mutation_id.index, original.strip(),
                          changed[0].strip(), mutated))
    return out


def _only_message_changed(original: str, mutated: str) -> bool:
    """A string edit on a line that raises or logs: what the suites never judge."""
    diff = [d for d in difflib.ndiff([original], [mutated]) if d.startswith("?")]
    in_message = any(word in original for word in ("raise ", "log.", "logging.", "Reject(", "warn("))
    return in_message and bool(diff) and "XX" in mutated


def sample(all_mutants: Sequence[Mutant], size: int, seed: int) -> list[Mutant]:
    chosen = list(all_mutants)
    random.Random(seed).shuffle(chosen)
    return sorted(chosen[:size], key=lambda m: (m.line_number, m.index))


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def mutated_file(path: Path, source: str) -> Iterator[None]:
    """`path` holds `source` inside the block and its original bytes afterwards, whatever happens."""
    original = path.read_bytes()
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        path.write_text(source)
        yield
    finally:
        path.write_bytes(original)
        signal.signal(signal.SIGTERM, previous)


def judge(target: Target, timeout: float) -> tuple[str, list[str], float]:
    """Run the target tests against what is on disk: (verdict, failed conformance ids, seconds)."""
    with tempfile.TemporaryDirectory(prefix="agn-mutation-") as work:
        report = Path(work) / "report.yaml"
        argv = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:xdist",
                "--pyargs", target.suite, "-k", " or ".join(target.test_modules),
                "--conformance-report", str(report), "--conformance-profiles", target.suite.rsplit(".", 1)[-1]]
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        started = time.monotonic()
        try:
            done = subprocess.run(argv, cwd=work, env=env, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return "timeout", [], time.monotonic() - started
        seconds = time.monotonic() - started
        if done.returncode == 0:
            return "survived", [], seconds
        if done.returncode != 1:
            raise RuntimeError(f"the target tests could not run (pytest exit {done.returncode}):\n"
                               f"{done.stdout.decode(errors='replace')[-2000:]}")
        return "killed", _failed_ids(report), seconds


def _failed_ids(report: Path) -> list[str]:
    if not report.is_file():
        return []
    doc = yaml.safe_load(report.read_text()) or {}
    return sorted(test_id for profile in doc.get("profiles", []) for level in ("core", "extended")
                  for test_id in (profile.get(level) or {}).get("failedTests", []))


def load_triage() -> list[dict[str, Any]]:
    if not TRIAGE.is_file():
        return []
    doc = yaml.safe_load(TRIAGE.read_text()) or {}
    entries = doc.get("mutants", [])
    for entry in entries:
        if entry.get("verdict") not in VERDICTS or entry.get("triage", "untriaged") not in TRIAGE_STATES:
            raise ValueError(f"{TRIAGE}: bad entry {entry.get('key')}: verdict {entry.get('verdict')!r}, "
                             f"triage {entry.get('triage')!r}")
    return list(entries)


def append_triage(entry: dict[str, Any]) -> None:
    entries = load_triage()
    entries = [e for e in entries if e["key"] != entry["key"]] + [entry]
    header = ("# Sampled mutants of the reference and what the suites made of them (python -m tests.mutation).\n"
              "# A survivor's triage is untriaged until it is equivalent (say why), open (quote the spec "
              "sentence\n# that leaves it open) or tested (name the test that now kills it).\n")
    TRIAGE.write_text(header + yaml.safe_dump({"mutants": entries}, sort_keys=False, width=120))


def score(entries: Sequence[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per module: sampled, killed (timeouts count), equivalent, open, and survivors not yet dealt with."""
    out: dict[str, dict[str, int]] = {}
    for e in entries:
        row = out.setdefault(e["module"], {"sampled": 0, "killed": 0, "equivalent": 0, "open": 0, "untriaged": 0})
        row["sampled"] += 1
        if e["verdict"] in ("killed", "timeout") or e.get("triage") == "tested":
            row["killed"] += 1
        elif e.get("triage") in ("equivalent", "open"):
            row[e["triage"]] += 1
        else:
            row["untriaged"] += 1
    return out


def run(module: str, size: int, seed: int, timeout: float) -> int:
    target = MODULES.get(module)
    if target is None:
        print(f"no suite tests are mapped to {module}; known: {', '.join(sorted(MODULES))}", file=sys.stderr)
        return 2
    path = REPO / module
    if subprocess.run(["git", "diff", "--quiet", "--", module], cwd=REPO).returncode != 0:
        print(f"{module} has uncommitted changes; commit or stash them first", file=sys.stderr)
        return 2
    verdict, failed, seconds = judge(target, timeout)
    if verdict != "survived":
        print(f"the target tests fail on the unmutated {module} ({verdict}: {failed}); nothing to judge",
              file=sys.stderr)
        return 2
    pool = mutants(module)
    chosen = sample(pool, size, seed)
    print(f"{module}: {len(pool)} mutants, {len(chosen)} sampled (seed {seed}); "
          f"{target.suite} {', '.join(target.test_modules)} take {seconds:.0f}s unmutated", flush=True)
    for number, mutant in enumerate(chosen, 1):
        with mutated_file(path, mutant.source):
            verdict, failed, seconds = judge(target, timeout)
        append_triage({"key": mutant.key, "module": module, "line": mutant.line_number,
                       "original": mutant.original, "mutated": mutant.mutated, "verdict": verdict,
                       "killed_by": failed, "triage": "tested" if verdict != "survived" else "untriaged",
                       "seed": seed, "date": datetime.now(UTC).strftime("%Y-%m-%d")})
        print(f"[{number}/{len(chosen)}] line {mutant.line_number}: {verdict} in {seconds:.0f}s"
              f"{' by ' + ', '.join(failed[:3]) if failed else ''}\n    - {mutant.original}\n    + {mutant.mutated}",
              flush=True)
    print_score()
    return 0


def print_score() -> None:
    for module, row in sorted(score(load_triage()).items()):
        judged = row["sampled"] - row["equivalent"] - row["open"]
        share = f"{row['killed'] / judged:.0%}" if judged else "-"
        print(f"{module}: {row['killed']}/{judged} non-equivalent killed ({share}); {row['equivalent']} equivalent, "
              f"{row['open']} open, {row['untriaged']} untriaged")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutation", description=__doc__.split("\n\n")[0])
    parser.add_argument("module", nargs="?", help="a reference module, e.g. reference/overlay/validate.py")
    parser.add_argument("--sample", type=int, default=DEFAULT_SAMPLE, help=f"mutants to judge ({DEFAULT_SAMPLE})")
    parser.add_argument("--seed", type=int, default=1, help="seed of the sample (1)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per mutant")
    parser.add_argument("--score", action="store_true", help="print the score per module from the triage file")
    args = parser.parse_args(argv)
    if args.score or not args.module:
        print_score()
        return 0
    return run(args.module, args.sample, args.seed, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
