"""`python -m harness.fakes.group FILE.json`: several fake backends in one process.

A site's fake backends are independent servers, but each is a Python process that spends most of a
second importing aiohttp before it listens; a grid of five backends paid that five times per site. A
group serves them all from one event loop, each with its own state, listeners and admin API, exactly as
`agn-fake-backend` would serve it alone. FILE.json is a list of argument lists, one per backend, each
what `agn-fake-backend` takes (so every check and error message is that command's). After binding each
backend it prints `LISTENING <name> <host>:<port>` (and `LISTENING-MTLS <name> ...` first for an mTLS
listener); `ALL-LISTENING` follows the last. SIGTERM or SIGINT stop every backend (exit 0). A bad
argument list exits 2 naming its index; a port that cannot be bound exits 1 after closing the others.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.fakes.cli import PROG, build_parser, configure_logging, prepare, serve

GROUP_PROG = f"{PROG}-group"


def load_argv_lists(path: Path) -> list[list[str]]:
    """The argument lists of FILE.json; ValueError says what is wrong with it."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read: {exc}") from exc
    except ValueError as exc:
        raise ValueError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(document, list) or not document:
        raise ValueError(f"{path}: must be a non-empty list of argument lists")
    for index, argv in enumerate(document):
        if not isinstance(argv, list) or not all(isinstance(item, str) for item in argv):
            raise ValueError(f"{path}: [{index}] must be a list of strings")
    return document


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=GROUP_PROG, description="Several fake provider backends in one process.")
    parser.add_argument("backends", type=Path, metavar="FILE.json",
                        help="a JSON list of argument lists, each what agn-fake-backend takes")
    args = parser.parse_args(argv)
    try:
        argv_lists = load_argv_lists(args.backends)
    except ValueError as exc:
        parser.error(str(exc))
    prepared = [prepare(one, build_parser(prog=f"{GROUP_PROG} [{index}]")) for index, one in enumerate(argv_lists)]
    names = [one.backend.name for one in prepared]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        parser.error(f"{args.backends}: backend names must differ; repeated: {', '.join(duplicates)}")
    configure_logging(prepared[0].log_level, ",".join(names))
    try:
        return asyncio.run(serve(prepared, prog=GROUP_PROG, named=True))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
