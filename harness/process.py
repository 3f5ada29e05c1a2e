"""Supervised child processes: captured logs, process groups, and cleanup that always happens.

Every process the harness starts is registered with a `Supervisor`. Stopping sends SIGTERM to the
process group, waits, then SIGKILLs; an atexit hook and (on Linux) a parent-death signal make sure no
orphan survives a crashed or interrupted run. A process may run as another user (`run_as`, when the
harness is root): it switches user and group and drops supplementary groups before it execs, and the
parent-death signal is set after the switch, which would clear it; root signals its group as any other.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.run_as import RunAs

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class ManagedProcess:
    """One child process with its output captured to a log file."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None,
                 cwd: Path | None = None, run_as: RunAs | None = None) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.run_as = run_as if run_as is not None and run_as.active else None
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "ab", buffering=0)  # noqa: SIM115 - closed in stop()
        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env.setdefault("PYTHONUNBUFFERED", "1")
        user: dict[str, Any] = {}
        if self.run_as is not None:
            # the child switches before preexec_fn runs, so the parent-death signal survives the switch
            user = {"user": self.run_as.uid, "group": self.run_as.gid, "extra_groups": []}
        try:
            self.popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=full_env,
                cwd=str(cwd) if cwd else None,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - no threads touch state here
                **user,
            )
        except BaseException:
            self._log.close()
            raise
        self.pid = self.popen.pid
        self._terminated = False

    def running(self) -> bool:
        return self.popen.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout: float) -> int | None:
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def terminate(self) -> None:
        """SIGTERM the group once, without waiting: `stop` then waits for the graceful shutdown."""
        if not self._terminated and self.popen.poll() is None:
            self._terminated = True
            self._signal(signal.SIGTERM)

    def stop(self, grace: float = 5.0) -> int | None:
        """SIGTERM the group (unless `terminate` did), wait `grace` seconds, then SIGKILL; always closes the log."""
        try:
            if self.popen.poll() is None:
                self.terminate()
                if self.wait(grace) is None:
                    self._signal(signal.SIGKILL)
                    self.wait(5.0)
            # children of the process that outlived it
            self._signal(signal.SIGKILL)
            return self.popen.poll()
        finally:
            with contextlib.suppress(Exception):
                self._log.close()

    def kill(self) -> int | None:
        """SIGKILL the group at once, with no chance to say goodbye (a crash); `stop` still cleans up."""
        self._signal(signal.SIGKILL)
        return self.wait(5.0)

    def _signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])


class Supervisor:
    """Owns every process of a run; `stop_all` is idempotent and runs at exit too."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self._procs: list[ManagedProcess] = []
        self._lock = threading.Lock()
        self._paths: list[Path] = []
        atexit.register(self.stop_all)

    def remove_after_stop(self, path: Path) -> None:
        """Remove the directory `path` (a process's socket directory) once every process has stopped."""
        with self._lock:
            self._paths.append(path)

    def start(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None,
              cwd: Path | None = None, run_as: RunAs | None = None) -> ManagedProcess:
        """Start and register a process; `run_as` starts it as that user when the harness is root."""
        log = self.log_dir / f"{name}.{time.monotonic_ns()}.log"
        proc = ManagedProcess(name, argv, log, env=env, cwd=cwd, run_as=run_as)
        with self._lock:
            self._procs.append(proc)
        return proc

    def stop(self, proc: ManagedProcess, grace: float = 5.0) -> int | None:
        code = proc.stop(grace)
        with self._lock:
            if proc in self._procs:
                self._procs.remove(proc)
        return code

    def stop_all(self) -> None:
        """Stop every process: all are sent SIGTERM at once, so their graceful shutdowns overlap, then each
        is waited for (and killed after its grace period) in reverse start order."""
        with self._lock:
            procs, self._procs = self._procs, []
            paths, self._paths = self._paths, []
        for proc in reversed(procs):
            proc.terminate()
        for proc in reversed(procs):
            proc.stop(grace=3.0)
        for path in paths:
            shutil.rmtree(path, ignore_errors=True)

    @property
    def processes(self) -> list[ManagedProcess]:
        with self._lock:
            return list(self._procs)
