"""Where the running harness came from: its source commit and the wheel it was installed from.

A submission must be reproducible on another machine from its README alone, so it records the exact
harness: the source commit (stamped into ``harness/build_info.json`` when the wheel is built, or read from the
checkout a development install runs from) and a copy of the wheel itself. An installed wheel is copied byte
for byte when the file it was installed from is still where ``direct_url.json`` says; otherwise the installed
files are packed back into a wheel from the distribution's RECORD (the same files, the same metadata), which
``pip install`` installs as the original.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import shutil
import subprocess
import zipfile
from dataclasses import dataclass
from importlib import metadata, resources
from pathlib import Path
from urllib.parse import unquote, urlparse

__all__ = ["DIST_NAME", "SourceCommit", "WheelCopy", "copy_wheel", "source_commit"]

DIST_NAME = "agn-conformance"
BUILD_INFO = "build_info.json"

#: Files an installer adds to a distribution's metadata folder; they were not in the wheel.
_INSTALLER_FILES = frozenset({"INSTALLER", "REQUESTED", "direct_url.json", "RECORD", "uv_cache.json",
                              "uv_build.json"})


@dataclass(frozen=True)
class SourceCommit:
    """The commit the harness was built from; `dirty` when the tree had changes not committed."""

    commit: str
    dirty: bool

    def __str__(self) -> str:
        return self.commit + (" (with uncommitted changes)" if self.dirty else "")


@dataclass(frozen=True)
class WheelCopy:
    """A wheel written into a submission: its path, its SHA-256 and whether it is the installed file itself."""

    path: Path
    sha256: str
    original: bool


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=20,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def commit_of_checkout(root: Path) -> SourceCommit | None:
    """The commit checked out at `root` (None outside a git checkout or without git)."""
    commit = _git(root, "rev-parse", "HEAD")
    if not commit:
        return None
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    return SourceCommit(commit=commit, dirty=bool(status))


def source_commit() -> SourceCommit | None:
    """The harness's source commit: stamped at build time, else the checkout this module runs from."""
    stamp = resources.files("harness").joinpath(BUILD_INFO)
    if stamp.is_file():
        data = json.loads(stamp.read_text(encoding="utf-8"))
        if isinstance(data, dict) and isinstance(data.get("commit"), str):
            return SourceCommit(commit=data["commit"], dirty=bool(data.get("dirty")))
    return commit_of_checkout(Path(__file__).resolve().parent.parent)


def _installed_from(dist: metadata.Distribution) -> Path | None:
    """The wheel file `dist` was installed from, when direct_url.json names one that still exists."""
    text = dist.read_text("direct_url.json")
    if not text:
        return None
    url = urlparse(str(json.loads(text).get("url", "")))
    if url.scheme != "file" or not url.path.endswith(".whl"):
        return None
    path = Path(unquote(url.path))
    return path if path.is_file() else None


def _record_line(name: str, data: bytes) -> list[str]:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
    return [name, f"sha256={digest}", str(len(data))]


def _repack(dist: metadata.Distribution, target_dir: Path) -> Path | None:
    """The installed files of `dist` packed back into a wheel (None for an editable install: no files)."""
    files = [f for f in dist.files or () if "__pycache__" not in f.parts and not f.name.endswith(".pyc")]
    info = next((f.parts[0] for f in files if f.parts[0].endswith(".dist-info")), None)
    if info is None or not any(f.parts[0] == "harness" for f in files):
        return None
    wheel_meta = dist.read_text("WHEEL") or ""
    tag = next((line.split(":", 1)[1].strip() for line in wheel_meta.splitlines() if line.startswith("Tag:")),
               "py3-none-any")
    name = dist.metadata["Name"].replace("-", "_")
    target = target_dir / f"{name}-{dist.version}-{tag}.whl"
    rows: list[list[str]] = []
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for entry in sorted(files, key=lambda f: (f.parts[0] == info, str(f))):
            if entry.parts[0] == info and entry.name in _INSTALLER_FILES:
                continue
            data = Path(str(dist.locate_file(entry))).read_bytes()
            archive.writestr(entry.as_posix(), data)
            rows.append(_record_line(entry.as_posix(), data))
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerows([*rows, [f"{info}/RECORD", "", ""]])
        archive.writestr(f"{info}/RECORD", buffer.getvalue())
    return target


def copy_wheel(target_dir: Path, dist: metadata.Distribution | None = None) -> WheelCopy | None:
    """Write the wheel of the running harness (or of `dist`) into `target_dir`; None for a development
    (editable) install, which has no installed files to copy."""
    if dist is None:
        try:
            dist = metadata.distribution(DIST_NAME)
        except metadata.PackageNotFoundError:
            return None
    target_dir.mkdir(parents=True, exist_ok=True)
    original = _installed_from(dist)
    if original is not None:
        path = target_dir / original.name
        shutil.copyfile(original, path)
    else:
        made = _repack(dist, target_dir)
        if made is None:
            return None
        path = made
    return WheelCopy(path=path, sha256=hashlib.sha256(path.read_bytes()).hexdigest(), original=original is not None)
