"""The pytest plugins a conformance run loads: its own and pytest-xdist, not every plugin installed.

By default pytest imports every installed plugin (the ``pytest11`` entry points) and rewrites the asserts
of every module of the distributions that ship one: hypothesis, anyio (which httpx imports), platformdirs
and pytest-kubernetes, well over a hundred modules that none of the suites asserts in. Each pytest process
of a run, the controller and every worker, pays for that again, since rewritten modules are cached only
where Python may write bytecode. A run therefore turns plugin autoloading off and names the two plugins
it needs. Any other plugin is named on the command line as pytest documents for this setting:
``agn-conformance run -- -p NAME``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator

__all__ = ["AUTOLOAD_ENV", "only_needed_plugins"]

#: pytest's own switch: set, it loads only plugins named with -p (or PYTEST_PLUGINS).
AUTOLOAD_ENV = "PYTEST_DISABLE_PLUGIN_AUTOLOAD"
#: The harness plugin, named by module (pytest registers it under this name when given with -p).
HARNESS_PLUGIN = "harness.plugin"


def needed_plugin_args() -> list[str]:
    """``-p`` arguments for the harness plugin and, where installed, pytest-xdist (a run's workers)."""
    args = ["-p", HARNESS_PLUGIN]
    if importlib.util.find_spec("xdist") is not None:
        args += ["-p", "xdist"]
    return args


@contextlib.contextmanager
def only_needed_plugins() -> Iterator[list[str]]:
    """Within the block pytest (and the workers it starts) autoloads no plugin; yields the -p arguments.

    The environment is restored afterwards, as the run happens inside the calling process.
    """
    previous = os.environ.get(AUTOLOAD_ENV)
    os.environ[AUTOLOAD_ENV] = "1"
    try:
        yield needed_plugin_args()
    finally:
        if previous is None:
            os.environ.pop(AUTOLOAD_ENV, None)
        else:
            os.environ[AUTOLOAD_ENV] = previous
