"""The harness that judged a submission: its wheel copied (or packed back from its installed files) and its
source commit, so `pip install ./<wheel>` on another machine installs exactly it."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from harness.impl_version import reported_version
from harness.provenance import commit_of_checkout, copy_wheel, source_commit

_FILES = {"harness/__init__.py": b"__version__ = '9.9'\n", "harness/cli.py": b"def main():\n    return 0\n"}


def _installed(site: Path, direct_url: str | None = None) -> metadata.Distribution:
    """A distribution laid out as an installer leaves it: package files, metadata, RECORD, INSTALLER."""
    info = site / "agn_conformance-9.9.dist-info"
    info.mkdir(parents=True)
    for name, data in _FILES.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_bytes(data)
    (site / "harness" / "__pycache__").mkdir()
    (site / "harness" / "__pycache__" / "cli.cpython-311.pyc").write_bytes(b"compiled")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: agn-conformance\nVersion: 9.9\n")
    (info / "WHEEL").write_text("Wheel-Version: 1.0\nGenerator: setuptools\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    (info / "INSTALLER").write_text("pip\n")
    names = [*_FILES, "harness/__pycache__/cli.cpython-311.pyc", f"{info.name}/METADATA", f"{info.name}/WHEEL",
             f"{info.name}/INSTALLER", f"{info.name}/RECORD"]
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps({"url": direct_url, "archive_info": {}}))
        names.append(f"{info.name}/direct_url.json")
    (info / "RECORD").write_text("".join(f"{name},,\n" for name in names))
    return metadata.PathDistribution(info)


def test_an_installed_harness_is_packed_back_into_a_wheel_whose_record_matches(tmp_path: Path) -> None:
    copy = copy_wheel(tmp_path / "out", _installed(tmp_path / "site"))
    assert copy is not None and not copy.original
    assert copy.path.name == "agn_conformance-9.9-py3-none-any.whl"
    assert copy.sha256 == hashlib.sha256(copy.path.read_bytes()).hexdigest()
    with zipfile.ZipFile(copy.path) as archive:
        names = archive.namelist()
        record = list(csv.reader(io.StringIO(archive.read("agn_conformance-9.9.dist-info/RECORD").decode())))
        contents = {name: archive.read(name) for name in names}
    # the package and its metadata, none of what the installer added, no bytecode
    assert sorted(names) == sorted([*_FILES, "agn_conformance-9.9.dist-info/METADATA",
                                    "agn_conformance-9.9.dist-info/WHEEL", "agn_conformance-9.9.dist-info/RECORD"])
    for name, data in _FILES.items():
        assert contents[name] == data
    for name, digest, size in record:
        if name.endswith("RECORD"):
            assert digest == "" and size == ""
            continue
        expected = base64.urlsafe_b64encode(hashlib.sha256(contents[name]).digest()).rstrip(b"=").decode()
        assert digest == f"sha256={expected}" and int(size) == len(contents[name]), name


def test_the_wheel_it_was_installed_from_is_copied_byte_for_byte(tmp_path: Path) -> None:
    original = tmp_path / "dist" / "agn_conformance-9.9-py3-none-any.whl"
    original.parent.mkdir()
    original.write_bytes(b"PK the wheel as built")
    copy = copy_wheel(tmp_path / "out", _installed(tmp_path / "site", original.as_uri()))
    assert copy is not None and copy.original and copy.path.read_bytes() == original.read_bytes()
    # the twin: once that file is gone, the installed files are packed instead
    original.unlink()
    again = copy_wheel(tmp_path / "out2", _installed(tmp_path / "site2", original.as_uri()))
    assert again is not None and not again.original


def test_the_source_commit_is_the_checkout_or_the_stamp_of_the_build() -> None:
    found = source_commit()
    root = Path(__file__).resolve().parent.parent
    checkout = commit_of_checkout(root)
    if checkout is None:
        pytest.skip(f"{root} is not a git checkout")
    assert found is not None and len(found.commit) == 40
    assert commit_of_checkout(root.parent / "no-such-checkout-here") is None


def test_the_implementation_version_is_what_its_command_prints_or_why_not() -> None:
    assert reported_version(["{python}", "-c", "print('gw 1.2.3')"])["output"] == "gw 1.2.3"
    failed = reported_version(["{python}", "-c", "import sys; sys.exit('no such flag')"])
    assert "output" not in failed and failed["error"] == "exit status 1: no such flag"
    assert "could not be run" in reported_version(["/no/such/binary-for-agn", "--version"])["error"]
