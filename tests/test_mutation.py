"""The mutation driver: mutmut's mutants of a module, a seeded sample, a restored file, an honest score."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("mutmut", reason="mutmut is installed by `tox -e mutation` only")

from tests.mutation.__main__ import load_triage, mutants, mutated_file, sample, score  # noqa: E402
from tests.mutation.targets import MODULES  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_every_mapped_module_and_test_module_exists() -> None:
    for module, target in MODULES.items():
        assert (ROOT / module).is_file(), module
        package = ROOT / target.suite.replace(".", "/")
        for name in target.test_modules:
            assert (package / f"{name}.py").is_file(), f"{module}: {target.suite}.{name}"


def test_mutants_change_one_line() -> None:
    found = mutants("reference/gateway/hop_headers.py")
    assert found and len({m.key for m in found}) == len(found)
    source = (ROOT / "reference/gateway/hop_headers.py").read_text().splitlines()
    for m in found:
        changed = [i for i, (a, b) in enumerate(zip(source, m.source.splitlines(), strict=False)) if a != b]
        assert changed == [m.line_number - 1] and m.original != m.mutated, m.key



# Lines shaped like the reference's: a rejection, a log line and a comparison next to each other. Mutating a
# whole module of them (reference/overlay/validate.py) takes mutmut most of a minute; these take a moment.
_MESSAGES = '''
def check(value, limit):
    if value > limit:
        raise Reject("too-large", f"value {value} exceeds {limit}")
    log.warning("close to the limit %s", value)
    return value == limit
'''


def test_mutants_of_error_and_log_texts_are_left_out() -> None:
    found = mutants("reference/overlay/validate.py", source=_MESSAGES)
    assert not any("XX" in m.mutated and ("raise " in m.original or "log." in m.original) for m in found), found
    assert any(">=" in m.mutated or "!=" in m.mutated for m in found), found  # the logic is still mutated


def test_the_sample_is_seeded() -> None:
    pool = mutants("reference/gateway/hop_headers.py")
    assert sample(pool, 5, 3) == sample(pool, 5, 3) != sample(pool, 5, 4)
    assert len(sample(pool, 10_000, 1)) == len(pool)


def test_the_file_is_restored_whatever_happens(tmp_path: Path) -> None:
    path = tmp_path / "module.py"
    path.write_bytes(b"A = 1\n")
    with pytest.raises(RuntimeError), mutated_file(path, "A = 2\n"):
        assert path.read_text() == "A = 2\n"
        raise RuntimeError("the suite run broke")
    assert path.read_bytes() == b"A = 1\n"


def test_score_counts_equivalent_and_open_survivors_apart() -> None:
    entries = [{"module": "m", "verdict": "killed"}, {"module": "m", "verdict": "timeout"},
               {"module": "m", "verdict": "survived", "triage": "equivalent"},
               {"module": "m", "verdict": "survived", "triage": "open"},
               {"module": "m", "verdict": "survived", "triage": "untriaged"}]
    assert score(entries) == {"m": {"sampled": 5, "killed": 2, "equivalent": 1, "open": 1, "untriaged": 1}}


def test_the_triage_file_is_well_formed_and_every_triaged_survivor_says_why() -> None:
    for entry in load_triage():
        assert entry["module"] in MODULES, entry["key"]
        if entry["verdict"] == "survived" and entry.get("triage") in ("equivalent", "open"):
            assert entry.get("why"), f"{entry['key']}: a triaged survivor must say why"
