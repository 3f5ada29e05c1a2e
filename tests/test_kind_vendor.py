"""A vendor operator on a real kind cluster, installed from a descriptor as a vendor would install theirs.

The reference image is tagged under another name and tag (a vendor's build stands in for it), a copy of the
operator's manifests with a kustomize overlay naming that image is what the descriptor's
`operator.kubernetes` installs, and `agn-conformance run --backend kind --profile producer` judges it. The
test then reads the kept cluster: the operator pod runs the vendor's image, and the node holds it because
the backend loaded it (`kind load docker-image`), since nothing is pulled.

It needs what the kind backend needs (docker with an engine, kind, kubectl, the node image and the project
image on the engine: see docs/backends/air-gapped.md); without them it skips naming what is missing.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from harness.backends.kube.kind import preflight_kind
from harness.backends.kube.names import DEFAULT_IMAGE
from harness.backends.runner import Runner
from harness.impl import reference_document
from tests.test_kube_install_plan import write_vendor_overlay

REPO = Path(__file__).resolve().parents[1]
#: Producer tests that cover the operator's outputs and the chain from its ConfigMap to a gateway.
TESTS = "test_configmap_name or test_revision_moves_through_all_four_stages"


def _run(*argv: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, timeout=timeout)


@pytest.fixture(scope="module")
def kind_ready(tmp_path_factory: pytest.TempPathFactory) -> None:
    problem = preflight_kind(Runner(log_path=tmp_path_factory.mktemp("preflight") / "commands.jsonl"),
                             image=DEFAULT_IMAGE, root=REPO)
    if problem:
        pytest.skip(f"no kind run here: {problem}")


@pytest.fixture
def vendor_image(kind_ready: None) -> Iterator[str]:
    """The reference image under a vendor's name and a tag of this test's own, untagged at the end."""
    image = f"vendor.example/grid-operator:1.4.0-{secrets.token_hex(3)}"
    _run("docker", "tag", DEFAULT_IMAGE, image)
    try:
        yield image
    finally:
        _run("docker", "rmi", image, check=False)


def test_a_vendor_operator_image_is_installed_from_its_descriptor_and_judged(vendor_image: str,
                                                                             tmp_path: Path) -> None:
    write_vendor_overlay(tmp_path, vendor_image)
    doc = reference_document()
    doc["implementation"].update(organization="vendor.example", project="grid-operator", version="1.4.0")
    doc["operator"] = {"kubernetes": {"image": vendor_image, "manifests": ["vendor"]}}
    doc["features"] = [f for f in doc["features"] if f not in ("dynamicWeights", "signalsRelay")]
    descriptor = tmp_path / "vendor.yaml"
    descriptor.write_text(yaml.safe_dump(doc, sort_keys=False))

    before = set(_run("kind", "get", "clusters").stdout.split())
    (tmp_path / "tmp").mkdir()  # where --keep leaves the grid's work directory
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--backend", "kind", "--impl", str(descriptor),
                          "--profile", "producer", "--image", DEFAULT_IMAGE, "--keep",
                          "--report", str(tmp_path / "report.yaml"), "--", "-k", TESTS, "-p", "no:cacheprovider"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=1800,
                         env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path / "tmp")})
    kept = sorted(set(_run("kind", "get", "clusters").stdout.split()) - before - {"No", "kind", "clusters", "found."})
    try:
        assert run.returncode == 0, f"exit {run.returncode}\n{run.stdout[-4000:]}\n{run.stderr[-2000:]}"
        assert re.search(r"producer\s+core: success \(2 passed, 0 failed", run.stdout), run.stdout[-2000:]
        assert len(kept) == 1, f"clusters kept by the run: {kept}"
        name = kept[0]
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(_run("kind", "get", "kubeconfig", "--name", name).stdout)
        pods = _run("kubectl", "--kubeconfig", str(kubeconfig), "--namespace", "agn-system", "get", "pods", "-l",
                    "app.kubernetes.io/name=agn-operator", "-o",
                    "jsonpath={range .items[*]}{.spec.containers[*].image}{'\\n'}{end}").stdout.split()
        assert pods == [vendor_image], f"operator pods run {pods}"
        others = _run("kubectl", "--kubeconfig", str(kubeconfig), "--namespace", "agn-system", "get", "pods", "-l",
                      "app.kubernetes.io/name=agn-gateway", "-o", "jsonpath={.items[*].spec.containers[*].image}")
        assert set(others.stdout.split()) == {DEFAULT_IMAGE}, "the reference's own pods keep the project image"
        images = _run("docker", "exec", f"{name}-control-plane", "crictl", "images", "-o", "yaml").stdout
        assert vendor_image.split(":")[0] in images and vendor_image.split(":")[1] in images, (
            "the vendor image was loaded into the node")
        print(f"\nvendor kind run: {time.monotonic() - started:.0f}s")
    finally:
        for name in kept:
            _run("kind", "delete", "cluster", "--name", name, check=False, timeout=300)
