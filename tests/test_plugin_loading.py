"""A run loads its own plugin and pytest-xdist by name, with pytest's plugin autoloading off, and leaves the
environment as it found it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness import cli
from harness.plugin_loading import AUTOLOAD_ENV, only_needed_plugins


def test_autoloading_is_off_only_inside_the_block(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(AUTOLOAD_ENV, raising=False)
    with only_needed_plugins() as args:
        assert os.environ[AUTOLOAD_ENV] == "1"
        assert args[:2] == ["-p", "harness.plugin"] and args[2:] == ["-p", "xdist"]
    assert AUTOLOAD_ENV not in os.environ
    monkeypatch.setenv(AUTOLOAD_ENV, "yes")  # the user's own setting comes back unchanged
    with only_needed_plugins():
        pass
    assert os.environ[AUTOLOAD_ENV] == "yes"


def test_a_run_names_its_plugins_and_keeps_the_users_pytest_arguments(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    monkeypatch.delenv(AUTOLOAD_ENV, raising=False)
    seen: list[tuple[list[str], str | None]] = []
    monkeypatch.setattr(cli, "run_pytest", lambda args, **_: seen.append((list(args), os.environ.get(AUTOLOAD_ENV)))
                        or 5)
    cli.main(["run", "--profile", "consumer", "--workers", "1", "--report", f"{tmp_path}/r.yaml", "--",
              "-p", "my_plugin", "-k", "reload"])
    args, autoload_off = seen[0]
    assert autoload_off == "1" and AUTOLOAD_ENV not in os.environ
    assert args[:4] == ["-p", "harness.plugin", "-p", "xdist"]
    assert args[-4:] == ["-p", "my_plugin", "-k", "reload"]
