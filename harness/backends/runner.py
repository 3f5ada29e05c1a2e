"""One place every external command of a cluster backend goes through: argv lists, recorded in order.

Recording the exact argv of each `docker`, `kind` and `kubectl` call lets a run be audited (the record is
written to the run's log) and lets tests check the sequence against stand-ins on PATH.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.process import ManagedProcess, Supervisor


class CommandFailed(RuntimeError):
    """An external command exited non-zero, could not be found, or ran past its deadline."""

    def __init__(self, argv: Sequence[str], returncode: int | None, stdout: str, stderr: str) -> None:
        detail = (stderr or stdout).strip()[-2000:]
        code = "timed out" if returncode is None else f"exited {returncode}"
        super().__init__(f"`{' '.join(argv)}` {code}" + (f": {detail}" if detail else ""))
        self.argv = list(argv)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


@dataclass(frozen=True)
class Result:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class Runner:
    """Runs commands found on the PATH of `env` (default: this process's environment at call time)."""

    def __init__(self, env: Mapping[str, str] | None = None, log_path: Path | None = None) -> None:
        self._env = dict(env) if env is not None else None
        self.log_path = log_path
        self.calls: list[tuple[str, ...]] = []
        self._lock = threading.Lock()

    @property
    def env(self) -> dict[str, str]:
        return dict(self._env) if self._env is not None else dict(os.environ)

    def which(self, tool: str) -> str | None:
        """Where `tool` is on this runner's PATH, or None."""
        return shutil.which(tool, path=self.env.get("PATH", os.defpath))

    def _record(self, argv: Sequence[str]) -> None:
        with self._lock:
            self.calls.append(tuple(argv))
            if self.log_path is not None:
                self.log_path.parent.mkdir(parents=True, exist_ok=True)
                with self.log_path.open("a") as log:
                    log.write(json.dumps({"t": time.time(), "argv": list(argv)}) + "\n")

    def run(self, argv: Sequence[str], *, input: str | None = None, check: bool = True,
            timeout: float | None = 600.0) -> Result:
        """Run `argv` to completion; with `check`, a non-zero exit raises CommandFailed."""
        argv = [str(a) for a in argv]
        self._record(argv)
        exe = self.which(argv[0])
        if exe is None:
            raise CommandFailed(argv, 127, "", f"{argv[0]} not found on PATH")
        try:
            done = subprocess.run([exe, *argv[1:]], input=input, capture_output=True, text=True,
                                  env=self.env, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as exc:
            raise CommandFailed(argv, None, _text(exc.stdout), _text(exc.stderr)) from None
        result = Result(tuple(argv), done.returncode, done.stdout, done.stderr)
        if check and done.returncode != 0:
            raise CommandFailed(argv, done.returncode, done.stdout, done.stderr)
        return result

    def spawn(self, supervisor: Supervisor, name: str, argv: Sequence[str]) -> ManagedProcess:
        """Start a long-running command (a port-forward) under `supervisor`, which stops it."""
        argv = [str(a) for a in argv]
        self._record(argv)
        exe = self.which(argv[0])
        if exe is None:
            raise CommandFailed(argv, 127, "", f"{argv[0]} not found on PATH")
        return supervisor.start(name, [exe, *argv[1:]], env=self.env)


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data
