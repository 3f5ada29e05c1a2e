"""The implementation's version as its own binary reports it (the descriptor's ``version_command``).

A descriptor states a version; a reviewer wants to see what actually ran. The command is run once per run,
its output recorded in the report beside the stated version; a command that fails is recorded with why, and
never decides the verdict (it says nothing about conformance).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Sequence

__all__ = ["reported_version"]

_MAX_CHARS = 500


def reported_version(command: Sequence[str], timeout_s: float = 30.0) -> dict[str, str]:
    """``{"command", "output"}`` for a command that exited 0, else ``{"command", "error"}``."""
    argv = [part.replace("{python}", sys.executable) for part in command]
    shown = shlex.join(argv)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"command": shown, "error": f"could not be run: {exc}"}
    text = (done.stdout.strip() or done.stderr.strip())[:_MAX_CHARS]
    if done.returncode != 0:
        return {"command": shown, "error": f"exit status {done.returncode}: {text or 'no output'}"}
    return {"command": shown, "output": text}
