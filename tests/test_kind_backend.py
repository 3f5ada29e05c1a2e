"""The kind and existing backends against recording stand-ins for docker, kind and kubectl on PATH.

The stand-ins append their argv (and stdin) as JSON lines to a log and answer like the real tools where
the backend reads their output: `kind get clusters`, `kubectl get --raw /readyz`, `kubectl get pods`
(a ready pod), nodes (one per site: site-a 172.18.0.2, site-b .3, site-c .4, named like kind's node
containers) and services, `kubectl logs -f` (which keeps streaming), `kubectl port-forward` (which here
serves HTTP, or HTTPS for a chosen target, on a loopback port and prints the real tool's "Forwarding
from" lines). A test can put canned answers first, for kubectl and `docker exec`: rules in the JSON file
AGN_FAKE_ANSWERS, `{"match": [argv words], "stdout": ..., "rc": ..., "stderr": ...}`, the first whose
words all occur wins (`"stdouts": [...]` instead answers one after the other, repeating the last).
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
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
from cryptography import x509

from harness import contract
from harness.addresses import AddressPlan
from harness.backends.kube import kind as kind_module
from harness.backends.kube.existing import ExistingBackend, parse_contexts, preflight_existing
from harness.backends.kube.handles import BackendUnavailable, KubeProvider
from harness.backends.kube.kind import KindBackend, port_clash, preflight_kind
from harness.backends.kube.manifests import PodState, pod_state
from harness.backends.kube.names import DEFAULT_IMAGE
from harness.backends.kube.tools import kubectl_too_old
from harness.backends.local import GatewayStartFailed
from harness.backends.runner import CommandFailed, Runner
from harness.environment import EnvironmentProblem
from harness.gateway_config import CredentialRef, ProviderRoute, TrustedPeer
from harness.grid import Grid
from harness.process import Supervisor
from harness.projection import project
from harness.topology import load_topology
from harness.waiting import poll_until

HOST_PORT_FREE = kind_module._host_port_free

FAKE_TOOL = r'''
import json, os, sys

tool = os.path.basename(sys.argv[0])
args = sys.argv[1:]
stdin = sys.stdin.read() if args[-2:] == ["-f", "-"] or "-i" in args else None
with open(os.environ["AGN_FAKE_LOG"], "a") as log:
    log.write(json.dumps({"argv": [tool] + args, "stdin": stdin}) + "\n")
state = os.environ["AGN_FAKE_STATE"]
fail = os.environ.get("AGN_FAKE_FAIL", "")
if fail and fail in " ".join([tool] + args):
    sys.stderr.write("failing as asked: " + fail + "\n")
    sys.exit(1)

def clusters():
    return sorted(os.listdir(state))

def answer_canned():
    answers = os.environ.get("AGN_FAKE_ANSWERS")
    if not answers or not os.path.exists(answers):
        return
    rules = json.load(open(answers))
    for rule in rules:
        if all(word in args for word in rule["match"]):
            out = rule.get("stdout", "")
            if "stdouts" in rule:  # answered in turn; the last one stays
                out = rule["stdouts"][0]
                if len(rule["stdouts"]) > 1:
                    rule["stdouts"].pop(0)
                    with open(answers + ".tmp", "w") as handle:
                        json.dump(rules, handle)
                    os.replace(answers + ".tmp", answers)
            if "turns" in rule:  # whole answers (stdout, stderr, rc) in turn; the last one stays
                turn = rule["turns"][0]
                if len(rule["turns"]) > 1:
                    rule["turns"].pop(0)
                    with open(answers + ".tmp", "w") as handle:
                        json.dump(rules, handle)
                    os.replace(answers + ".tmp", answers)
                rule = {**rule, **turn}
                out = turn.get("stdout", "")
                if turn.get("pass"):  # this turn does what the tool does without canned answers
                    return
            sys.stdout.write(out)
            sys.stderr.write(rule.get("stderr", ""))
            sys.exit(rule.get("rc", 0))

if tool == "docker":
    if args[:1] == ["info"]:
        rc = int(os.environ.get("AGN_FAKE_DOCKER_INFO_RC", "0"))
        sys.stderr.write("" if rc == 0 else "Cannot connect to the Docker daemon\n")
        sys.exit(rc)
    if args[:1] == ["exec"]:
        answer_canned()
    present = os.environ.get("AGN_FAKE_DOCKER_IMAGES")  # unset: every image is present
    if args[:2] == ["image", "inspect"]:
        sys.exit(0 if present is None or args[2] in present.split(",") else 1)
    if args[:2] == ["image", "ls"]:
        repository = args[-1]
        print("\n".join(i for i in (present or "").split(",") if i.split(":")[0] == repository))
    sys.exit(0)
if tool == "bash":  # the offline image builder
    sys.exit(0)
if tool == "kind":
    if args[:2] == ["get", "clusters"]:
        print("\n".join(clusters()) if clusters() else "No kind clusters found.")
    elif args[:2] == ["create", "cluster"]:
        answer_canned()
        config = args[args.index("--config") + 1]
        name = [line.split(":", 1)[1].strip() for line in open(config) if line.startswith("name:")][0]
        open(os.path.join(state, name), "w").close()
    elif args[:2] == ["delete", "cluster"]:
        name = args[args.index("--name") + 1]
        if os.path.exists(os.path.join(state, name)):
            os.remove(os.path.join(state, name))
    sys.exit(0)
# kubectl
answer_canned()
READY_POD = {"items": [{"metadata": {"name": "pod-1"}, "status": {"phase": "Running", "containerStatuses": [
    {"name": "gateway", "ready": True, "restartCount": 0, "state": {"running": {}}}]}}]}
if "--raw" in args:
    print("ok", end="")
elif "get-contexts" in args:
    print(os.environ.get("AGN_FAKE_CONTEXTS", "").replace(",", "\n"))
elif "get" in args and "deployments" in args:
    print("deployment.apps/agn-gateway")
elif "get" in args and "pods" in args:
    print(json.dumps(READY_POD))
elif "get" in args and "nodes" in args:
    kubeconfig = args[args.index("--kubeconfig") + 1] if "--kubeconfig" in args else ""
    site = os.path.basename(os.path.dirname(kubeconfig)) or "site-a"
    address = {"site-b": "172.18.0.3", "site-c": "172.18.0.4"}.get(site, "172.18.0.2")
    print(json.dumps({"items": [{"metadata": {"name": f"agn-t1-{site}-control-plane"},
                                 "status": {"addresses": [{"type": "Hostname", "address": site},
                                                          {"type": "InternalIP", "address": address}]}}]}))
elif "get" in args and "service" in args:
    print(json.dumps({"spec": {"type": "NodePort", "ports": [{"port": 8080, "nodePort": 31234}]}}))
elif "logs" in args:
    print("a log line of " + args[args.index("logs") + 1], flush=True)
    if "-f" in args:
        import threading
        threading.Event().wait()
elif "port-forward" in args:
    import ssl
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    pages_file = os.environ.get("AGN_FAKE_HTTP", "")
    pages = json.load(open(pages_file)) if pages_file and os.path.exists(pages_file) else {}

    class Handler(BaseHTTPRequestHandler):
        def _answer(self):
            default = ({"requests": 0, "metrics_requests": 0, "mcp_requests": 0} if self.path == "/admin/stats"
                       else {"requests": 0, "metrics": []})  # a fake backend's counters, as it answers them
            body = json.dumps(pages.get(self.path, default)).encode()
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        do_GET = do_POST = _answer
        def log_message(self, *a):
            pass
    tls = os.environ.get("AGN_FAKE_TLS_TARGET")
    for spec in [a for a in args if a.startswith(":")]:
        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls and tls in args:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(os.environ["AGN_FAKE_TLS_CERT"], os.environ["AGN_FAKE_TLS_KEY"])
            server.socket = context.wrap_socket(server.socket, server_side=True)
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

    def calls(self, image_queries: bool = False) -> list[list[str]]:
        """What ran, in order; the backend's questions about local images (`docker image ...`) only if asked."""
        return [entry["argv"] for entry in self.entries()
                if image_queries or entry["argv"][:2] != ["docker", "image"]]

    def answer(self, *rules: dict[str, Any]) -> None:
        """Canned kubectl answers, checked in order before the built-in ones (replacing earlier rules)."""
        (self.log.parent / "answers.json").write_text(json.dumps(list(rules)))

    def pages(self, pages: dict[str, Any]) -> None:
        """What port-forwarded servers started from now on answer, by path (JSON bodies)."""
        (self.log.parent / "http.json").write_text(json.dumps(pages))

    def entries(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Tools:
    found = Tools(tmp_path)
    # only the stand-ins are on PATH (they run under this interpreter)
    monkeypatch.setenv("PATH", str(found.bin))
    monkeypatch.setenv("AGN_FAKE_LOG", str(found.log))
    monkeypatch.setenv("AGN_FAKE_STATE", str(found.state))
    monkeypatch.setenv("AGN_FAKE_ANSWERS", str(tmp_path / "answers.json"))
    monkeypatch.setenv("AGN_FAKE_HTTP", str(tmp_path / "http.json"))
    limit = tmp_path / "max_user_instances"
    limit.write_text("512\n")
    monkeypatch.setattr(kind_module, "INOTIFY_INSTANCES", limit)
    monkeypatch.delenv("AGN_FAKE_FAIL", raising=False)
    monkeypatch.delenv("AGN_FAKE_DOCKER_IMAGES", raising=False)
    monkeypatch.delenv("AGN_KIND_NODE_IMAGE", raising=False)
    monkeypatch.delenv("AGN_KIND_ALLOW_PULL", raising=False)
    monkeypatch.delenv("AGN_FAKE_TLS_TARGET", raising=False)
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
def root(tmp_path: Path, ready_server: int, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout layout: kind configs per site mapping the admin NodePort to the ready server (which stands in
    for the node, so it already holds that host port: the host check is told the port is free)."""
    monkeypatch.setattr(kind_module, "_host_port_free", lambda protocol, port, address: True)
    repo = tmp_path / "repo"
    (repo / "manifests" / "crds").mkdir(parents=True)
    (repo / "manifests" / "overlays" / "kind").mkdir(parents=True)
    (repo / "reference").mkdir()
    (repo / "reference" / "Dockerfile").write_text("FROM scratch\n")
    (repo / "clusters" / "kind").mkdir(parents=True)
    for i, site in enumerate(("site-a", "site-b", "site-c")):
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
        ["kubectl", *kc, "kustomize", str(root / "manifests" / "overlays" / "kind")],
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
    # the Runner's record matches what ran
    assert [list(c) for c in backend.runner.calls if list(c[:2]) != ["docker", "image"]] == expected
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
    assert "/var/run/agn/overlay/routing-overlay.json" in json.dumps(gateway)
    _check_hop_clusters_are_mtls(backend, docs, gateway)

    before = len(tools.calls())
    backend.close()
    assert tools.calls()[before:] == [["kind", "delete", "cluster", "--name", "agn-t1-site-a"]]
    assert not (tools.state / "agn-t1-site-a").exists()


def _check_hop_clusters_are_mtls(backend: KindBackend, docs: list[dict[str, Any]], gateway: dict[str, Any]) -> None:
    """The standing gateway reaches the hop clusters at the fakes' mTLS port with the client certificate of
    its mounted Secret; the management cluster stays plain; each hop fake listens for mTLS from its Secret."""
    by_name = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    balancer = next(f for c in gateway["filter_chains"] for f in c["filters"] if f["filter"] == "load_balancer")
    clusters = {c["name"]: c for c in balancer["clusters"]}
    route = next(f for c in gateway["filter_chains"] for f in c["filters"] if f["filter"] == "intelligent_route")
    hop = ["provider-a", "provider-b", "provider-c", "provider-d"]
    assert route["provider_hop_clusters"] == hop
    for name in hop:
        assert clusters[name]["endpoints"] == [f"agn-fake-{name}.agn-system.svc.cluster.local:8444"]
        assert clusters[name]["tls"] == {"ca": {"ca_path": "/etc/agn/hop-tls/ca.crt"},
                                         "client_cert": {"cert_path": "/etc/agn/hop-tls/tls.crt",
                                                         "key_path": "/etc/agn/hop-tls/tls.key"},
                                         "sni": f"{name}.site-a.backend.grid.test", "verify": True}
    assert clusters["mgmt"] == {"name": "mgmt", "endpoints": ["agn-fake-mgmt.agn-system.svc.cluster.local:8000"]}
    # the Secret comes before the config that names its files
    order = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert order.index(("Secret", "agn-gateway-hop-tls")) < order.index(("ConfigMap", "agn-gateway-config"))
    hop_secret = {k: base64.b64decode(v) for k, v in by_name[("Secret", "agn-gateway-hop-tls")]["data"].items()}
    assert set(hop_secret) == {"tls.crt", "tls.key", "ca.crt"}
    assert hop_secret["ca.crt"] == backend.pki.ca_path.read_bytes()
    client = x509.load_pem_x509_certificate(hop_secret["tls.crt"])
    assert [a.value for a in client.subject.get_attributes_for_oid(x509.NameOID.ORGANIZATION_NAME)] == ["ai-grid"]

    for name in hop:
        pod = by_name[("Deployment", f"agn-fake-{name}")]["spec"]["template"]["spec"]
        container = pod["containers"][0]
        command = container["command"]
        assert command[command.index("--listen") + 1] == "0.0.0.0:8000"
        assert command[command.index("--mtls-listen"):] == [
            "--mtls-listen", "0.0.0.0:8444", "--tls-cert", "/etc/agn/mtls/tls.crt", "--tls-key",
            "/etc/agn/mtls/tls.key", "--client-ca", "/etc/agn/mtls/ca.crt"]
        assert {"containerPort": 8444, "name": "mtls"} in container["ports"]
        assert container["volumeMounts"] == [{"name": "mtls", "mountPath": "/etc/agn/mtls", "readOnly": True}]
        assert pod["volumes"] == [{"name": "mtls", "secret": {"secretName": f"agn-fake-{name}-mtls"}}]
        service = by_name[("Service", f"agn-fake-{name}")]["spec"]["ports"]
        assert service == [{"name": "http", "port": 8000, "targetPort": 8000},
                           {"name": "mtls", "port": 8444, "targetPort": 8444}]
        files = {k: base64.b64decode(v) for k, v in by_name[("Secret", f"agn-fake-{name}-mtls")]["data"].items()}
        assert files["ca.crt"] == backend.pki.ca_path.read_bytes() and set(files) == {"tls.crt", "tls.key", "ca.crt"}
        server = x509.load_pem_x509_certificate(files["tls.crt"])
        names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert set(names.get_values_for_type(x509.DNSName)) >= {
            f"{name}.site-a.backend.grid.test", f"agn-fake-{name}.agn-system.svc.cluster.local"}
    mgmt = by_name[("Deployment", "agn-fake-mgmt")]["spec"]["template"]["spec"]
    assert "--mtls-listen" not in mgmt["containers"][0]["command"] and "volumes" not in mgmt
    assert ("Secret", "agn-fake-mgmt-mtls") not in by_name
    assert by_name[("Service", "agn-fake-mgmt")]["spec"]["ports"] == [{"name": "http", "port": 8000,
                                                                      "targetPort": 8000}]
    # the provider gateway's fakes are private backends: plain HTTP
    provider = yaml.safe_load(by_name[("ConfigMap", "agn-provider-gateway-config")]["data"]["praxis.yaml"])
    private = next(f for c in provider["filter_chains"] for f in c["filters"] if f["filter"] == "load_balancer")
    assert {c["name"]: c["endpoints"] for c in private["clusters"]} == {
        name: [f"agn-fake-{name}.agn-system.svc.cluster.local:8000"] for name in [*hop, "mgmt"]}
    assert not [c for c in private["clusters"] if "tls" in c]


def test_the_image_is_built_once_for_every_backend_of_a_checkout(tools: Tools, root: Path,
                                                                  parts: SimpleNamespace) -> None:
    """The grids of one session (main, provider profile, each mesh) share one build of the checkout."""
    make_kind(parts, root, "single-site").prepare()
    make_kind(parts, root, "two-site").prepare()
    make_kind(parts, root, "two-site", image="vendor/gateway:1.2").prepare()
    assert [c for c in tools.calls() if c[0] == "docker"] == [build_call(root)]


def test_a_replacement_host_port_is_never_one_already_claimed(tools: Tools, root: Path, parts: SimpleNamespace,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel may hand a just-probed free port out twice; two mappings of one backend (two sites of a
    mesh) must still get two ports, or the second cluster cannot publish its own."""
    first = make_kind(parts, root, "two-site")
    second = make_kind(parts, root, "two-site")
    picks = iter([47001, 47001, 47002])
    monkeypatch.setattr(kind_module, "_free_port", lambda protocol, address: next(picks))
    try:
        assert first._claim("TCP", 31080, "127.0.0.1") == 31080
        assert first._claim("TCP", 31443, "127.0.0.1") == 31443
        moved = [second._claim("TCP", 31080, "127.0.0.1"), second._claim("TCP", 31443, "127.0.0.1")]
        assert moved == [47001, 47002], f"a claimed port was handed out again: {moved}"
    finally:
        first.close()
        second.close()


def test_a_host_port_another_process_holds_is_replaced_and_a_free_one_kept(
        tools: Tools, root: Path, parts: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process of the host (not a grid of this run) listens on a configured host port: kind would
    fail with "address already in use", so the port is replaced before the cluster is created."""
    monkeypatch.setattr(kind_module, "_host_port_free", HOST_PORT_FREE)  # the real host check, not the fixture's
    backend = make_kind(parts, root, "single-site")
    with socket.socket() as held, socket.socket() as probe:
        held.bind(("127.0.0.1", 0))
        held.listen()
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
        probe.close()  # the twin: a port nobody holds is kept as configured
        busy = held.getsockname()[1]
        try:
            assert backend._claim("TCP", free, "127.0.0.1") == free
            moved = backend._claim("TCP", busy, "127.0.0.1")
            assert moved != busy and moved > 0
        finally:
            backend.close()


def test_kind_create_failing_on_a_port_clash_is_retried_with_fresh_host_ports(
        tools: Tools, root: Path, parts: SimpleNamespace, ready_server: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A port taken between the check and the creation: `kind create` is run again with new host ports (the
    failed attempt's given back), and the site's port map follows."""
    picks = {"TCP": ready_server, "UDP": 47946}  # the admin port must still reach the stand-in node
    monkeypatch.setattr(kind_module, "_free_port", lambda protocol, address: picks[protocol])
    tools.answer({"match": ["create", "cluster"], "turns": [
        {"rc": 1, "stderr": "ERROR: failed to create cluster: listen tcp4 127.0.0.1:33080: bind: address already "
                            "in use\n"}, {"pass": True}]})
    backend = make_kind(parts, root, "single-site")
    try:
        backend.start()
        creates = [c for c in tools.calls() if c[:2] == ["kind", "create"]]
        assert len(creates) == 2
        (site,) = backend.sites
        config = yaml.safe_load((parts.workdir / "kube" / "site-a" / "kind.yaml").read_text())
        mapped = {m["containerPort"]: m["hostPort"] for m in config["nodes"][0]["extraPortMappings"]}
        assert mapped == {30901: ready_server, 30946: 47946}, mapped  # 40946 was configured
        assert site.host_ports == {30901: ready_server}
    finally:
        backend.close()
    assert port_clash("docker: Error response from daemon: driver failed: port is already allocated")
    assert not port_clash("ERROR: failed to create cluster: node image not found")


def test_sites_installing_at_once_share_one_certificate_authority(tools: Tools, root: Path, parts: SimpleNamespace,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Sites install in parallel threads and each issues certificates on first use of the backend's CA: they
    must all get the same one, the one whose ca.pem is on disk (two CAs made at once left pods with
    certificates of one and a CA file of the other, so every hop failed verification)."""
    from harness.backends.kube import backend as backend_module

    made: list[Any] = []

    class SlowPKI(backend_module.PortForwardPKI):  # widens the window between "none yet" and "made"
        def __init__(self, directory: Path) -> None:
            super().__init__(directory)
            made.append(self)
            threading.Event().wait(0.05)

    monkeypatch.setattr(backend_module, "PortForwardPKI", SlowPKI)
    backend = make_kind(parts, root, "two-site")
    start = threading.Barrier(6)
    seen: list[Any] = []

    def first_use() -> None:
        start.wait()
        seen.append(backend.pki)

    threads = [threading.Thread(target=first_use) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(made) == 1 and all(pki is made[0] for pki in seen), f"{len(made)} CAs were made"
    on_disk = x509.load_pem_x509_certificate(made[0].ca_path.read_bytes())
    issued = x509.load_pem_x509_certificate(made[0].server("probe", "127.0.0.1").cert.read_bytes())
    assert issued.issuer == on_disk.subject


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


def test_crds_not_yet_given_a_status_are_waited_for_again(tools: Tools, root: Path, parts: SimpleNamespace) -> None:
    """kubectl wait on a CRD created an instant ago can fail at once with '.status.conditions accessor error'
    (the API server has not written its status yet); found by a real kind run, where a mesh's third cluster
    failed to install. The wait is asked again until it succeeds; another failure ends the bring-up."""
    crds = str(root / "manifests" / "crds")
    racing = {"stderr": "error: .status.conditions accessor error: <nil> is of the type <nil>, expected "
                        "[]interface{}\n", "rc": 1}
    tools.answer({"match": ["--for=condition=Established"], "turns": [racing, racing, {"rc": 0}]})
    backend = make_kind(parts, root, "single-site")
    backend.start()
    backend.close()
    waits = [c for c in tools.calls() if "--for=condition=Established" in c]
    assert len(waits) == 3 and all(c[-2:] == ["-f", crds] for c in waits), waits
    assert any("--for=condition=Available" in c for c in tools.calls()), "the bring-up went on"

    tools.answer({"match": ["--for=condition=Established"], "stderr": "error: no matching resources\n", "rc": 1})
    refused = make_kind(parts, root, "single-site")
    with pytest.raises(CommandFailed, match="no matching resources"):
        refused.start()
    refused.close()
    assert len([c for c in tools.calls() if "--for=condition=Established" in c]) == len(waits) + 1, \
        "another failure is not asked again"


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
    with pytest.raises(EnvironmentProblem, match="agn-t1-site-a already exist"):
        backend.start()
    backend.close()
    assert not [c for c in tools.calls() if c[:2] in (["kind", "create"], ["kind", "delete"])]
    assert os.listdir(tools.state) == ["agn-t1-site-a"]


def test_providers_gateways_and_overlays_go_through_port_forwards_and_the_pod(
        tools: Tools, root: Path, parts: SimpleNamespace) -> None:
    backend = make_kind(parts, root, "single-site", image="img:1")
    backend.start()
    topology = load_topology("single-site")
    providers = backend.start_providers(0, topology.sites[0])
    provider = providers["provider-a"]
    assert isinstance(provider, KubeProvider)
    assert provider.address == "agn-fake-provider-a.agn-system.svc.cluster.local:8000"
    assert provider.mtls_address == "agn-fake-provider-a.agn-system.svc.cluster.local:8444"
    assert provider.sni == "provider-a.site-a.backend.grid.test"
    assert providers["mgmt"].mtls_address is None and providers["mgmt"].sni is None
    assert httpx.get(f"{provider.url}/admin/stats", timeout=5).status_code == 200
    kc = ["--kubeconfig", str(parts.workdir / "kube" / "site-a" / "kubeconfig")]
    assert ["kubectl", *kc, "--namespace", "agn-system", "port-forward", "--address", "127.0.0.1",
            "service/agn-fake-provider-a", ":8000"] in tools.calls()
    assert backend.cluster_url(f"{provider.url}/metrics") == f"http://{provider.address}/metrics"

    listen, admin, workdir = backend.allocate_gateway(0)
    assert (listen, admin) == ("0.0.0.0:8080", "0.0.0.0:9901")
    overlay_dir = workdir / "overlay"
    project(overlay_dir, {"routing-overlay.json": b'{"v": 1}'})
    ca = backend.pki.ca_path
    config = f"overlay: {overlay_dir / 'routing-overlay.json'}\nca: {ca}\n"
    before = len(backend.runner.calls)
    proc = backend.start_gateway("gateway-site-a-core", listen, admin, workdir, config, overlay_dir,
                                 env={"AGN_PROVIDER_TOKEN_0": "s3cret"})
    assert [list(c) for c in backend.runner.calls[before:]] == [
        ["kubectl", *kc, "apply", "--server-side", "--field-manager", "agn-conformance", "-f", "-"],
        ["kubectl", *kc, "apply", "-f", str(workdir / "kube.yaml")],
        ["kubectl", *kc, "--namespace", "agn-system", "get", "pods", "-l", "agn.grid/gateway=agn-gw-1", "-o", "json"],
        ["kubectl", *kc, "--namespace", "agn-system", "port-forward", "--address", "127.0.0.1",
         "deployment/agn-gw-1", ":8080", ":9901"],
        ["kubectl", *kc, "--namespace", "agn-system", "logs", "-f", "deployment/agn-gw-1", "-c", "gateway"],
    ]
    secrets_sent = json.loads(next(e["stdin"] for e in tools.entries() if e["argv"][-2:] == ["-f", "-"]))
    by_name = {d["metadata"]["name"]: d for d in secrets_sent["items"]}
    assert any(key.endswith("ca.pem") for key in by_name["agn-gw-1-files"]["data"])
    assert base64.b64decode(by_name["agn-gw-1-env"]["data"]["AGN_PROVIDER_TOKEN_0"]) == b"s3cret"
    manifest = (workdir / "kube.yaml").read_text()
    assert "s3cret" not in manifest and base64.b64encode(b"s3cret").decode() not in manifest  # no file holds it
    docs = {d["metadata"]["name"]: d for d in yaml.safe_load_all(manifest)}
    assert {d["kind"] for d in docs.values()} == {"ConfigMap", "Deployment"}
    rendered = docs["agn-gw-1-config"]["data"]["praxis.yaml"]
    assert "/var/run/agn/overlay/routing-overlay.json" in rendered and str(parts.workdir) not in rendered
    assert base64.b64decode(by_name["agn-gw-1-overlay-0"]["binaryData"]["part-0000"]) == b'{"v": 1}'
    pod = docs["agn-gw-1"]["spec"]["template"]["spec"]
    # the harness's bytes reach the gateway unvalidated: seeded before it starts, then written by exec
    assert [c["name"] for c in pod["initContainers"]] == ["overlay-seed"]
    assert [c["name"] for c in pod["containers"]] == ["overlay-writer", "gateway"]
    assert all("subPath" not in m for c in pod["containers"] for m in c.get("volumeMounts", []))
    assert httpx.get(f"{proc.admin_url}/ready", timeout=5).status_code == 200
    assert proc.process.running()  # the handle is the gateway container's log stream
    poll_until(lambda: proc.process.log_text(), lambda text: "a log line of -f" in text,
               what="the gateway log stream", timeout=10)

    project(overlay_dir, {"routing-overlay.json": b'{"v": 2, "bad": NaN}'})

    def mirrored() -> list[dict[str, Any]]:
        return [e for e in tools.entries() if "exec" in e["argv"]]

    written = poll_until(mirrored, bool, what="the overlay to be written into the pod", timeout=10)
    assert base64.b64decode(written[0]["stdin"]) == b'{"v": 2, "bad": NaN}'
    assert written[0]["argv"][:10] == ["kubectl", *kc, "--namespace", "agn-system", "exec", "-i",
                                       "deployment/agn-gw-1", "-c", "overlay-writer"]
    assert "harness.projection" in written[0]["argv"][-3]

    # a suite takes the file away (remove_overlay): so does the pod, and a later write puts it back
    (overlay_dir / "routing-overlay.json").unlink()
    removed = poll_until(lambda: [e for e in mirrored() if "rm" in e["argv"]], bool,
                         what="the overlay to be removed in the pod", timeout=10)
    assert removed[0]["argv"][-4:] == ["--", "rm", "-f", "/var/run/agn/overlay/routing-overlay.json"]
    project(overlay_dir, {"routing-overlay.json": b'{"v": 3}'})
    rewritten = poll_until(lambda: [e for e in mirrored() if e["stdin"] and b'"v": 3' in base64.b64decode(e["stdin"])],
                           bool, what="the overlay written again", timeout=10)
    assert len([e for e in mirrored() if "rm" in e["argv"]]) == 1 and rewritten

    backend.stop(proc.process)
    assert not proc.process.running()
    assert tools.calls()[-1] == ["kubectl", *kc, "--namespace", "agn-system", "delete",
                                 "deployment,service,configmap,secret", "-l", "agn.grid/gateway=agn-gw-1",
                                 "--ignore-not-found", "--wait=false"]
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


OFFLINE_NODE = "agn-conformance/kind-node:v1.31.0"
OFFLINE_PYTHON = "agn-conformance/python-base:bookworm"


def test_preflight_refuses_an_inotify_limit_too_low_for_kind_nodes(tools: Tools, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Linux's default 128 inotify instances: kube-proxy of a later cluster exits ('too many open files')."""
    limit = tmp_path / "low"
    limit.write_text("128\n")
    monkeypatch.setattr(kind_module, "INOTIFY_INSTANCES", limit)
    reason = preflight_kind(Runner())
    assert reason is not None and "fs.inotify.max_user_instances is 128" in reason and "sysctl -w" in reason
    monkeypatch.setenv("DOCKER_HOST", "tcp://engine.example:2376")  # another host's engine: not this limit
    assert preflight_kind(Runner()) is None
    monkeypatch.delenv("DOCKER_HOST")
    limit.write_text("512\n")  # the twin: kind's documented value is enough
    assert preflight_kind(Runner()) is None


def test_preflight_needs_a_local_node_image_and_says_how_to_build_one(tools: Tools, root: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing is pulled on a host without a registry: no node image on the engine is a reason to skip."""
    monkeypatch.setenv("AGN_FAKE_DOCKER_IMAGES", "python:3.11-slim-bookworm")
    reason = preflight_kind(Runner(), root=root)
    assert reason is not None and "no kind node image" in reason
    assert str(root / "clusters" / "kind" / "offline" / "build-images.sh") in reason
    # the twin: kind's own node image, or the offline build's, is enough
    for present in ("kindest/node:v1.31.0", OFFLINE_NODE):
        monkeypatch.setenv("AGN_FAKE_DOCKER_IMAGES", f"python:3.11-slim-bookworm,{present}")
        assert preflight_kind(Runner(), root=root) is None
    # a node image named by the option or the environment must itself be present
    monkeypatch.setenv("AGN_FAKE_DOCKER_IMAGES", f"python:3.11-slim-bookworm,{OFFLINE_NODE}")
    reason = preflight_kind(Runner(), node_image="vendor/node:1", root=root)
    assert reason is not None and "vendor/node:1 (--kind-node-image)" in reason
    monkeypatch.setenv("AGN_KIND_NODE_IMAGE", "vendor/node:2")
    reason = preflight_kind(Runner(), root=root)
    assert reason is not None and "vendor/node:2 ($AGN_KIND_NODE_IMAGE)" in reason
    monkeypatch.setenv("AGN_FAKE_DOCKER_IMAGES", "python:3.11-slim-bookworm,vendor/node:2")
    assert preflight_kind(Runner(), root=root) is None


def test_preflight_needs_the_project_image_or_a_base_to_build_it_on(tools: Tools, root: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGN_FAKE_DOCKER_IMAGES", OFFLINE_NODE)
    reason = preflight_kind(Runner(), root=root)
    assert reason is not None and "python:3.11-slim-bookworm" in reason and "--only python" in reason
    monkeypatch.setenv("AGN_FAKE_DOCKER_IMAGES", f"{OFFLINE_NODE},{OFFLINE_PYTHON}")
    assert preflight_kind(Runner(), root=root) is None
    reason = preflight_kind(Runner(), image="vendor/gateway:1.2", root=root)
    assert reason is not None and "vendor/gateway:1.2 (--image)" in reason
    monkeypatch.setenv("AGN_FAKE_DOCKER_IMAGES", f"{OFFLINE_NODE},vendor/gateway:1.2")
    assert preflight_kind(Runner(), image="vendor/gateway:1.2", root=root) is None


def test_the_node_image_is_set_on_every_node_and_kinds_default_is_left_alone(tools: Tools, root: Path,
                                                                            parts: SimpleNamespace,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    backend = make_kind(parts, root, "two-site", node_image="vendor/node:1")
    backend.prepare()
    for site in backend.topology.sites:
        config = yaml.safe_load(backend.kind_config(site)[0].read_text())
        assert [node["image"] for node in config["nodes"]] == ["vendor/node:1"]
    monkeypatch.setenv("AGN_FAKE_DOCKER_IMAGES", "python:3.11-slim-bookworm,kindest/node:v1.31.0")
    backend = make_kind(parts, root, "single-site")
    backend.prepare()
    config = yaml.safe_load(backend.kind_config(backend.topology.sites[0])[0].read_text())
    assert "image" not in config["nodes"][0]


def test_without_the_public_base_the_offline_builder_makes_the_project_image(tools: Tools, root: Path,
                                                                           parts: SimpleNamespace,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    tools.install("bash")
    monkeypatch.setenv("AGN_FAKE_DOCKER_IMAGES", f"{OFFLINE_NODE},{OFFLINE_PYTHON}")
    make_kind(parts, root, "single-site").prepare()
    builder = str(root / "clusters" / "kind" / "offline" / "build-images.sh")
    assert tools.calls() == [["bash", builder, "--only", "project", "--project-tag", DEFAULT_IMAGE]]


def test_an_image_build_that_fails_leaves_the_run_unjudged_and_is_not_retried(tools: Tools, root: Path,
                                                                              parts: SimpleNamespace,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing of the implementation ran when its image cannot be built: the grid is unavailable (the run
    exits 2), and every later grid of the session gets that answer instead of a rebuild per test."""
    tools.install("bash")
    monkeypatch.setenv("AGN_FAKE_DOCKER_IMAGES", f"{OFFLINE_NODE},{OFFLINE_PYTHON}")
    monkeypatch.setenv("AGN_FAKE_FAIL", "--only project")
    for _ in range(2):
        with pytest.raises(BackendUnavailable, match=f"the image {DEFAULT_IMAGE} could not be built: .*exited 1"):
            make_kind(parts, root, "single-site").prepare()
    assert len([c for c in tools.calls() if c[0] == "bash"]) == 1
    # the twin: a build that works is used
    monkeypatch.delenv("AGN_FAKE_FAIL")
    other = shutil.copytree(root, root.parent / "another-checkout")
    make_kind(parts, other, "single-site").prepare()
    builds = [c for c in tools.calls() if c[0] == "bash"]
    assert len(builds) == 2 and builds[-1][1] == str(other / "clusters" / "kind" / "offline" / "build-images.sh")


@pytest.mark.parametrize(("minor", "too_old"), [("23", True), ("24", False), ("31+", False), ("x", False)])
def test_preflight_refuses_a_kubectl_older_than_1_24(tools: Tools, minor: str, too_old: bool) -> None:
    """`kubectl patch --subresource=status` needs 1.24; an unreadable version is left to the first command."""
    version = {"clientVersion": {"major": "1", "minor": minor, "gitVersion": f"v1.{minor}.0"}}
    tools.answer({"match": ["version", "--client"], "stdout": json.dumps(version)})
    for reason in (preflight_kind(Runner()), kubectl_too_old(Runner())):
        if too_old:
            assert reason == ("kubectl 1.23 is too old: the cluster backends need kubectl >= 1.24 "
                              "(patch --subresource=status)")
        else:
            assert reason is None


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


def test_a_cluster_that_cannot_be_created_leaves_the_test_not_judged(tools: Tools, tmp_path: Path) -> None:
    """`kind create` fails for a reason of the host: the test using the grid is skipped as not judged (the
    report's notJudged outcome), never failed; the twin above (no kind on PATH) is a plain preflight skip."""
    suite = tmp_path / "suite"
    suite.mkdir()
    limit = tmp_path / "max_user_instances"  # this host's own limit is not what the test is about
    limit.write_text("512\n")
    (suite / "conftest.py").write_text((Path(__file__).resolve().parents[1] / "conftest.py").read_text()
                                       + "\nimport pathlib\nimport harness.backends.kube.kind as kind_backend\n"
                                       f"kind_backend.INOTIFY_INSTANCES = pathlib.Path({str(limit)!r})\n")
    (suite / "test_uses_grid.py").write_text("def test_x(grid):\n    pass\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
           "AGN_FAKE_FAIL": "create cluster", "AGN_KIND_NODE_IMAGE": "kindest/node:v1.31.0"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "--grid-backend", "kind", "--grid-image", "agn/reference:given", str(suite)],
                          capture_output=True, text=True, env=env, timeout=120, cwd=suite)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 skipped" in done.stdout and "not judged (environment)" in done.stdout, done.stdout
    assert "could not be made ready" in done.stdout and "failing as asked: create cluster" in done.stdout


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
    assert calls[:2] == [["kubectl", "version", "--client", "-o", "json"],
                         ["kubectl", "config", "get-contexts", "-o", "name"]]  # the preflight
    assert {c[1:3] == ["--context", "ctx-a"] or c[1:3] == ["--context", "ctx-b"] for c in calls[2:]} == {True}
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


# ------------------------------------------------------------------------------------ pods and the provider hop


def _pods(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    return {"items": [{"metadata": {"name": "p"}, "status": {"phase": "Running", "containerStatuses": list(containers),
                                                             "initContainerStatuses": list(init)}}]}


def test_pod_state_tells_ready_failed_and_pending_apart() -> None:
    ready = {"name": "gateway", "ready": True, "state": {"running": {}}}
    assert pod_state(_pods(ready)).phase == "ready"
    assert pod_state(None).phase == "pending" and pod_state({"items": []}).detail == "no pod yet"
    starting = {"name": "gateway", "ready": False, "state": {"running": {}}}
    assert pod_state(_pods(ready | {"name": "overlay-writer"}, starting)).phase == "pending"
    crashed = {"name": "gateway", "ready": False, "restartCount": 1,
               "state": {"waiting": {"reason": "CrashLoopBackOff"}},
               "lastState": {"terminated": {"exitCode": 2, "reason": "Error"}}}
    assert pod_state(_pods(crashed)) == PodState("failed", 2, "container gateway exited with 2 (Error)")
    done_init = {"name": "overlay-seed", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
    assert pod_state(_pods(ready, init=(done_init,))).phase == "ready"
    failed_init = {"name": "overlay-seed", "state": {"terminated": {"exitCode": 1}}}
    assert pod_state(_pods(starting, init=(failed_init,))).exit_code == 1
    pulling = {"name": "gateway", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}}}
    state = pod_state(_pods(pulling))
    assert (state.phase, state.exit_code) == ("failed", None) and "no such image" in state.detail


def test_a_gateway_that_exits_fails_its_start_with_the_exit_code_and_is_removed(
        tools: Tools, root: Path, parts: SimpleNamespace) -> None:
    backend = make_kind(parts, root, "single-site", image="img:1")
    backend.start()
    crashed = _pods({"name": "gateway", "ready": False, "state": {"terminated": {"exitCode": 3, "reason": "Error"}}})
    tools.answer({"match": ["get", "pods", "agn.grid/gateway=agn-gw-1"], "stdout": json.dumps(crashed)})
    listen, admin, workdir = backend.allocate_gateway(0)
    before = len(backend.runner.calls)
    with pytest.raises(GatewayStartFailed) as failure:
        backend.start_gateway("gw", listen, admin, workdir, "listen: x\n", workdir / "overlay")
    assert failure.value.exit_code == 3
    assert "a log line of deployment/agn-gw-1" in failure.value.log_tail
    calls = [list(c) for c in backend.runner.calls[before:]]
    assert not [c for c in calls if "port-forward" in c]
    assert calls[-1][-6:] == ["delete", "deployment,service,configmap,secret", "-l", "agn.grid/gateway=agn-gw-1",
                              "--ignore-not-found", "--wait=false"]
    docs = list(yaml.safe_load_all((workdir / "kube.yaml").read_text()))
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["gateway"]  # the config reads no overlay
    backend.close()


def test_provider_gateways_are_pods_with_their_files_and_a_nodeport_the_other_site_reaches(
        tools: Tools, root: Path, parts: SimpleNamespace) -> None:
    backend = make_kind(parts, root, "two-site", image="img:1")
    backend.host_reaches_nodes = False  # the stand-in's node addresses are not this host's (see the relay test)
    backend.start()
    grid = Grid(load_topology("two-site"), backend, frozenset())
    try:
        grid.start()
        a, b = grid.site("site-a"), grid.site("site-b")
        token = "tok-" + "x" * 20
        credential = CredentialRef("provider-b-token", "grid-site-b", "token")
        route = ProviderRoute("cand-1", "model-1", "model-b1", credential=credential)
        before = len(backend.runner.calls)
        peer = b.start_provider_gateway(trusted_peers=[TrustedPeer(organization="ai-grid")], routes=[route],
                                        tokens={credential: token})
        kc_b = ["kubectl", "--kubeconfig", str(parts.workdir / "kube" / "site-b" / "kubeconfig")]
        ns = ["--namespace", "agn-system"]
        calls = [list(c) for c in backend.runner.calls[before:]]
        assert [*kc_b, *ns, "get", "service", "agn-gw-1", "-o", "json"] in calls
        assert [*kc_b, "get", "nodes", "-o", "json"] in calls
        assert peer.url.startswith("https://127.0.0.1:") and peer.proc.process.running()

        workdir = peer.proc.config_path.parent
        docs = {d["kind"]: d for d in yaml.safe_load_all((workdir / "kube.yaml").read_text())}
        assert docs["Service"]["spec"]["type"] == "NodePort"
        assert docs["Service"]["spec"]["ports"] == [{"name": "listen", "port": 8080, "targetPort": 8080}]
        pod = docs["Deployment"]["spec"]["template"]["spec"]
        assert [c["name"] for c in pod["containers"]] == ["gateway"]
        config = (workdir / "praxis.yaml").read_text()
        assert str(parts.workdir) not in config and token not in config
        sent = [json.loads(e["stdin"]) for e in tools.entries() if e["stdin"] and "kind" in e["stdin"]]
        files = next(d for doc in sent for d in doc.get("items", [doc]) if d["metadata"]["name"] == "agn-gw-1-files")
        shipped = {key: base64.b64decode(value) for key, value in files["data"].items()}
        assert any(value.strip() == token.encode() for value in shipped.values())  # the credential file
        assert shipped["pki_ca.pem"] == backend.pki.ca_path.read_bytes()
        assert sum(1 for key in shipped if key.endswith((".crt", ".key"))) == 2  # the listener's cert and key
        for key in shipped:
            assert f"/var/run/agn/files/{key}" in config
        certificate = x509.load_pem_x509_certificate(next(v for k, v in shipped.items() if k.endswith(".crt")))
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert ipaddress.ip_address("127.0.0.1") in names.get_values_for_type(x509.IPAddress)
        assert peer.sni in names.get_values_for_type(x509.DNSName)
        assert grid.files_containing(token.encode()) == [
            p for p in grid.files_containing(token.encode()) if p.is_relative_to(grid.credentials_dir)]

        overlay = a.envelope([a.remote_candidate(peer, route)])
        edge = a.start_hop_consumer([peer], contract.encode(overlay), backend.pki.client("consumer-site-a"))
        edge_config = edge.proc.config_path.read_text()
        assert "172.18.0.3:31234" in edge_config  # site-b's node and the provider gateway's NodePort
        assert peer.proc.listen not in edge_config
        site_b = backend.sites[1]
        assert backend._peer_addresses(site_b, f"x {peer.proc.listen} y") == (
            "x agn-gw-1.agn-system.svc.cluster.local:8080 y")  # in its own cluster: the Service

        b.stop_gateway(peer)
        assert backend._peer_addresses(site_b, peer.proc.listen) == peer.proc.listen
    finally:
        grid.close()
        backend.close()


def test_consumer_gateways_reach_hop_clusters_at_the_fakes_mtls_port_with_a_shipped_client_certificate(
        tools: Tools, root: Path, parts: SimpleNamespace) -> None:
    backend = make_kind(parts, root, "single-site", image="img:1")
    backend.start()
    grid = Grid(load_topology("single-site"), backend, frozenset())
    try:
        grid.start()
        site = grid.site()
        before = len(tools.entries())
        gateway = site.gateway("core")
        client = gateway.hop_client
        assert client is not None and client.organization == "ai-grid"
        config = yaml.safe_load(gateway.proc.config_path.read_text())
        balancer = next(f for c in config["filter_chains"] for f in c["filters"] if f["filter"] == "load_balancer")
        clusters = {c["name"]: c for c in balancer["clusters"]}
        assert clusters["provider-a"]["endpoints"] == ["agn-fake-provider-a.agn-system.svc.cluster.local:8444"]
        assert clusters["provider-a"]["tls"]["sni"] == "provider-a.site-a.backend.grid.test"
        assert clusters["mgmt"] == {"name": "mgmt", "endpoints": ["agn-fake-mgmt.agn-system.svc.cluster.local:8000"]}
        tls = clusters["provider-a"]["tls"]
        paths = [tls["ca"]["ca_path"], tls["client_cert"]["cert_path"], tls["client_cert"]["key_path"]]
        assert all(path.startswith("/var/run/agn/files/") for path in paths), paths
        sent = [json.loads(e["stdin"]) for e in tools.entries()[before:] if e["stdin"] and "kind" in e["stdin"]]
        files = next(d for doc in sent for d in doc.get("items", [doc])
                     if d["metadata"]["name"].endswith("-files"))
        shipped = {f"/var/run/agn/files/{k}": base64.b64decode(v) for k, v in files["data"].items()}
        assert shipped[paths[0]] == backend.pki.ca_path.read_bytes()
        assert shipped[paths[1]] == client.cert.read_bytes() and shipped[paths[2]] == client.key.read_bytes()
    finally:
        grid.close()
        backend.close()


def test_the_tls_metrics_backend_runs_in_the_cluster_behind_a_verified_port_forward(
        tools: Tools, root: Path, parts: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:
    """It is ready when the harness reaches it through its port-forward and a pod of the site reaches its
    Service (kube-proxy programs a new Service after its pod is ready: on a real run the operator's first
    scrape was refused, and a correct operator excluded the provider)."""
    backend = make_kind(parts, root, "single-site", image="img:1")
    backend.start()
    pki_dir = parts.workdir / "pki"
    monkeypatch.setenv("AGN_FAKE_TLS_TARGET", "service/agn-tls-metrics")
    monkeypatch.setenv("AGN_FAKE_TLS_CERT", str(pki_dir / "kube-site-a-tls-metrics.crt"))
    monkeypatch.setenv("AGN_FAKE_TLS_KEY", str(pki_dir / "kube-site-a-tls-metrics.key"))
    refused = {"rc": 1, "stderr": "ConnectionRefusedError: [Errno 111] Connection refused\n"}
    tools.answer({"match": ["exec", "python3"], "turns": [refused, {"rc": 0}]})
    site = load_topology("single-site").sites[0]
    before = len(backend.runner.calls)
    provider = backend.start_tls_metrics(0, site)
    kc = ["kubectl", "--kubeconfig", str(parts.workdir / "kube" / "site-a" / "kubeconfig")]
    service = "agn-tls-metrics.agn-system.svc.cluster.local"
    probe = [*kc, "--namespace", "agn-system", "exec", f"deployment/agn-fake-{site.providers[0].name}", "-c",
             "fake-backend", "--", "python3", "-c", f"import socket; socket.create_connection(('{service}', 8443), "
             "2).close()"]
    assert [list(c) for c in backend.runner.calls[before:]] == [
        [*kc, "apply", "--server-side", "--field-manager", "agn-conformance", "-f", "-"],
        [*kc, "apply", "-f", str(parts.workdir / "kube" / "site-a" / "agn-tls-metrics.yaml")],
        [*kc, "--namespace", "agn-system", "rollout", "status", "deployment/agn-tls-metrics", "--timeout=300s"],
        [*kc, "--namespace", "agn-system", "port-forward", "--address", "127.0.0.1", "service/agn-tls-metrics",
         ":8443"],
        probe, probe,
    ]
    assert provider.url.startswith("https://127.0.0.1:")
    assert backend.cluster_url(provider.url) == "https://agn-tls-metrics.agn-system.svc.cluster.local:8443"
    docs = list(yaml.safe_load_all((parts.workdir / "kube" / "site-a" / "agn-tls-metrics.yaml").read_text()))
    command = docs[0]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[-4:] == ["--tls-cert", "/etc/agn/tls/tls.crt", "--tls-key", "/etc/agn/tls/tls.key"]
    backend.close()


def test_a_second_backend_of_the_process_moves_to_free_host_ports(tools: Tools, root: Path,
                                                                  parts: SimpleNamespace) -> None:
    first = make_kind(parts, root, "single-site")
    _, first_ports = first.kind_config(first.topology.sites[0])
    second = make_kind(parts, root, "two-site")
    second.run_id = "t2"
    _, second_ports = second.kind_config(second.topology.sites[0])
    _, third_ports = second.kind_config(second.topology.sites[1])
    assert len({first_ports[30901], second_ports[30901], third_ports[30901]}) == 3
    udp = yaml.safe_load((parts.workdir / "kube" / "site-a" / "kind.yaml").read_text())
    assert udp["nodes"][0]["extraPortMappings"][1]["hostPort"] != 40946  # taken by the first backend
    second.close()
    first.close()
    again = make_kind(parts, root, "single-site")
    assert again.kind_config(again.topology.sites[0])[1] == first_ports  # released on close
    again.close()


# ------------------------------------------------------------------------------------ the provider profile's grid


def _fake_config(tmp: Path, backend: str) -> SimpleNamespace:
    options = {"--grid-backend": backend, "--grid-keep": False, "--grid-seed": None, "--grid-image": "img:1",
               "--grid-kube-contexts": "site-a=ctx-a,site-b=ctx-b", "--grid-kind-node-image": None}
    return SimpleNamespace(getoption=options.__getitem__, stash={}, add_cleanup=lambda _f: None)


def _factory(tmp_path: Path, backend: str, impl: Any) -> Any:
    from harness.grid_factory import GridFactory

    factory_dir = tmp_path / "factory"
    factory_dir.mkdir(exist_ok=True)
    mktemp = SimpleNamespace(mktemp=lambda name: Path(tempfile.mkdtemp(prefix=name, dir=factory_dir)))
    return GridFactory(_fake_config(tmp_path, backend), mktemp, impl,  # type: ignore[arg-type]
                       SimpleNamespace(testsfailed=0))  # type: ignore[arg-type]


def test_provider_grid_on_kind_is_a_two_site_kind_grid_from_the_factory(
        tools: Tools, root: Path, parts: SimpleNamespace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.backends import registry

    made: list[KindBackend] = []
    kind = registry.BACKENDS["kind"]

    def make(*args: Any) -> Any:
        backend = kind.make(*args)
        backend.root, backend.run_id = root, "t1"  # this test's checkout (its ready server), fixed names
        made.append(backend)
        return backend

    monkeypatch.setitem(registry.BACKENDS, "kind", registry.ClusterBackendKind(kind.preflight, make))
    impl = SimpleNamespace(gateway=SimpleNamespace(startup_timeout_s=10), features=frozenset())
    with _factory(tmp_path, "kind", impl).open("two-site", purpose="provider grid") as grid:
        assert [b.name for b in made] == ["kind"] and grid.backend is made[0]
        assert sorted(grid.sites) == ["site-a", "site-b"] and grid.topology.name == "two-site"
        work = made[0].workdir
        calls = tools.calls()
        for site in ("site-a", "site-b"):
            assert ["kind", "create", "cluster", "--config", str(work / "kube" / site / "kind.yaml"),
                    "--kubeconfig", str(work / "kube" / site / "kubeconfig")] in calls
            assert ["kind", "load", "docker-image", "img:1", "--name", f"agn-t1-{site}"] in calls
        assert not [c for c in calls if c[0] == "docker" and c[1] == "build"]  # --grid-image was given
        assert grid.site("site-b").providers["model-b1"].url.startswith("http://127.0.0.1:")
    assert sorted(c for c in tools.calls() if c[:2] == ["kind", "delete"]) == [
        ["kind", "delete", "cluster", "--name", "agn-t1-site-a"],
        ["kind", "delete", "cluster", "--name", "agn-t1-site-b"]]


def test_the_factory_skips_with_the_reason_a_cluster_backend_cannot_run(
        tools: Tools, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    impl = SimpleNamespace(features=frozenset(), gateway=SimpleNamespace())
    tools.remove("kind")
    with pytest.raises(pytest.skip.Exception, match="needs kind on PATH"), \
            _factory(tmp_path, "kind", impl).open("two-site", purpose="provider grid"):
        pass
    monkeypatch.setenv("AGN_FAKE_CONTEXTS", "ctx-a,ctx-b")
    busy = _factory(tmp_path, "existing", impl)
    busy._open.append(("grid", object()))  # the session's main grid is open on the user's clusters
    with pytest.raises(pytest.skip.Exception, match="into the clusters the grid is using"), \
            busy.open("two-site", purpose="provider grid"):
        pass


def test_a_provider_gateway_listener_is_reached_through_a_relay_to_its_node_port(
        tools: Tools, root: Path, parts: SimpleNamespace, ready_server: int) -> None:
    """kind's nodes are on the host's Docker network: the listener goes through a loopback relay to the
    node's NodePort (a port-forward exits at the first connection the gateway breaks off); the admin port
    stays on the port-forward. Here the node is 127.0.0.1 and its NodePort a loopback server."""
    backend = make_kind(parts, root, "two-site", image="img:1")
    backend.start()
    nodes = {"items": [{"metadata": {"name": "node"}, "status": {"addresses": [
        {"type": "InternalIP", "address": "127.0.0.1"}]}}]}
    service = {"spec": {"type": "NodePort", "ports": [{"port": 8080, "nodePort": ready_server}]}}
    tools.answer({"match": ["get", "nodes"], "stdout": json.dumps(nodes)},
                 {"match": ["get", "service", "agn-gw-1"], "stdout": json.dumps(service)})
    listen, admin, workdir = backend.allocate_gateway(1)
    before = len(backend.runner.calls)
    proc = backend.start_gateway("gw", listen, admin, workdir, "listen: x\n", workdir / "overlay", scheme="https")
    try:
        forwards = [list(c) for c in backend.runner.calls[before:] if "port-forward" in c]
        assert len(forwards) == 1 and forwards[0][-2:] == ["deployment/agn-gw-1", ":9901"]
        host, port = proc.listen.rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) != ready_server
        reply = httpx.get(f"http://{proc.listen}/ready", timeout=5)  # through the relay to the "NodePort"
        assert reply.status_code == 200
    finally:
        backend.stop(proc.process)
        backend.close()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://{proc.listen}/ready", timeout=5)  # the relay is closed with its gateway
