"""Which images a kind run uses, and whether this machine has them.

A kind run needs two images on the Docker engine: the node image every site's cluster boots, and the
project image the components run. Hosts without registry access build both with
`clusters/kind/offline/build-images.sh`; hosts with one pull `kindest/node` and build reference/Dockerfile
on the public slim base. The preflight says which is missing and what to run, so a host with neither
skips the kind tests with a reason instead of failing half-way through a cluster's creation.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from harness.backends.runner import Runner

#: The environment variable that names the node image when --grid-kind-node-image does not.
NODE_IMAGE_ENV = "AGN_KIND_NODE_IMAGE"
#: What clusters/kind/offline/build-images.sh tags (see its versions.env).
OFFLINE_NODE_IMAGE = "agn-conformance/kind-node:v1.31.0"
OFFLINE_PYTHON_BASE = "agn-conformance/python-base:bookworm"
#: The repository of kind's own node images (kind picks the tag for its version).
KIND_NODE_REPOSITORY = "kindest/node"
#: reference/Dockerfile's default base.
PUBLIC_PYTHON_BASE = "python:3.11-slim-bookworm"
OFFLINE_BUILDER = Path("clusters") / "kind" / "offline" / "build-images.sh"


def image_present(runner: Runner, image: str) -> bool:
    """The image is on this Docker engine (nothing is pulled to find out)."""
    return runner.run(["docker", "image", "inspect", image], check=False, timeout=60).returncode == 0


def local_kind_node_images(runner: Runner) -> list[str]:
    """kind's own node images present on this engine, as repository:tag."""
    out = runner.run(["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}", KIND_NODE_REPOSITORY],
                     check=False, timeout=60).stdout
    return [line for line in out.split() if line and not line.endswith(":<none>")]


@dataclass(frozen=True)
class NodeImage:
    """The node image of this run: `image` None means kind's own default (a kindest/node image is local)."""

    image: str | None
    problem: str | None = None


def resolve_node_image(runner: Runner, given: str | None, root: Path) -> NodeImage:
    """The option, else the environment, else the offline build's tag, else kind's default; each must be local."""
    wanted = given or os.environ.get(NODE_IMAGE_ENV) or None
    how = f"run {root / OFFLINE_BUILDER} (hosts without registry access; see docs/backends/air-gapped.md)"
    if wanted:
        if image_present(runner, wanted):
            return NodeImage(wanted)
        source = "--kind-node-image" if given else f"${NODE_IMAGE_ENV}"
        return NodeImage(None, f"the kind node image {wanted} ({source}) is not on this Docker engine: {how}, "
                               f"or `docker pull` it where a registry is reachable")
    if image_present(runner, OFFLINE_NODE_IMAGE):
        return NodeImage(OFFLINE_NODE_IMAGE)
    if local_kind_node_images(runner):
        return NodeImage(None)
    return NodeImage(None, f"no kind node image on this Docker engine (neither {OFFLINE_NODE_IMAGE} nor a "
                           f"{KIND_NODE_REPOSITORY} image): {how}, or `docker pull {KIND_NODE_REPOSITORY}:<tag>` "
                           "for your kind version where a registry is reachable")


def project_image_problem(runner: Runner, given: str | None, root: Path) -> str | None:
    """Why the project image can be neither used nor built here (None: it can)."""
    if given:
        if image_present(runner, given):
            return None
        return f"the project image {given} (--image) is not on this Docker engine: build it with " \
               f"{root / OFFLINE_BUILDER} --only project, or `docker build -f reference/Dockerfile -t {given} .`"
    if image_present(runner, PUBLIC_PYTHON_BASE) or image_present(runner, OFFLINE_PYTHON_BASE):
        return None
    if os.environ.get("AGN_KIND_ALLOW_PULL") == "1":
        return None
    return (f"reference/Dockerfile needs a base image and neither {PUBLIC_PYTHON_BASE} nor {OFFLINE_PYTHON_BASE} "
            f"is on this Docker engine: run {root / OFFLINE_BUILDER} --only python (no registry), or "
            f"`docker pull {PUBLIC_PYTHON_BASE}` (set AGN_KIND_ALLOW_PULL=1 to let the build pull it)")


def offline_build(runner: Runner) -> bool:
    """Build the project image with the offline builder: the public base is absent, the offline one present."""
    return not image_present(runner, PUBLIC_PYTHON_BASE) and image_present(runner, OFFLINE_PYTHON_BASE)
