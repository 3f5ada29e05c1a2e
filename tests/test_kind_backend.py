"""The kind and existing backends against recording stand-ins for docker, kind and kubectl on PATH.

The stand-ins append their argv (and stdin) as JSON lines to a log and answer like the real tools where
the backend reads their output: `kind get clusters`, `kubectl get --raw /readyz`, `kubectl port-forward`
(which here serves HTTP itself on a loopback port and prints the real tool's "Forwarding from" lines).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import yaml

from harness.addresses import AddressPlan
from harness.backends.existing import ExistingBackend, parse_contexts, preflight_existing
from harness.backends.kind import DEFAULT_IMAGE, BackendUnavailable, KindBackend, KubeProvider, preflight_kind
from harness.backends.runner import CommandFailed, Runner
from harness.process import Supervisor
from harness.projection import project
from harness.topology import load_topology
from harness.waiting import poll_until

FAKE_TOOL = r'''
import json, os, sys

tool = os.path.basename(sys.argv[0])
args = sys.argv[1:]
stdin = sys.stdin.read() if args[-2:] == ["-f", "-"] else None
with open(os.environ["AGN_FAKE_LOG"], "a") as log:
    log.write(json.dumps({"argv": [tool] + args, "stdin": stdin}) + "\n")
state = os.environ["AGN_FAKE_STATE"]
fail = os.environ.get("AGN_FAKE_FAIL", "")
if fail and fail in " ".join([tool] + args):
    sys.stderr.write("failing as asked: " + fail + "\n")
    sys.exit(1)

def clusters():
    return sorted(os.listdir(state))

if tool == "docker":
    if args[:1] == ["info"]:
        rc = int(os.environ.get("AGN_FAKE_DOCKER_INFO_RC", "0"))
        sys.stderr.write("" if rc == 0 else "Cannot connect to the Docker daemon\n")
        sys.exit(rc)
    sys.exit(0)
if tool == "kind":
    if args[:2] == ["get", "clusters"]:
        print("\n".join(clusters()) if clusters() else "No kind clusters found.")
    elif args[:2] == ["create", "cluster"]:
        config = args[args.index("--config") + 1]
        name = [line.split(":", 1)[1].strip() for line in open(config) if line.startswith("name:")][0]
        open(os.path.join(state, name), "w").close()
    elif args[:2] == ["delete", "cluster"]:
        name = args[args.index("--name") + 1]
        if os.path.exists(os.path.join(state, name)):
            os.remove(os.path.join(state, name))
    sys.exit(0)
# kubectl
if "--raw" in args:
    print("ok", end="")
elif "get-contexts" in args:
    print(os.environ.get("AGN_FAKE_CONTEXTS", "").replace(",", "\n"))
elif "get" in args and "deployments" in args:
    print("deployment.apps/agn-gateway")
elif "logs" in args:
    print("a log line of " + args[args.index("logs") + 1])
elif "port-forward" in args:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def _answer(self):
            body = json.dumps({"requests": 0, "metrics": []}).encode()
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        do_GET = do_POST = _answer
        def log_message(self, *a):
            pass
    for spec in [a for a in args if a.startswith(":")]:
        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        print(f"Forwarding from 127.0.0.1:{server.server_address[1]} -> {spec[1:]}", flush=True)
    threading.Event().wait()
'''


class _Ready(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200 if self.path == "/ready" else 404)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


class Tools:
    """The stand-ins' directory, log and state, and helpers to read what they saw."""

    def __init__(self, tmp: Path) -> None:
        self.bin = tmp / "bin"
        self.log = tmp / "tools.jsonl"
        self.state = tmp / "kind-state"
        self.bin.mkdir()
        self.state.mkdir()
        self.log.touch()
        for tool in ("docker", "kind", "kubectl"):
            self.install(tool)

    def install(self, tool: str) -> None:
        path = self.bin / tool
        path.write_text(f"#!{sys.executable} -S\n{textwrap.dedent(FAKE_TOOL)}")
        path.chmod(0o755)

    def remove(self, tool: str) -> None:
        (self.bin / tool).unlink()

    def calls(self) -> list[list[str]]:
        return [entry["argv"] for entry in self.entries()]

    def entries(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Tools:
    found = Tools(tmp_path)
    # only the stand-ins are on PATH (they run under this interpreter)
    monkeypatch.setenv("PATH", str(found.bin))
    monkeypatch.setenv("AGN_FAKE_LOG", str(found.log))
    monkeypatch.setenv("AGN_FAKE_STATE", str(found.state))
    monkeypatch.delenv("AGN_FAKE_FAIL", raising=False)
    return found


@pytest.fixture
def ready_server() -> Iterator[int]:
    """What a site's standing gateway answers on its kind host port mapping (/ready)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ready)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def root(tmp_path: Path, ready_server: int) -> Path:
    """A checkout layout: kind configs per site mapping the admin NodePort to the ready server."""
    repo = tmp_path / "repo"
    (repo / "manifests" / "crds").mkdir(parents=True)
    (repo / "manifests" / "overlays" / "kind").mkdir(parents=True)
    (repo / "reference").mkdir()
    (repo / "reference" / "Dockerfile").write_text("FROM scratch\n")
    (repo / "clusters" / "kind").mkdir(parents=True)
    for i, site in enumerate(("site-a", "site-b")):
        config = {"kind": "Cluster", "apiVersion": "kind.x-k8s.io/v1alpha4",
                  "networking": {"podSubnet": f"10.1{i}.0.0/16", "serviceSubnet": f"10.9{i}.0.0/16"},
                  "nodes": [{"role": "control-plane", "extraPortMappings": [
                      {"containerPort": 30901, "hostPort": ready_server, "listenAddress": "127.0.0.1"},
                      {"containerPort": 30946, "hostPort": 40946 + i, "protocol": "UDP"}]}]}
        (repo / "clusters" / "kind" / f"{site}.yaml").write_text(yaml.safe_dump(config))
    return repo


@pytest.fixture
def parts(tmp_path: Path) -> Iterator[SimpleNamespace]:
    supervisor = Supervisor(tmp_path / "work" / "logs")
    plan = AddressPlan()
    impl = SimpleNamespace(gateway=SimpleNamespace(startup_timeout_s=10))
    try:
        yield SimpleNamespace(supervisor=supervisor, plan=plan, impl=impl, workdir=tmp_path / "work")
    finally:
        supervisor.stop_all()
        plan.close()


def make_kind(parts: SimpleNamespace, root: Path, topology: str, **kwargs: Any) -> KindBackend:
    parts.workdir.mkdir(exist_ok=True)
    return KindBackend(parts.workdir, load_topology(topology), parts.impl, runner=Runner(), root=root,
                       run_id="t1", supervisor=parts.supervisor, plan=parts.plan, **kwargs)


def site_sequence(root: Path, work: Path, site: str, image: str = DEFAULT_IMAGE) -> list[list[str]]:
    """What one kind site's bring-up runs, in order."""
    kc = ["--kubeconfig", str(work / "kube" / site / "kubeconfig")]
    crds = str(root / "manifests" / "crds")
    return [
        ["kind", "create", "cluster", "--config", str(work / "kube" / site / "kind.yaml"), *kc],
        ["kubectl", *kc, "get", "--raw", "/readyz"],
        ["kubectl", *kc, "get", "serviceaccount", "default", "--namespace", "default"],
        ["kind", "load", "docker-image", image, "--name", f"agn-t1-{site}"],
        ["kubectl", *kc, "apply", "--server-side", "--field-manager", "agn-conformance", "-f", crds],
        ["kubectl", *kc, "wait", "--for=condition=Established", "--timeout=120s", "-f", crds],
        ["kubectl", *kc, "apply", "-k", str(root / "manifests" / "overlays" / "kind")],
        ["kubectl", *kc, "apply", "-f", str(work / "kube" / site / "site.yaml")],
        *([["kubectl", *kc, "--namespace", "agn-system", "set", "image", "deployment", "--all", f"*={image}"]]
          if image != DEFAULT_IMAGE else []),
        ["kubectl", *kc, "--namespace", "agn-system", "wait", "--for=condition=Available", "deployment", "--all",
         "--timeout=300s"],
    ]


def of_site(calls: list[list[str]], root: Path, work: Path, site: str) -> list[list[str]]:
    """The calls aimed at one site's cluster (by its kubeconfig, config file or cluster name)."""
    marks = {str(work / "kube" / site / "kubeconfig"), str(work / "kube" / site / "kind.yaml"), f"agn-t1-{site}"}
    return [c for c in calls if marks & set(c)]


BUILD = ["docker", "build", "-f", "{root}/reference/Dockerfile", "-t", DEFAULT_IMAGE, "{root}"]


def build_call(root: Path) -> list[str]:
    return [part.format(root=root) for part in BUILD]


def test_single_site_bring_up_and_teardown_run_the_exact_command_sequence(tools: Tools, root: Path,
                                                                          parts: SimpleNamespace) -> None:
    backend = make_kind(parts, root, "single-site")
    backend.start()
    expected = [build_call(root), ["kind", "get", "clusters"], *site_sequence(root, parts.workdir, "site-a")]
    assert tools.calls() == expected
    assert [list(c) for c in backend.runner.calls] == expected  # the Runner's record matches what ran
    assert (tools.state / "agn-t1-site-a").exists()

    rendered = yaml.safe_load((parts.workdir / "kube" / "site-a" / "kind.yaml").read_text())
    source = yaml.safe_load((root / "clusters" / "kind" / "site-a.yaml").read_text())
    assert rendered["name"] == "agn-t1-site-a" and rendered["networking"] == source["networking"]
    docs = list(yaml.safe_load_all((parts.workdir / "kube" / "site-a" / "site.yaml").read_text()))
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert {("ConfigMap", "agn-gateway-config"), ("Secret", "agn-provider-gateway-tls"),
            ("ConfigMap", "agn-provider-gateway-config"), ("Secret", "agn-provider-credentials")} <= names
    for provider in ("provider-a", "provider-b", "provider-c", "provider-d", "mgmt"):
        assert {("Deployment", f"agn-fake-{provider}"), ("Service", f"agn-fake-{provider}")} <= names
    gateway = yaml.safe_load(next(d for d in docs if d["metadata"]["name"] == "agn-gateway-config")
                             ["data"]["praxis.yaml"])
    assert "agn-fake-provider-a.agn-system.svc.cluster.local:8000" in json.dumps(gateway)
    assert "/var/run/agn/overlay/routing-overlay.json" in json.dumps(gateway)

    before = len(tools.calls())
    backend.close()
    assert tools.calls()[before:] == [["kind", "delete", "cluster", "--name", "agn-t1-site-a"]]
    assert not (tools.state / "agn-t1-site-a").exists()


def test_two_sites_are_created_loaded_and_installed_each_and_both_deleted(tools: Tools, root: Path,
                                                                          parts: SimpleNamespace) -> None:
    backend = make_kind(parts, root, "two-site")
    backend.start()
    calls = tools.calls()
    assert calls[:2] == [build_call(root), ["kind", "get", "clusters"]]
    for site in ("site-a", "site-b"):
        assert of_site(calls, root, parts.workdir, site) == site_sequence(root, parts.workdir, site)
    assert len(calls) == 2 + 2 * len(site_sequence(root, parts.workdir, "site-a"))
    subnets = {yaml.safe_load((parts.workdir / "kube" / s / "kind.yaml").read_text())["networking"]["podSubnet"]
               for s in ("site-a", "site-b")}
    assert len(subnets) == 2

    before = len(calls)
    backend.close()
    assert sorted(tools.calls()[before:]) == [["kind", "delete", "cluster", "--name", "agn-t1-site-a"],
                                              ["kind", "delete", "cluster", "--name", "agn-t1-site-b"]]
    assert sorted(os.listdir(tools.state)) == []


def test_grid_keep_keeps_the_clusters(tools: Tools, root: Path, parts: SimpleNamespace) -> None:
    backend = make_kind(parts, root, "two-site", keep=True)
    backend.start()
    backend.close()
    assert not [c for c in tools.calls() if c[:2] == ["kind", "delete"]]
    assert sorted(os.listdir(tools.state)) == ["agn-t1-site-a", "agn-t1-site-b"]


def test_a_given_image_is_loaded_and_set_instead_of_built(tools: Tools, root: Path, parts: SimpleNamespace) -> None:
    backend = make_kind(parts, root, "single-site", image="vendor/gateway:1.2")
    backend.start()
    expected = [["kind", "get", "clusters"], *site_sequence(root, parts.workdir, "site-a", "vendor/gateway:1.2")]
    assert tools.calls() == expected
    backend.close()


def test_failed_bring_up_still_deletes_exactly_the_clusters_it_created(tools: Tools, root: Path,
                                                                       parts: SimpleNamespace,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    (tools.state / "someone-elses").touch()
    monkeypatch.setenv("AGN_FAKE_FAIL", "--for=condition=Available")
    backend = make_kind(parts, root, "two-site")
    with pytest.raises(BackendUnavailable, match="deployments not available"):
        backend.start()
    backend.close()
    deletes = sorted(c for c in tools.calls() if c[:2] == ["kind", "delete"])
    assert deletes == [["kind", "delete", "cluster", "--name", "agn-t1-site-a"],
                       ["kind", "delete", "cluster", "--name", "agn-t1-site-b"]]
    assert os.listdir(tools.state) == ["someone-elses"]
    logs = [c for c in tools.calls() if "logs" in c]
    assert logs and all("--all-containers" in c for c in logs)  # logs were read for the failure message


def test_a_cluster_name_already_taken_is_never_reused_or_deleted(tools: Tools, root: Path,
                                                                 parts: SimpleNamespace) -> None:
    (tools.state / "agn-t1-site-a").touch()
    backend = make_kind(parts, root, "single-site")
    with pytest.raises(BackendUnavailable, match="agn-t1-site-a already exist"):
        backend.start()
    backend.close()
    assert not [c for c in tools.calls() if c[:2] in (["kind", "create"], ["kind", "delete"])]
    assert os.listdir(tools.state) == ["agn-t1-site-a"]


def test_providers_gateways_and_overlays_go_through_port_forwards_and_configmaps(
        tools: Tools, root: Path, parts: SimpleNamespace) -> None:
    backend = make_kind(parts, root, "single-site", image="img:1")
    backend.start()
    topology = load_topology("single-site")
    providers = backend.start_providers(0, topology.sites[0])
    provider = providers["provider-a"]
    assert isinstance(provider, KubeProvider)
    assert provider.address == "agn-fake-provider-a.agn-system.svc.cluster.local:8000"
    assert httpx.get(f"{provider.url}/admin/stats", timeout=5).status_code == 200
    kc = ["--kubeconfig", str(parts.workdir / "kube" / "site-a" / "kubeconfig")]
    assert ["kubectl", *kc, "--namespace", "agn-system", "port-forward", "--address", "127.0.0.1",
            "service/agn-fake-provider-a", ":8000"] in tools.calls()

    listen, admin, workdir = backend.allocate_gateway(0)
    assert (listen, admin) == ("0.0.0.0:8080", "0.0.0.0:9901")
    overlay_dir = workdir / "overlay"
    project(overlay_dir, {"routing-overlay.json": b'{"v": 1}'})
    ca = backend.pki.ca_path
    config = f"overlay: {overlay_dir / 'routing-overlay.json'}\nca: {ca}\n"
    before = len(tools.calls())
    proc = backend.start_gateway("gateway-site-a-core", listen, admin, workdir, config, overlay_dir,
                                 env={"AGN_PROVIDER_TOKEN_0": "s3cret"})
    assert tools.calls()[before:] == [
        ["kubectl", *kc, "apply", "-f", str(workdir / "kube.yaml")],
        ["kubectl", *kc, "--namespace", "agn-system", "rollout", "status", "deployment/agn-gw-1", "--timeout=70s"],
        ["kubectl", *kc, "--namespace", "agn-system", "port-forward", "--address", "127.0.0.1",
         "deployment/agn-gw-1", ":8080", ":9901"],
    ]
    docs = {d["metadata"]["name"]: d for d in yaml.safe_load_all((workdir / "kube.yaml").read_text())}
    rendered = docs["agn-gw-1-config"]["data"]["praxis.yaml"]
    assert "/var/run/agn/overlay/routing-overlay.json" in rendered and str(parts.workdir) not in rendered
    assert any(key.endswith("ca.pem") for key in docs["agn-gw-1-files"]["data"])
    assert docs["agn-gw-1-overlay"]["data"] == {"routing-overlay.json": '{"v": 1}'}
    pod = docs["agn-gw-1"]["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["overlay-sync", "gateway"]
    assert all("subPath" not in m for c in pod["containers"] for m in c.get("volumeMounts", []))
    assert httpx.get(f"{proc.admin_url}/ready", timeout=5).status_code == 200

    project(overlay_dir, {"routing-overlay.json": b'{"v": 2}'})

    def mirrored() -> list[dict[str, Any]]:
        return [e for e in tools.entries() if e["argv"][-2:] == ["-f", "-"]]

    applied = poll_until(mirrored, bool, what="the overlay to be applied to its ConfigMap", timeout=10)
    sent = json.loads(applied[0]["stdin"])
    assert sent["metadata"]["name"] == "agn-gw-1-overlay" and sent["data"] == {"routing-overlay.json": '{"v": 2}'}
    assert applied[0]["argv"] == ["kubectl", *kc, "apply", "--server-side", "--force-conflicts", "--field-manager",
                                  "agn-conformance", "-f", "-"]

    backend.stop(proc.process)
    assert not proc.process.running()
    assert tools.calls()[-1] == ["kubectl", *kc, "--namespace", "agn-system", "delete", "deployment,configmap,secret",
                                 "-l", "agn.grid/gateway=agn-gw-1", "--ignore-not-found", "--wait=false"]
    backend.close()


def test_preflight_names_what_is_missing(tools: Tools, monkeypatch: pytest.MonkeyPatch) -> None:
    assert preflight_kind(Runner()) is None
    monkeypatch.setenv("AGN_FAKE_DOCKER_INFO_RC", "1")
    reason = preflight_kind(Runner())
    assert reason is not None and "docker info" in reason and "Cannot connect" in reason
    monkeypatch.delenv("AGN_FAKE_DOCKER_INFO_RC")
    tools.remove("kind")
    reason = preflight_kind(Runner())
    assert reason is not None and "kind" in reason and "kubectl" not in reason


def test_grid_fixture_skips_with_the_reason(tools: Tools, tmp_path: Path) -> None:
    tools.remove("kind")
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text((Path(__file__).resolve().parents[1] / "conftest.py").read_text())
    (suite / "test_uses_grid.py").write_text("def test_x(grid):\n    pass\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "--grid-backend", "kind", str(suite)], capture_output=True, text=True, env=env,
                          timeout=120, cwd=suite)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 skipped" in done.stdout and "needs kind on PATH" in done.stdout, done.stdout


def test_existing_backend_never_creates_or_deletes_clusters(tools: Tools, root: Path, parts: SimpleNamespace,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    topology = load_topology("two-site")
    contexts = parse_contexts("site-a=ctx-a, site-b=ctx-b")
    monkeypatch.setenv("AGN_FAKE_CONTEXTS", "ctx-a,ctx-b,other")
    assert preflight_existing(Runner(), topology, contexts) is None
    parts.workdir.mkdir()
    backend = ExistingBackend(parts.workdir, topology, parts.impl, contexts=contexts, runner=Runner(), root=root,
                              run_id="t1", supervisor=parts.supervisor, plan=parts.plan, image="reg/img:1")
    backend.start()
    backend.close()
    calls = tools.calls()
    assert not [c for c in calls if c[0] in ("kind", "docker")]
    assert {c[1:3] == ["--context", "ctx-a"] or c[1:3] == ["--context", "ctx-b"] for c in calls[1:]} == {True}
    ctx_a = [c for c in calls if c[1:3] == ["--context", "ctx-a"]]
    assert ["kubectl", "--context", "ctx-a", "--namespace", "agn-system", "port-forward", "--address", "127.0.0.1",
            "service/agn-gateway", ":9901"] in ctx_a
    assert ctx_a[-1] == ["kubectl", "--context", "ctx-a", "--namespace", "agn-system", "delete",
                         "deployment,service,configmap,secret", "-l", "agn.grid/run=t1", "--ignore-not-found",
                         "--wait=false"]


def test_existing_preflight_and_context_parsing(tools: Tools, monkeypatch: pytest.MonkeyPatch) -> None:
    topology = load_topology("two-site")
    monkeypatch.setenv("AGN_FAKE_CONTEXTS", "ctx-a")
    reason = preflight_existing(Runner(), topology, {"site-a": "ctx-a"})
    assert reason is not None and "site-b" in reason
    reason = preflight_existing(Runner(), topology, {"site-a": "ctx-a", "site-b": "ctx-b"})
    assert reason is not None and "ctx-b" in reason
    tools.remove("kubectl")
    reason = preflight_existing(Runner(), topology, {"site-a": "ctx-a", "site-b": "ctx-b"})
    assert reason is not None and "kubectl" in reason
    with pytest.raises(ValueError, match="site-b"):
        parse_contexts("site-a=ctx,site-b")


def test_runner_records_argv_and_reports_failures(tools: Tools, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = Runner()
    monkeypatch.setenv("AGN_FAKE_FAIL", "apply")
    with pytest.raises(CommandFailed, match="failing as asked"):
        runner.run(["kubectl", "apply", "-f", "x.yaml"])
    with pytest.raises(CommandFailed, match="not found on PATH"):
        runner.run(["helm", "version"])
    assert runner.calls == [("kubectl", "apply", "-f", "x.yaml"), ("helm", "version")]


def test_cli_maps_backend_image_and_contexts_to_plugin_options() -> None:
    from harness import cli

    args = cli.parse_args(["run", "--backend", "existing", "--image", "reg/img:1", "--kube-contexts", "site-a=c1"])
    pytest_args = cli.build_pytest_args(suite_profiles=["consumer"], profiles=["consumer"], backend=args.backend,
                                        impl="reference", report="r.yaml", image=args.image,
                                        kube_contexts=args.kube_contexts)
    joined = " ".join(pytest_args)
    assert "--grid-backend existing" in joined and "--grid-image reg/img:1" in joined
    assert "--grid-kube-contexts site-a=c1" in joined
    assert cli.parse_args(["run", "--backend", "kind"]).backend == "kind"
