"""What every breakage table shares: the registered breakage, the decorator that registers it, and patching.

Kept apart from the tables so an operator process applying a breakage never imports the gateway's
modules (and the other way round).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["EXIT_USAGE", "Breakage", "apply_from_argv", "patch", "registrar", "run_applied", "wrap"]

#: The exit status of a launcher given an unknown breakage or variant.
EXIT_USAGE = 2


@dataclass(frozen=True)
class Breakage:
    name: str
    summary: str
    apply: Callable[[], None]


def registrar(table: dict[str, Breakage]) -> Callable[[str, str], Callable[[Callable[[], None]], Callable[[], None]]]:
    """A decorator factory registering breakages in `table`: `@breakage(name, summary)`."""

    def breakage(name: str, summary: str) -> Callable[[Callable[[], None]], Callable[[], None]]:
        def register(func: Callable[[], None]) -> Callable[[], None]:
            if name in table:
                raise ValueError(f"breakage {name!r} is registered twice")
            table[name] = Breakage(name, summary, func)
            return func

        return register

    return breakage


def patch(owner: Any, attribute: str, value: Any) -> None:
    """Replace an attribute that must exist: a renamed target fails loudly instead of patching nothing."""
    if not hasattr(owner, attribute):
        raise AttributeError(f"{owner!r} has no attribute {attribute!r} to patch")
    setattr(owner, attribute, value)


def wrap(owner: Any, attribute: str, wrapper: Callable[..., Any]) -> None:
    """Replace a method by one calling ``wrapper(original, self, *args)``: the breakage sees each call and
    decides what the original is asked and what its answer becomes."""
    original = getattr(owner, attribute)

    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        return wrapper(original, self, *args, **kwargs)

    patch(owner, attribute, wrapped)


def apply_from_argv(prog: str, component: str, command: str, breakages: Mapping[str, Breakage],
                    argv: list[str] | None, *, flag: str = "--break", what: str = "breakage") -> list[str] | None:
    """Parse ``--break NAME`` (or `flag`) off `argv`, apply that breakage (or conformant variant: `what`) and
    return the other arguments (for `command`); None, after one stderr line listing the known ones, when
    NAME is unknown."""
    description = (f"Run the reference {component} with one behaviour deliberately broken." if what == "breakage"
                   else f"Run the reference {component} built another way the spec allows.")
    parser = argparse.ArgumentParser(
        prog=prog, description=description, epilog=f"Arguments other than {flag} go to {command} unchanged.",
        allow_abbrev=False)
    parser.add_argument(flag, dest="breakage", required=True, metavar="NAME",
                        help=f"the {what} to apply: " + ", ".join(sorted(breakages)))
    args, rest = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    if args.breakage not in breakages:
        print(f"{parser.prog}: unknown {what} {args.breakage!r}; known {what}s: "
              + ", ".join(sorted(breakages)), file=sys.stderr)
        return None
    breakages[args.breakage].apply()
    return rest


def run_applied(prog: str, component: str, command: str, entry: str, table: Mapping[str, Breakage],
                argv: list[str] | None, *, flag: str = "--break", what: str = "breakage") -> int:
    """What every launcher does: apply the breakage (or variant) `flag` names from `table`, then run `entry`,
    the component's command-line main as ``module:function`` (imported only then), with the other arguments;
    EXIT_USAGE for an unknown name."""
    rest = apply_from_argv(prog, component, command, table, argv, flag=flag, what=what)
    if rest is None:
        return EXIT_USAGE
    module, _, function = entry.partition(":")
    main: Callable[[list[str]], int] = getattr(importlib.import_module(module), function)
    return main(rest)
