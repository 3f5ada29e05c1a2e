"""The run options table drives the run flags, the plugin's options, the options file and the pytest arguments."""

from __future__ import annotations

import subprocess
import sys

from harness import cli
from harness.options_file import KEYS
from harness.run_options import OPTIONS, RunOption, pytest_args

SAMPLE = {"text": "x", "choice": "kind", "integer": 3, "number": 1.5, "flag": True, "repeated": ["reload=9"]}


def _value(option: RunOption) -> object:
    return SAMPLE[option.kind]


def test_every_run_option_is_a_flag_an_options_file_key_and_a_pytest_argument() -> None:
    argv = ["run"]
    for option in OPTIONS:
        if not option.run_flag:
            continue
        value = _value(option)
        if option.kind == "flag":
            argv.append(option.run_flag)
        elif option.kind == "repeated":
            argv += [option.run_flag, str(value[0])]  # type: ignore[index]
        else:
            argv += [option.run_flag, str(value)]
    args = cli.parse_args(argv)
    values = {option.key: getattr(args, option.key) for option in OPTIONS if option.run_flag}
    assert values == {option.key: _value(option) for option in OPTIONS if option.run_flag}
    assert set(values) | {"profile", "self_check"} == set(KEYS)  # the self-check block is its own command's
    sent = pytest_args(values)
    for option in OPTIONS:
        if option.run_flag and option.pytest_flag:
            assert option.pytest_flag in sent, f"{option.key} does not reach pytest as {option.pytest_flag}"


def test_the_plugin_takes_every_pytest_option_of_the_table() -> None:
    done = subprocess.run([sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"], capture_output=True,
                          text=True, timeout=120)
    missing = [o.pytest_flag for o in OPTIONS if o.pytest_flag and o.pytest_flag not in done.stdout]
    assert not missing, f"pytest --help lacks {missing}"
