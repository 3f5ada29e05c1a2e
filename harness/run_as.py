"""Gateways that run as another user (the descriptor's ``gateway.run_as``) and the files that user reads.

Real gateways refuse to run as root, and the harness often is root (CI containers). With ``run_as`` the
local backend starts the gateway as that user and its primary group, without supplementary groups, and
makes readable to it exactly what the gateway reads (`grant_gateway_files`):

- its work directory (its cwd): group-owned by the gateway's group, mode 3770: the gateway may write
  there, and the sticky bit keeps it from renaming or removing what the harness put there;
- its rendered config: the gateway's group, 0640 (the config may hold inline tokens);
- its overlay directory: the gateway's group with the setgid bit, 2750, and so is what it holds now.
  Overlays are written later by the harness (as root) as a new ``..data`` directory and a symlink swap:
  a directory made inside a setgid directory takes its group and its setgid bit, so every later
  ``..data`` belongs to the gateway's group too. Its read bits come from a default ACL
  (``u::rwx,g::r-x,o::---``) where the filesystem has POSIX ACLs, so the writer's umask does not matter;
  without ACLs they come from the umask, and a umask that takes read or search from the group is
  refused (`RunAsError`);
- certificates and CA bundles its config names (``cert_path``, ``ca_path``): 0644, they are public;
- private keys (``key_path``) and credential files (``credential_inject`` ``file``): owned by the
  gateway's user and group, 0600;
- every directory above these: searchable (x, never r) for the gateway's user, through its owner or
  group bits where they are the user's, else through o+x. Inside the run's work directory every other
  entry of such a directory loses its permission bits for others, and the directory gets the default
  ACL above, so the configs, keys, credentials and logs of other gateways and components stay closed
  to the gateway, also those made later. Gateways that share one ``run_as`` user share what that user
  may read.

Directories above the run's work directory only get o+x where the user could not pass. pytest resets
its base directory (``pytest-of-<user>``) to 0700 when a session starts, so a run whose gateways switch
users is best kept below directories anyone may pass (the system temp directory).

``python -m harness.run_as --uid U --gid G -- ARGV...`` switches user and execs ``ARGV``: the local
backend puts it behind ``ip netns exec`` when the sites live in network namespaces, since entering one
needs root.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import pwd
import re
import signal
import stat
import struct
import sys
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "RunAs",
    "RunAsError",
    "config_files",
    "active_user",
    "grant_gateway_files",
    "parse_run_as",
    "refuses_root",
    "switch_argv",
]

_UID_GID = re.compile(r"(\d+):(\d+)")
_MAX_ID = 2**32 - 2  # (uid_t)-1 means "unchanged"
#: Keys of the Praxis config whose value is a file the gateway reads, by how private the file is.
_PUBLIC_KEYS = frozenset({"cert_path", "ca_path"})
_PRIVATE_KEYS = frozenset({"key_path"})

_PR_SET_PDEATHSIG = 1
_ACL_XATTR_DEFAULT = "system.posix_acl_default"


class RunAsError(RuntimeError):
    """The gateway's files cannot be made readable to its user as the run needs."""


@dataclass(frozen=True)
class RunAs:
    """The user and group a gateway runs as; ``spec`` is the descriptor's value."""

    spec: str
    uid: int
    gid: int

    @property
    def active(self) -> bool:
        """True when starting the gateway switches users, which only root can do."""
        return os.geteuid() == 0

    def __str__(self) -> str:
        if _UID_GID.fullmatch(self.spec):
            return f"uid {self.uid}, gid {self.gid}"
        return f"{self.spec} (uid {self.uid}, gid {self.gid})"


