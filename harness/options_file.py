"""The options file of `agn-conformance run --options FILE`: every run option in one YAML mapping.

A certification run is reproduced from the file rather than from a shell history: keys are the run flags
without their dashes (`kube_contexts` for --kube-contexts), `timeout` maps deadline names to seconds,
`self_check` holds the options of `agn-conformance self-check` (which reads the file's impl, profile and
slow too), and a flag given on the command line overrides the file's value. An unknown key, or a value of
the wrong kind, is an error naming the key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from harness.run_options import OPTIONS


class OptionsFileError(ValueError):
    """The options file cannot be used; the message names the file and the key."""


def _string(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise OptionsFileError(f"{key}: expected a non-empty string, got {value!r}")
    return value


def _boolean(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise OptionsFileError(f"{key}: expected true or false, got {value!r}")
    return value


def _integer(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise OptionsFileError(f"{key}: expected an integer, got {value!r}")
    return value


def _contexts(key: str, value: Any) -> str:
    """`site-a=ctx1,site-b=ctx2`, or the same as a mapping of site to context."""
    if isinstance(value, Mapping):
        return ",".join(f"{_string(key, site)}={_string(f'{key}.{site}', ctx)}" for site, ctx in value.items())
    return _string(key, value)


def _profiles(key: str, value: Any) -> list[str]:
    """A list of profile names, or one comma-separated string."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list) and value and all(isinstance(v, str) and v for v in value):
        return list(value)
    raise OptionsFileError(f"{key}: expected a list of profile names, got {value!r}")


def _timeouts(key: str, value: Any) -> list[str]:
    """A mapping of deadline name to seconds, as `--timeout NAME=SECONDS` entries (checked by the run)."""
    if not isinstance(value, Mapping) or not value:
        raise OptionsFileError(f"{key}: expected a mapping of deadline name to seconds, got {value!r}")
    out = []
    for name, seconds in value.items():
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise OptionsFileError(f"{key}.{name}: expected a number of seconds, got {seconds!r}")
        out.append(f"{name}={seconds}")
    return out


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise OptionsFileError(f"{key}: expected a positive number, got {value!r}")
    return float(value)


def _names(key: str, value: Any) -> list[str]:
    """A list of names (breakages, conformance ids), or one such name."""
    if isinstance(value, str) and value:
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) and v for v in value):
        return list(value)
    raise OptionsFileError(f"{key}: expected a list of names, got {value!r}")


def _positive_integer(key: str, value: Any) -> int:
    number = _integer(key, value)
    if number < 1:
        raise OptionsFileError(f"{key}: expected an integer of at least 1, got {value!r}")
    return number


#: The self-check's own options (`self_check:` in the file); it also reads the run's impl, profile and slow.
SELF_CHECK_KEYS: Mapping[str, Callable[[str, Any], Any]] = {
    "breakage": _names, "implementation_test": _names, "jobs": _positive_integer, "workdir": _string,
}


def _self_check(key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise OptionsFileError(f"{key}: expected a mapping of self-check option to value, got {value!r}")
    out: dict[str, Any] = {}
    for name, item in value.items():
        if name not in SELF_CHECK_KEYS:
            raise OptionsFileError(f"{key}.{name}: unknown self-check option (known: {', '.join(SELF_CHECK_KEYS)})")
        out[name] = SELF_CHECK_KEYS[name](f"{key}.{name}", item)
    return out


def _workers(key: str, value: Any) -> str:
    """A number of workers, or auto (checked by the run like the flag)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return _string(key, value)


#: How a value of each kind of run option is read from the file.
_READERS: Mapping[str, Callable[[str, Any], Any]] = {
    "text": _string, "choice": _string, "integer": _integer, "number": _number, "flag": _boolean,
    "repeated": _timeouts,
}
#: File key -> (the run's argparse destination, how the value is read): every run option, and the profiles.
KEYS: Mapping[str, tuple[str, Callable[[str, Any], Any]]] = {
    **{option.key: (option.key, {"kube_contexts": _contexts, "workers": _workers, "id": _names}.get(option.key)
                    or _READERS[option.kind]) for option in OPTIONS if option.run_flag},
    "profile": ("profile", _profiles),
    "self_check": ("self_check", _self_check),
}


def load_self_check_options(path: Path) -> dict[str, Any]:
    """What `agn-conformance self-check --options FILE` takes from the file: impl, profile and slow, as the run
    does, and the `self_check` block; the file's other run options are the run's, checked all the same."""
    loaded = load_options(path)
    out: dict[str, Any] = {key: loaded[key] for key in ("impl", "profile", "slow") if key in loaded}
    out.update(loaded.get("self_check", {}))
    return out


def load_options(path: Path) -> dict[str, Any]:
    """The run's argparse defaults from `path`: {destination: value}; OptionsFileError naming what is wrong."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise OptionsFileError(f"{path}: cannot read the options file: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise OptionsFileError(f"{path}: not YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise OptionsFileError(f"{path}: expected a mapping of option to value, got {type(data).__name__}")
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key not in KEYS:
            raise OptionsFileError(f"{path}: unknown option {key!r} (known: {', '.join(KEYS)})")
        destination, read = KEYS[key]
        try:
            out[destination] = read(key, value)
        except OptionsFileError as exc:
            raise OptionsFileError(f"{path}: {exc}") from None
    return out
