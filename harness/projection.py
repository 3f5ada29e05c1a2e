"""Writes files no reader sees half-written: one file replaced whole (`write_atomic`), or a directory
projected the way kubelet projects a ConfigMap volume (`project`).

The visible file is a symlink into `..data`, itself a symlink to a timestamped directory; an update
writes a new directory and atomically renames a fresh `..data` link over the old one. A gateway that
watches only the file itself, or reads a half-written file, fails the hot-reload suites.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path


def write_atomic(path: Path, text: str, *, mode: int | None = None) -> None:
    """Replace `path` with `text` through a temporary file beside it and one rename (a new file: a reader
    comparing identities sees a rewrite). `mode` sets its permissions; the default keeps the temporary
    file's owner-only 0600, right for files that may hold secrets."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def project(directory: Path, files: dict[str, bytes]) -> Path:
    """Atomically publish `files` into `directory`; returns the new data directory."""
    directory.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("..%Y_%m_%d_%H_%M_%S", time.gmtime()) + f".{time.monotonic_ns()}"
    data_dir = directory / stamp
    data_dir.mkdir()
    for name, content in files.items():
        (data_dir / name).write_bytes(content)
    tmp_link = directory / "..data_tmp"
    if tmp_link.is_symlink() or tmp_link.exists():
        tmp_link.unlink()
    os.symlink(stamp, tmp_link)
    previous = os.readlink(directory / "..data") if (directory / "..data").is_symlink() else None
    os.replace(tmp_link, directory / "..data")
    for name in files:
        visible = directory / name
        if not visible.is_symlink():
            if visible.exists():
                visible.unlink()
            os.symlink(f"..data/{name}", visible)
    if previous and previous != stamp:
        shutil.rmtree(directory / previous, ignore_errors=True)
    return data_dir