def parse_run_as(value: Any) -> RunAs:
    """A user name (its primary group) or ``uid:gid``; ValueError says what is wrong.

    Root cannot be named, and a harness that is not root may only name its own user and group.
    """
    if isinstance(value, bool) or not isinstance(value, str):
        number = isinstance(value, int | float) and not isinstance(value, bool)
        kind = "a number" if number else {dict: "a mapping", list: "a list", bool: "a boolean"}.get(
            type(value), type(value).__name__)
        hint = ' (quote "uid:gid": YAML reads 1000:50 as a number)' if number else ""
        raise ValueError(f"must be a user name or \"uid:gid\", got {kind}{hint}")
    spec = value.strip()
    if not spec:
        raise ValueError("must not be empty (give a user name such as nobody, or uid:gid)")
    numbers = _UID_GID.fullmatch(spec)
    if numbers:
        uid, gid = int(numbers[1]), int(numbers[2])
        if uid > _MAX_ID or gid > _MAX_ID:
            raise ValueError(f"{spec!r}: uid and gid must be at most {_MAX_ID}")
    elif ":" in spec or spec.isdigit():
        raise ValueError(f"malformed value {spec!r}: give a user name (nobody) or uid:gid in numbers (65534:65534)")
    else:
        try:
            entry = pwd.getpwnam(spec)
        except KeyError:
            raise ValueError(f"unknown user {spec!r}: not in this machine's user database "
                             "(give an existing user, or uid:gid in numbers)") from None
        uid, gid = entry.pw_uid, entry.pw_gid
    if uid == 0:
        raise ValueError(f"{spec!r} is root: give an unprivileged user such as nobody")
    if gid == 0:
        raise ValueError(f"{spec!r} has group 0 (root), which reads what the harness keeps for root's group: "
                         "give a user and group other than root's")
    run_as = RunAs(spec, uid, gid)
    euid, egid = os.geteuid(), os.getegid()
    if euid != 0 and (uid, gid) != (euid, egid):
        raise ValueError(f"the harness runs as uid {euid}, gid {egid}, not root, so it cannot start the gateway as "
                         f"{run_as}; run the harness as root or leave run_as out")
    return run_as


def active_user(run_as: Any) -> RunAs | None:
    """The descriptor's `gateway.run_as` when starting a gateway as that user switches users (None: it does not,
    or there is none); a backend that starts gateways on this machine applies it."""
    return run_as if isinstance(run_as, RunAs) and run_as.active else None


def switch_argv(run_as: RunAs, argv: Sequence[str]) -> list[str]:
    """`argv` behind this module's switch, for a command that must start as root (``ip netns exec``)."""
    return [sys.executable, "-m", "harness.run_as", "--uid", str(run_as.uid), "--gid", str(run_as.gid), "--",
            *argv]


_REFUSAL = re.compile(r"refus|not allowed|allow_root|not permitted|must not|do not run|don't run|won't run|"
                      r"will not run|cannot run|can't run|not supported|forbidden|unsafe", re.IGNORECASE)
_ROOT = re.compile(r"root|uid[ =:]*0\b|euid", re.IGNORECASE)


def refuses_root(log: str) -> bool:
    """True when a line of a gateway's log says it will not run as root."""
    return any(_ROOT.search(line) and _REFUSAL.search(line) for line in log.splitlines())


# ------------------------------------------------------------------------------------------ file access


def config_files(config_text: str) -> tuple[list[Path], list[Path]]:
    """The (public, private) files a rendered Praxis config names: certificates and CA bundles; private keys
    and credential files."""
    try:
        config = yaml.safe_load(config_text)
    except yaml.YAMLError:
        return [], []
    public: list[Path] = []
    private: list[Path] = []

    def walk(node: Any, credentials: bool) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(value, str) and value and key in _PUBLIC_KEYS:
                    public.append(Path(value))
                elif isinstance(value, str) and value and (key in _PRIVATE_KEYS or (credentials and key == "file")):
                    private.append(Path(value))
                else:
                    walk(value, credentials or key == "credentials")
        elif isinstance(node, list):
            for item in node:
                walk(item, credentials)

    walk(config, False)
    return list(dict.fromkeys(public)), list(dict.fromkeys(private))


_lock = threading.Lock()
#: Entries inside run work directories and the permission bits for others a grant needs them to keep.
_other_bits: dict[str, int] = {}


def grant_gateway_files(run_as: RunAs, *, run_dir: Path, workdir: Path, config: Path, overlay_dir: Path,
                        public: Iterable[Path] = (), private: Iterable[Path] = ()) -> None:
    """Give the gateway's user its work directory, config, overlay directory and the named files (module doc)."""
    if not run_as.active:
        return
    run_root = Path(os.path.realpath(run_dir))
    workdir, config, overlay_dir = (Path(os.path.realpath(p)) for p in (workdir, config, overlay_dir))
    # relative paths are the gateway's, from its cwd; a file that is missing is the gateway's to report
    public_files = [Path(os.path.realpath(workdir / p)) for p in public if (workdir / p).is_file()]
    private_files = [Path(os.path.realpath(workdir / p)) for p in private if (workdir / p).is_file()]
    with _lock:
        _share_overlay(overlay_dir, run_as.gid)
        os.chown(workdir, -1, run_as.gid)
        os.chmod(workdir, stat.S_ISGID | stat.S_ISVTX | 0o770)
        _set_default_acl(workdir)
        os.chown(config, -1, run_as.gid)
        os.chmod(config, 0o640)
        for path in public_files:
            os.chmod(path, 0o644)
            _other_bits[str(path)] = 0o004
        for path in private_files:
            os.chown(path, run_as.uid, run_as.gid)
            os.chmod(path, 0o600)
        confined: dict[Path, None] = {}
        for target in [workdir, overlay_dir, config, *public_files, *private_files]:
            for directory in _searchable_parents(run_as, target):
                if directory == run_root or run_root in directory.parents:
                    confined[directory] = None
        for directory in confined:
            _confine(directory)


