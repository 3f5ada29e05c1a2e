"""The run options, written once: the plugin's pytest options, the `agn-conformance run` flags, the options
file's keys and the mapping from a run to its pytest arguments are all made from `OPTIONS`.

A later feature adds its option here and it exists in all four places. The profile selection is the one
option of its own kind (the run picks suite packages from it and tells the report which profiles it
covers), so the CLI keeps it apart.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from harness.backends.registry import backend_names
from harness.timeouts import NAMES as TIMEOUT_NAMES

Kind = Literal["text", "integer", "number", "flag", "repeated", "choice"]


@dataclass(frozen=True)
class RunOption:
    """One run option as each place spells it; None where a place does not take it."""

    key: str  # the options file's key and the run's argparse destination
    run_flag: str | None  # agn-conformance run
    pytest_flag: str | None  # the plugin (pytest)
    kind: Kind
    help: str
    metavar: str | None = None
    choices: Callable[[], Sequence[str]] | None = None
    default: Any = None
    run_default: Any = None  # where the run's default differs from pytest's (the report path)

    def argparse_kwargs(self, *, run: bool) -> dict[str, Any]:
        default = self.run_default if run and self.run_default is not None else self.default
        if self.kind == "flag":
            return {"action": "store_true", "help": self.help}
        kwargs: dict[str, Any] = {"default": [] if self.kind == "repeated" else default, "help": self.help}
        if self.metavar:
            kwargs["metavar"] = self.metavar
        if self.kind == "repeated":
            kwargs["action"] = "append"
        elif self.kind == "integer":
            kwargs["type"] = int
        elif self.kind == "number":
            kwargs["type"] = float
        elif self.kind == "choice" and self.choices is not None:
            kwargs["choices"] = tuple(self.choices())
        return kwargs


OPTIONS: tuple[RunOption, ...] = (
    RunOption("backend", "--backend", "--grid-backend", "choice",
              "where the grid runs: local processes (default), kind clusters made for the run (needs Docker, kind, "
              "kubectl), existing clusters (--kube-contexts), or a backend another package registers",
              choices=backend_names, default="local"),
    RunOption("image", "--image", "--grid-image", "text",
              "kind/existing: a prebuilt image to use instead of building reference/Dockerfile", metavar="TAG"),
    RunOption("kind_node_image", "--kind-node-image", "--grid-kind-node-image", "text",
              "kind: the node image of every site's cluster (default: $AGN_KIND_NODE_IMAGE, else the offline "
              "build's agn-conformance/kind-node:v1.31.0 when present, else kind's own kindest/node)",
              metavar="IMAGE"),
    RunOption("kube_contexts", "--kube-contexts", "--grid-kube-contexts", "text",
              "existing: the kubeconfig context of each site, e.g. site-a=ctx1,site-b=ctx2",
              metavar="SITE=CONTEXT,..."),
    RunOption("impl", "--impl", "--impl", "text",
              "implementation descriptor: 'reference' (default, the bundled reference gateway) or a YAML file "
              "describing your gateway", metavar="reference|FILE", default="reference"),
    RunOption("report", "--report", "--conformance-report", "text",
              "where to write the YAML conformance report", metavar="FILE", run_default="conformance-report.yaml"),
    RunOption("html", "--html", "--conformance-html", "text", "also write a readable HTML report", metavar="FILE"),
    RunOption("junit", "--junit", "--conformance-junit", "text",
              "also write JUnit XML: one test case per conformance test, its id, profile, level and feature as "
              "properties", metavar="FILE"),
    RunOption("diagnostics", "--diagnostics", "--conformance-diagnostics", "text",
              "write each failed test's failure and diagnostics (overlay serving, log tails, requests) to "
              "DIR/<test id>.txt", metavar="DIR"),
    RunOption("submission", "--submission", None, "text",
              "write a certification submission into DIR: the report named <profiles>-<version>-<backend>-report.yaml,"
              " README.md with a Reproduce section, the descriptor, JUnit XML, the HTML page and diagnostics of "
              "failures; the implementation version must name a release, not a branch; a run that judged nothing "
              "writes none", metavar="DIR"),
    RunOption("force", "--force", None, "flag",
              "replace a --submission folder that exists and is not empty (refused otherwise)"),
    RunOption("workers", "--workers", None, "text",
              "spread the run over N pytest-xdist workers, each with its own grid; auto (default): up to 4 on "
              "the local backend (most of a run is waiting), two more with the producer or mesh profile, 1 on "
              "cluster backends", metavar="N|auto",
              run_default="auto"),
    RunOption("id", "--id", "--conformance-id", "repeated",
              "run only this conformance test, repeatable: an id as `list` and the report name it, with or without its "
              "case (CONS-SEL-WEIGHTED[70-30]); * is the only wildcard", metavar="ID"),
    RunOption("keep", "--keep", "--grid-keep", "flag",
              "keep the grid's working directories (configs, overlays, logs) after the run"),
    RunOption("timeout", "--timeout", "--grid-timeout", "repeated",
              f"override one named wait deadline, repeatable ({', '.join(TIMEOUT_NAMES)})", metavar="NAME=SECONDS"),
    RunOption("wait_scale", "--wait-scale", "--grid-wait-scale", "number",
              "multiply every wait deadline by this factor (e.g. 2 on a slow machine)", metavar="FACTOR"),
    RunOption("slow", "--slow", "--grid-slow", "flag",
              "also run the slow tests, which wait out the operator's default reconcile cadences (about ten "
              "minutes more)"),
    RunOption("seed", "--seed", "--grid-seed", "integer", "seed for randomised choices, to reproduce a run",
              metavar="N"),
    RunOption("demo_dir", "--demo-dir", "--grid-demo-dir", "text",
              "demos: run the demo's scenario on the resources of this demo folder (a demos checkout's "
              "demos/NAME); every key it cannot use is reported by file and key", metavar="PATH"),
    RunOption("topology", None, "--grid-topology", "text", "bundled topology name or a topology file",
              default="single-site"),
)


def add_pytest_options(group: Any) -> None:
    """The plugin's options (a pytest option group)."""
    for option in OPTIONS:
        if option.pytest_flag:
            group.addoption(option.pytest_flag, **option.argparse_kwargs(run=False))


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `agn-conformance run` that are run options."""
    for option in OPTIONS:
        if option.run_flag:
            parser.add_argument(option.run_flag, dest=option.key, **option.argparse_kwargs(run=True))


def pytest_args(values: Mapping[str, Any]) -> list[str]:
    """The pytest arguments that carry a run's option values (by key; None and False are left out)."""
    out: list[str] = []
    for option in OPTIONS:
        value = values.get(option.key)
        if not option.pytest_flag or value is None or value is False:
            continue
        if option.kind == "flag":
            out.append(option.pytest_flag)
        elif option.kind == "repeated":
            for entry in value:
                out += [option.pytest_flag, str(entry)]
        else:
            out += [option.pytest_flag, str(value)]
    return out


RUN_KEYS: tuple[str, ...] = tuple(option.key for option in OPTIONS if option.run_flag)
