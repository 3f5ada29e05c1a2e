"""The fake-backend group (`python -m harness.fakes.group`): several backends in one process, each with its
own listener, state and admin API, started and stopped as the local backend starts a site's fakes."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from harness.pki import GridPKI, client_context
from tests.test_fake_backend import _child, _port_is_free, _read_lines

DEADLINE_S = 20.0


def _group(listing: Path) -> contextlib.AbstractContextManager[subprocess.Popen[bytes]]:
    return _child([str(listing)], module="harness.fakes.group")


def _write(tmp_path: Path, argv_lists: object) -> Path:
    listing = tmp_path / "fakes.json"
    listing.write_text(json.dumps(argv_lists))
    return listing


def test_group_serves_each_backend_with_its_own_state_and_stops_cleanly(tmp_path: Path) -> None:
    listing = _write(tmp_path, [["--name", "one", "--site", "east", "--listen", "127.0.0.1:0"],
                                ["--name", "two", "--site", "west", "--listen", "127.0.0.1:0", "--model", "m2"]])
    with _group(listing) as process:
        lines = _read_lines(process, 3, time.monotonic() + DEADLINE_S)
        assert lines[2] == "ALL-LISTENING", lines
        addresses = {}
        for line in lines[:2]:
            word, name, address = line.split(" ")
            assert word == "LISTENING", line
            addresses[name] = address
        assert set(addresses) == {"one", "two"}
        one = httpx.Client(base_url=f"http://{addresses['one']}", timeout=10.0)
        two = httpx.Client(base_url=f"http://{addresses['two']}", timeout=10.0)
        with one, two:
            assert one.get("/v1/models").headers["x-agn-backend"] == "one"
            assert two.get("/v1/models").headers["x-agn-site"] == "west"
            assert [m["id"] for m in two.get("/v1/models").json()["data"]] == ["m2"]
            # state is per backend: a failure injected into one leaves the other serving
            assert one.post("/admin/config", json={"error_status": 503}).status_code == 200
            assert one.post("/v1/chat/completions", json={"model": "m"}).status_code == 503
            assert two.post("/v1/chat/completions", json={"model": "m2"}).status_code == 200
            assert one.get("/admin/stats").json()["requests"] == 1
            assert two.get("/admin/stats").json()["requests"] == 1
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    for address in addresses.values():
        host, port = address.rsplit(":", 1)
        assert _port_is_free(host, int(port)), f"{address} still bound after the group exited"


def test_group_backend_with_mtls_requires_a_grid_client_certificate(tmp_path: Path) -> None:
    pki = GridPKI(tmp_path / "pki")
    server = pki.server("fake", "127.0.0.1", "fake.test")
    listing = _write(tmp_path, [["--name", "hop", "--site", "east", "--listen", "127.0.0.1:0",
                                 "--mtls-listen", "127.0.0.1:0", "--tls-cert", str(server.cert),
                                 "--tls-key", str(server.key), "--client-ca", str(pki.ca_path)]])
    with _group(listing) as process:
        lines = _read_lines(process, 3, time.monotonic() + DEADLINE_S)
        word, name, mtls = lines[0].split(" ")
        assert (word, name) == ("LISTENING-MTLS", "hop"), lines
        client = pki.client("consumer")
        context = client_context(pki.ca_path, client)
        with httpx.Client(base_url=f"https://{mtls}", verify=context, timeout=10.0,
                          headers={"host": "fake.test"}) as verified:
            assert verified.get("/v1/models").headers["x-agn-backend"] == "hop"


@pytest.mark.parametrize(("argv_lists", "named"), [
    ([["--name", "one", "--site", "east", "--listen", "127.0.0.1:0"], ["--name", "bad name", "--site", "x",
                                                                     "--listen", "127.0.0.1:0"]], "[1]"),
    ([["--name", "one", "--site", "east", "--listen", "127.0.0.1:0"],
      ["--name", "one", "--site", "west", "--listen", "127.0.0.1:0"]], "repeated: one"),
    ([], "non-empty list"),
    ([["--name", 3]], "[0] must be a list of strings"),
], ids=["bad-backend-named-by-index", "duplicate-name", "empty", "not-strings"])
def test_group_refuses_a_bad_listing_naming_what_is_wrong(tmp_path: Path, argv_lists: object, named: str) -> None:
    with _group(_write(tmp_path, argv_lists)) as process:
        assert process.wait(timeout=DEADLINE_S) == 2
        assert process.stderr is not None
        assert named in process.stderr.read().decode()
    # the twin: the first entry alone is served
    good = _write(tmp_path, [["--name", "one", "--site", "east", "--listen", "127.0.0.1:0"]])
    with _group(good) as process:
        assert _read_lines(process, 2, time.monotonic() + DEADLINE_S)[1] == "ALL-LISTENING"


def test_group_that_cannot_bind_closes_the_others_and_exits_1(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        listing = _write(tmp_path, [["--name", "one", "--site", "east", "--listen", "127.0.0.1:0"],
                                    ["--name", "two", "--site", "east", "--listen", f"127.0.0.1:{port}"]])
        with _group(listing) as process:
            first = _read_lines(process, 1, time.monotonic() + DEADLINE_S)[0]
            assert process.wait(timeout=DEADLINE_S) == 1
            assert process.stderr is not None and "two: cannot listen" in process.stderr.read().decode()
    host, first_port = first.split(" ")[2].rsplit(":", 1)
    assert _port_is_free(host, int(first_port))
