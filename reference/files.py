"""Atomic writes for the reference's components: one file replaced whole, or a directory projected the way
kubelet projects a ConfigMap (the overlay-sync delivery into the gateway's overlay directory, and the
operator's dir sink).

Layout after a delivery::

    DIR/..2026_11_29_16_40_37.abc123/routing-overlay.json   (the revision's bytes)
    DIR/..data -> ..2026_11_29_16_40_37.abc123               (swapped with one rename)
    DIR/routing-overlay.json -> ..data/routing-overlay.json  (stable path the gateway watches)

A reader that opens `DIR/routing-overlay.json` sees either the whole previous revision or the whole new
one, never a partial file, because the only step that changes what the path resolves to is `os.replace`
of the `..data` symlink. Gateways that watch the directory see the same events as with a ConfigMap volume.

Unlike kubelet, the data dir that was just replaced is kept until the next delivery: a reader whose path
walk resolved `..data` an instant before the swap still finds its file instead of getting ENOENT. Every
older data dir (including ones an interrupted delivery left behind) is removed, so at most two exist.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

DATA_LINK = "..data"
_TMP_DATA_LINK = "..data_tmp"
_DATA_DIR = re.compile(r"^\.\.\d{4}_\d{2}_\d{2}_\d{2}_\d{2}_\d{2}\.")


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` through a temporary file beside it and one rename: a reader sees the old
    file or the new one, never a part."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def project(target_dir: Path, file_name: str, data: bytes) -> Path:
    """Write one file as a new timestamped data dir and swap `..data` onto it; returns the data dir."""
    return project_files(target_dir, {file_name: data})


def project_files(target_dir: Path, files: Mapping[str, bytes]) -> Path:
    """Write `files` as a new timestamped data dir, swap `..data` onto it and point each name's link into
    it (a regular file of that name is replaced); returns the data dir."""
    for file_name in files:
        _check_name(file_name)
    target_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y_%m_%d_%H_%M_%S", time.gmtime())
    previous = _data_link_target(target_dir)
    data_dir = Path(tempfile.mkdtemp(prefix=f"..{stamp}.", dir=target_dir))
    try:
        os.chmod(data_dir, 0o755)
        for file_name, data in files.items():
            path = data_dir / file_name
            with open(path, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(path, 0o644)
        _fsync_dir(data_dir)
        _atomic_symlink(data_dir.name, target_dir / DATA_LINK, target_dir / _TMP_DATA_LINK)
    except BaseException:
        shutil.rmtree(data_dir, ignore_errors=True)
        raise
    for file_name in files:
        user_link = target_dir / file_name
        wanted = f"{DATA_LINK}/{file_name}"
        if not user_link.is_symlink() or os.readlink(user_link) != wanted:
            _atomic_symlink(wanted, user_link, target_dir / f"..{file_name}_tmp")
    _fsync_dir(target_dir)
    _remove_old_data_dirs(target_dir, keep={data_dir.name, previous} - {None})
    return data_dir


def current_bytes(target_dir: Path, file_name: str) -> bytes | None:
    """The bytes the gateway would read now, or None when there is no readable file."""
    try:
        return (target_dir / file_name).read_bytes()
    except OSError:
        return None


def _check_name(file_name: str) -> None:
    if not file_name or "/" in file_name or file_name.startswith("..") or file_name in {".", ".."}:
        raise ValueError(f"file name {file_name!r} must be a plain name that does not start with '..'")


def _atomic_symlink(points_to: str, link: Path, tmp: Path) -> None:
    """Make `link` point to `points_to` with a single rename, so no reader sees it missing."""
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    os.symlink(points_to, tmp)
    os.replace(tmp, link)


def _data_link_target(target_dir: Path) -> str | None:
    try:
        name = os.readlink(target_dir / DATA_LINK)
    except OSError:
        return None
    return name if _DATA_DIR.match(name) and "/" not in name else None


def _remove_old_data_dirs(target_dir: Path, keep: set[str | None]) -> None:
    """Remove the data dirs not in `keep`, including ones left behind by an interrupted delivery."""
    for entry in target_dir.iterdir():
        if entry.name not in keep and _DATA_DIR.match(entry.name) and entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
