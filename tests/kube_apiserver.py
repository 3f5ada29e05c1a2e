"""A real Kubernetes API server (etcd + kube-apiserver) on loopback for the adapter and manifest tests.

No kubelet, scheduler or controller manager runs: objects are stored, validated (OpenAPI and CRD
schemas with their CEL rules), authorised by RBAC and watched exactly as in a cluster, but no pod ever
starts. That is the part of a cluster the Kubernetes adapters and the harness's kubectl calls talk to.

The binaries are found the way controller-runtime's envtest finds them: the directory in
`KUBEBUILDER_ASSETS` (as `setup-envtest use -p path` prints), else `etcd` and `kube-apiserver` on PATH.
Where neither has them the tests using `KubeApiServer` skip with that reason.

TLS is real: the serving certificate comes from a trustme CA, the admin authenticates with a static
token (group system:masters), and service-account tokens are minted by the server's TokenRequest API
so a component can run with exactly the rights its RBAC grants.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import trustme
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from harness.waiting import poll_until

BINARIES = ("etcd", "kube-apiserver")
START_SECONDS = 90.0


class ServerExited(RuntimeError):
    """etcd or kube-apiserver ended while the tests needed it."""


def find_binaries() -> dict[str, Path] | str:
    """Paths of etcd and kube-apiserver, or the reason they are not available."""
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    found: dict[str, Path] = {}
    for name in BINARIES:
        candidate = Path(assets) / name if assets else None
        if candidate is not None and os.access(candidate, os.X_OK):
            found[name] = candidate
            continue
        on_path = shutil.which(name)
        if on_path:
            found[name] = Path(on_path)
    missing = [name for name in BINARIES if name not in found]
    if missing:
        where = f"KUBEBUILDER_ASSETS={assets}" if assets else "PATH (KUBEBUILDER_ASSETS unset)"
        return (f"no {' or '.join(missing)} in {where}: a real API server needs etcd and kube-apiserver "
                "binaries, e.g. from `setup-envtest use -p path`")
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class KubeApiServer:
    """A running etcd + kube-apiserver pair; `kubeconfig()` writes configs for the admin or a service account."""

    workdir: Path
    url: str
    ca_pem: Path
    admin_token: str
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @classmethod
    @contextlib.contextmanager
    def running(cls, workdir: Path, binaries: dict[str, Path]) -> Iterator[KubeApiServer]:
        """Start both servers, wait until /readyz answers ok, and stop both afterwards, pass or fail."""
        workdir.mkdir(parents=True, exist_ok=True)
        ca = trustme.CA()
        serving = ca.issue_cert("127.0.0.1", "localhost", "kubernetes.default.svc")
        cert, key = workdir / "serving.crt", workdir / "serving.key"
        serving.cert_chain_pems[0].write_to_path(str(cert))
        for extra in serving.cert_chain_pems[1:]:
            extra.write_to_path(str(cert), append=True)
        serving.private_key_pem.write_to_path(str(key))
        ca_pem = workdir / "ca.crt"
        ca.cert_pem.write_to_path(str(ca_pem))
        sa_key = workdir / "sa.key"
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        sa_key.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                 serialization.NoEncryption()))
        sa_pub = workdir / "sa.pub"
        sa_pub.write_bytes(private.public_key().public_bytes(serialization.Encoding.PEM,
                                                             serialization.PublicFormat.SubjectPublicKeyInfo))
        admin_token = secrets.token_hex(16)
        tokens = workdir / "tokens.csv"
        tokens.write_text(f'{admin_token},agn-admin,agn-admin,"system:masters"\n')
        etcd_port, peer_port, api_port = _free_port(), _free_port(), _free_port()
        server = cls(workdir, f"https://127.0.0.1:{api_port}", ca_pem, admin_token)
        logs = workdir / "logs"
        logs.mkdir(exist_ok=True)
        try:
            server._spawn("etcd", [
                str(binaries["etcd"]), "--data-dir", str(workdir / "etcd"), "--unsafe-no-fsync",
                "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
                "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
                "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
                "--initial-cluster", f"default=http://127.0.0.1:{peer_port}",
            ], logs)
            server._spawn("kube-apiserver", [
                str(binaries["kube-apiserver"]), "--etcd-servers", f"http://127.0.0.1:{etcd_port}",
                "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
                "--secure-port", str(api_port), "--tls-cert-file", str(cert), "--tls-private-key-file", str(key),
                "--token-auth-file", str(tokens), "--authorization-mode", "RBAC",
                "--service-account-issuer", "https://kubernetes.default.svc",
                "--service-account-key-file", str(sa_pub), "--service-account-signing-key-file", str(sa_key),
                "--service-cluster-ip-range", "10.96.0.0/24", "--disable-admission-plugins", "ServiceAccount",
                "--cert-dir", str(workdir / "certs"),
            ], logs)
            server._await_ready()
            yield server
        finally:
            server.stop()

    def _spawn(self, name: str, argv: list[str], logs: Path) -> None:
        log = (logs / f"{name}.log").open("wb")
        self.processes.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL))
        log.close()

    def _await_ready(self) -> None:
        context = ssl.create_default_context(cafile=str(self.ca_pem))

        def probe() -> str:
            for proc in self.processes:
                if proc.poll() is not None:
                    raise ServerExited(f"{proc.args[0]} exited with {proc.returncode} while starting:\n"
                                       f"{self.log_tail()}")
            answer = httpx.get(f"{self.url}/readyz", verify=context, timeout=2.0,
                               headers={"Authorization": f"Bearer {self.admin_token}"})
            return f"{answer.status_code} {answer.text[:200]!r}"

        poll_until(probe, lambda seen: seen.startswith("200 "), timeout=START_SECONDS, interval=0.2,
                   max_interval=1.0, what="kube-apiserver to answer /readyz with 200", fatal=(ServerExited,))

    def log_tail(self, lines: int = 30) -> str:
        parts = []
        for path in sorted((self.workdir / "logs").glob("*.log")):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {path.name} ---\n" + "\n".join(text))
        return "\n".join(parts)

    def stop(self) -> None:
        for proc in reversed(self.processes):
            if proc.poll() is None:
                proc.terminate()
        for proc in self.processes:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self.processes.clear()

    # ------------------------------------------------------------------------------ clients

    def kubeconfig(self, name: str, token: str | None = None) -> Path:
        """A kubeconfig for the admin (no token given) or for the bearer of `token`."""
        ca = base64.b64encode(self.ca_pem.read_bytes()).decode()
        doc: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Config", "current-context": name,
            "clusters": [{"name": "envtest", "cluster": {"server": self.url, "certificate-authority-data": ca}}],
            "users": [{"name": name, "user": {"token": token or self.admin_token}}],
            "contexts": [{"name": name, "context": {"cluster": "envtest", "user": name}}],
        }
        path = self.workdir / f"{name}.kubeconfig"
        path.write_text(yaml.safe_dump(doc))
        return path

    def kubectl(self, *args: str, input: str | None = None, kubeconfig: Path | None = None,
                check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run the real kubectl against this server (the admin unless another kubeconfig is given)."""
        config = kubeconfig or self.kubeconfig("admin")
        done = subprocess.run(["kubectl", "--kubeconfig", str(config), *args], input=input, text=True,
                              capture_output=True, timeout=60)
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
        return done

    def json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def service_account_token(self, namespace: str, name: str) -> str:
        """A token for the service account through the TokenRequest API (the account must exist)."""
        return self.kubectl("--namespace", namespace, "create", "token", name, "--duration", "1h").stdout.strip()


__all__ = ["KubeApiServer", "find_binaries"]