def _searchable_parents(run_as: RunAs, target: Path) -> list[Path]:
    """Make every directory above `target` searchable for the user; returns them, top first."""
    directories = list(reversed(target.parents))
    for directory in directories:
        st = os.stat(directory)
        if st.st_uid == run_as.uid:
            bit = stat.S_IXUSR
        elif st.st_gid == run_as.gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
            _other_bits[str(directory)] = _other_bits.get(str(directory), 0) | 0o001
        if not st.st_mode & bit:
            os.chmod(directory, stat.S_IMODE(st.st_mode) | bit)
    return directories


def _confine(directory: Path) -> None:
    """Entries of `directory` keep only the permission bits for others that a grant needs."""
    with os.scandir(directory) as entries:
        for entry in entries:
            with contextlib.suppress(FileNotFoundError):
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    continue
                mode = stat.S_IMODE(st.st_mode)
                wanted = (mode & ~0o007) | _other_bits.get(entry.path, 0)
                if wanted != mode:
                    os.chmod(entry.path, wanted)
    _set_default_acl(directory)


def _share_overlay(overlay_dir: Path, gid: int) -> None:
    """The overlay directory and what it holds: the gateway's group, setgid directories, readable files."""
    overlay_dir.mkdir(parents=True, exist_ok=True)
    for root, dirs, files in os.walk(overlay_dir):  # symlinks (..data, the visible file) are not followed
        os.chown(root, -1, gid)
        os.chmod(root, stat.S_ISGID | (stat.S_IMODE(os.stat(root).st_mode) & 0o7700) | 0o050)
        _set_default_acl(Path(root))
        for name in files:
            path = os.path.join(root, name)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                os.chown(path, -1, gid)
                os.chmod(path, (stat.S_IMODE(st.st_mode) & 0o700) | 0o040)
        dirs[:] = [name for name in dirs if not os.path.islink(os.path.join(root, name))]
    if not _set_default_acl(overlay_dir):
        umask = _umask()
        if umask is not None and umask & 0o050:
            raise RunAsError(f"{overlay_dir}: no POSIX ACLs on this filesystem and the umask {umask:04o} takes read "
                             "or search from the group, so overlays written later would be unreadable to the "
                             "gateway's user; run the harness with umask 022 or 027")


def _set_default_acl(directory: Path) -> bool:
    """Give `directory` the default ACL ``u::rwx,g::r-x,o::---``; False where the filesystem has no ACLs."""
    undefined = 0xFFFFFFFF
    entries = [(0x01, 0o7, undefined), (0x04, 0o5, undefined), (0x20, 0o0, undefined)]  # USER_OBJ, GROUP_OBJ, OTHER
    value = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, perm, ident) for tag, perm, ident in entries)
    try:
        os.setxattr(directory, _ACL_XATTR_DEFAULT, value)
    except OSError:
        return False
    return True


def _umask() -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return None


# ------------------------------------------------------------------------------------------ switch and exec


def _die_with_parent() -> None:
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def main(argv: Sequence[str] | None = None) -> int:
    """Switch to ``--uid``/``--gid`` with no supplementary groups, then exec the command."""
    parser = argparse.ArgumentParser(prog="python -m harness.run_as", description=main.__doc__)
    parser.add_argument("--uid", type=int, required=True)
    parser.add_argument("--gid", type=int, required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    try:
        os.setgroups([])
        os.setgid(args.gid)
        os.setuid(args.uid)
    except OSError as exc:
        print(f"harness.run_as: cannot switch to uid {args.uid}, gid {args.gid}: {exc}", file=sys.stderr)
        return 126
    _die_with_parent()  # a change of credentials clears the parent-death signal
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"harness.run_as: cannot run {command[0]} as uid {args.uid}: {exc}", file=sys.stderr)
    return 127


if __name__ == "__main__":
    sys.exit(main())
