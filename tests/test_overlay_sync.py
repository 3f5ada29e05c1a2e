"""overlay-sync in-process: ConfigMap reading, validation outcomes, kubelet-style delivery, metrics."""

from __future__ import annotations

import base64
import copy
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from harness import contract
from reference.files import DATA_LINK
from reference.overlay_sync import FileConfigMapSource, OverlaySyncer, SourceError, project
from reference.overlay_sync.cli import parse_args, parse_scope
from reference.overlay_sync.source import payload_from_configmap

SCOPE = contract.ScopeSpec(network="grid-a", gateway="gw", namespace="ns", local_site="site-a")
NAME = "routing-overlay.json"


def envelope(*names: str, generation: int = 1) -> dict[str, Any]:
    cands = [contract.candidate(name, "site-a", f"cluster-{name}") for name in names or ("m1",)]
    return contract.envelope(cands, SCOPE, generation=generation)


def write_configmap(path: Path, overlay: bytes | None, extra: dict[str, Any] | None = None) -> None:
    """Write the ConfigMap object the operator's dir sink produces, atomically (temp file + rename)."""
    data: dict[str, str] = {}
    if overlay is not None:
        data = {"routing-overlay.json": overlay.decode(), "routing-config.json": overlay.decode()}
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "grid-a-gw-overlay", "namespace": "ns", "annotations": {"grid.praxis.fast/x": "1"}},
        "data": data,
    }
    doc.update(extra or {})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.dump(doc, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper)))
    os.replace(tmp, path)


def metric(syncer: OverlaySyncer, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(syncer.metrics.render().decode()):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    raise AssertionError(f"no sample {name}{labels}")


@pytest.fixture
def paths(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "cm" / "configmap.yaml", tmp_path / "overlay"


def make_syncer(paths: tuple[Path, Path], scope: dict[str, str] | None = None) -> OverlaySyncer:
    cm, target = paths
    return OverlaySyncer(FileConfigMapSource(cm), target, expected_scope=scope)


def data_dirs(target: Path) -> list[str]:
    return sorted(p.name for p in target.iterdir() if p.name.startswith("..2"))


# --- projection ---------------------------------------------------------------------------------


def test_projection_has_the_kubelet_layout_and_removes_older_data_dirs(tmp_path: Path) -> None:
    first = project(tmp_path, NAME, b"one")
    assert os.readlink(tmp_path / DATA_LINK) == first.name
    assert os.readlink(tmp_path / NAME) == f"{DATA_LINK}/{NAME}"
    assert (tmp_path / NAME).read_bytes() == b"one"
    assert first.name.startswith("..") and first.name[2:6].isdigit()
    second = project(tmp_path, NAME, b"two")
    assert os.readlink(tmp_path / DATA_LINK) == second.name
    assert (tmp_path / NAME).read_bytes() == b"two"
    # The replaced dir stays for readers that resolved ..data just before the swap, until the next delivery.
    assert data_dirs(tmp_path) == sorted([first.name, second.name])
    third = project(tmp_path, NAME, b"three")
    assert not first.exists() and (tmp_path / NAME).read_bytes() == b"three"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([DATA_LINK, NAME, second.name, third.name])


def test_projection_replaces_a_plain_file_and_clears_leftover_data_dirs(tmp_path: Path) -> None:
    (tmp_path / NAME).write_bytes(b"plain")
    (tmp_path / "..2020_01_01_00_00_00.leftover").mkdir()
    data_dir = project(tmp_path, NAME, b"new")
    assert (tmp_path / NAME).is_symlink() and (tmp_path / NAME).read_bytes() == b"new"
    assert data_dirs(tmp_path) == [data_dir.name]


def test_projection_refuses_names_that_would_collide_with_the_layout(tmp_path: Path) -> None:
    for bad in ("..data", "a/b", ""):
        with pytest.raises(ValueError, match="plain name"):
            project(tmp_path, bad, b"x")


def test_readers_never_see_a_partial_or_missing_file(tmp_path: Path) -> None:
    payloads = [bytes([65 + i]) * (200_000 + i) for i in range(6)]
    project(tmp_path, NAME, payloads[0])
    seen: list[str] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            try:
                data = (tmp_path / NAME).read_bytes()
            except OSError as exc:
                seen.append(f"error {exc}")
                continue
            if data not in payloads:
                seen.append(f"partial read of {len(data)} bytes")

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(60):
            project(tmp_path, NAME, payloads[i % len(payloads)])
    finally:
        done.set()
        thread.join()
    assert seen == []
    assert len(data_dirs(tmp_path)) == 2


# --- source -------------------------------------------------------------------------------------


def test_source_reads_data_key_then_legacy_key_then_binary_data(tmp_path: Path) -> None:
    body = contract.encode(envelope())
    cm = tmp_path / "cm.yaml"
    write_configmap(cm, body)
    payload = FileConfigMapSource(cm).read()
    assert (payload.data, payload.key, payload.name, payload.namespace) == (
        body, "routing-overlay.json", "grid-a-gw-overlay", "ns"
    )
    legacy_only = {"kind": "ConfigMap", "data": {"routing-config.json": body.decode()}}
    assert payload_from_configmap(legacy_only, "routing-overlay.json").key == "routing-config.json"
    binary = {"kind": "ConfigMap", "binaryData": {"routing-overlay.json": base64.b64encode(body).decode()}}
    assert payload_from_configmap(binary, "routing-overlay.json").data == body


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("- a list", "does not hold a mapping"),
        ({"kind": "Secret", "data": {}}, "expected ConfigMap"),
        ({"kind": "ConfigMap", "data": {"other": "x"}}, "no data key 'routing-overlay.json'"),
        ({"kind": "ConfigMap", "data": {"routing-overlay.json": 5}}, "is not a string"),
        ({"kind": "ConfigMap", "binaryData": {"routing-overlay.json": "!!"}}, "not valid base64"),
    ],
)
def test_source_names_what_is_wrong_with_the_configmap(tmp_path: Path, doc: Any, message: str) -> None:
    cm = tmp_path / "cm.yaml"
    cm.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    with pytest.raises(SourceError, match=message):
        FileConfigMapSource(cm).read()


def test_source_reports_missing_and_non_yaml_files(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="cannot read"):
        FileConfigMapSource(tmp_path / "absent.yaml").read()
    (tmp_path / "bad.yaml").write_text("data: [unclosed")
    with pytest.raises(SourceError, match="not YAML"):
        FileConfigMapSource(tmp_path / "bad.yaml").read()


# --- sync outcomes ------------------------------------------------------------------------------


def test_accepted_revision_is_delivered_and_ready(paths: tuple[Path, Path]) -> None:
    cm, target = paths
    syncer = make_syncer(paths, SCOPE.as_dict())
    assert not syncer.ready and "no sync attempt" in syncer.status()["reason"]
    doc = envelope("m1", generation=4)
    write_configmap(cm, contract.encode(doc))
    result = syncer.sync_once()
    assert (result.outcome, result.revision, result.generation) == ("accepted", contract.revision_of(doc), 4)
    assert (target / NAME).read_bytes() == contract.encode(doc)
    assert os.readlink(target / NAME) == f"{DATA_LINK}/{NAME}"
    assert syncer.ready and syncer.status()["revision"] == contract.revision_of(doc)
    assert metric(syncer, "grid_overlay_sync_syncs_total", outcome="accepted") == 1
    assert metric(syncer, "grid_overlay_sync_delivered_generation") == 4
    assert metric(syncer, "grid_overlay_sync_ready") == 1
    assert metric(syncer, "grid_overlay_sync_last_success_timestamp_seconds") > 0


def test_same_revision_is_unchanged_and_not_rewritten(paths: tuple[Path, Path]) -> None:
    cm, target = paths
    syncer = make_syncer(paths)
    write_configmap(cm, contract.encode(envelope("m1", generation=1)))
    assert syncer.sync_once().outcome == "accepted"
    before = data_dirs(target)
    # A re-render of identical routing state: new generation and timestamp, same revision.
    write_configmap(cm, contract.encode(envelope("m1", generation=2)))
    assert syncer.sync_once().outcome == "unchanged"
    assert data_dirs(target) == before
    assert json.loads((target / NAME).read_bytes())["provenance"]["source_generation"] == 1
    assert metric(syncer, "grid_overlay_sync_syncs_total", outcome="unchanged") == 1
    assert metric(syncer, "grid_overlay_sync_syncs_total", outcome="accepted") == 1


def test_new_revision_replaces_the_file(paths: tuple[Path, Path]) -> None:
    cm, target = paths
    syncer = make_syncer(paths)
    write_configmap(cm, contract.encode(envelope("m1")))
    syncer.sync_once()
    second = envelope("m1", "m2", generation=2)
    write_configmap(cm, contract.encode(second))
    assert syncer.sync_once().outcome == "accepted"
    assert json.loads((target / NAME).read_bytes())["revision"] == second["revision"]
    assert len(data_dirs(target)) == 2


def tampered(doc: dict[str, Any]) -> bytes:
    bad = copy.deepcopy(doc)
    bad["overlay"]["candidates"][0]["name"] = "changed-after-sealing"
    return contract.encode(bad)


@pytest.mark.parametrize(
    ("body", "scope", "reason"),
    [
        (tampered(envelope("m1", "m2")), None, "digest_mismatch"),
        (b"{not json", None, "invalid_json"),
        (b" " * (contract.MAX_OVERLAY_BYTES + 1), None, "too_large"),
        (contract.encode(envelope("m1", "m2")), {"gateway": "other-gw"}, "scope_mismatch"),
        (contract.encode(contract.legacy([contract.candidate("m", "s", "c")], "s")), {"network": "grid-a"},
         "legacy_not_allowed"),
    ],
)
def test_invalid_revision_is_rejected_and_the_last_good_file_stays(
    paths: tuple[Path, Path], body: bytes, scope: dict[str, str] | None, reason: str
) -> None:
    cm, target = paths
    syncer = make_syncer(paths, scope if scope is None else {**scope})
    good = envelope("m1") if scope is None else contract.envelope(
        [contract.candidate("m1", "site-a", "c1")],
        contract.ScopeSpec("grid-a", scope.get("gateway", "gw"), "ns", "site-a"),
    )
    write_configmap(cm, contract.encode(good))
    assert syncer.sync_once().outcome == "accepted"
    write_configmap(cm, body)
    result = syncer.sync_once()
    assert (result.outcome, result.reason) == ("rejected", reason), result
    assert (target / NAME).read_bytes() == contract.encode(good)
    assert syncer.ready and syncer.status()["last_reason"] == reason
    assert metric(syncer, "grid_overlay_sync_rejections_total", reason=reason) == 1
    assert metric(syncer, "grid_overlay_sync_syncs_total", outcome="rejected") == 1
    assert metric(syncer, "grid_overlay_sync_degraded") == 1


def test_unreadable_configmap_is_a_read_error_that_keeps_the_file(paths: tuple[Path, Path]) -> None:
    cm, target = paths
    syncer = make_syncer(paths)
    first = syncer.sync_once()
    assert first.outcome == "read_error" and "cannot read" in (first.detail or "")
    assert not syncer.ready and "read_error" in syncer.status()["reason"]
    good = contract.encode(envelope("m1"))
    write_configmap(cm, good)
    syncer.sync_once()
    write_configmap(cm, None)
    assert syncer.sync_once().outcome == "read_error"
    cm.write_text("kind: ConfigMap\ndata: [")
    assert syncer.sync_once().outcome == "read_error"
    cm.unlink()
    assert syncer.sync_once().outcome == "read_error"
    assert (target / NAME).read_bytes() == good
    assert metric(syncer, "grid_overlay_sync_syncs_total", outcome="read_error") == 4
    assert metric(syncer, "grid_overlay_sync_rejections_total", reason="read_error") == 0
    write_configmap(cm, good)
    assert syncer.sync_once().outcome == "unchanged"
    assert metric(syncer, "grid_overlay_sync_degraded") == 0


def test_restart_adopts_a_valid_file_and_rewrites_a_deleted_one(paths: tuple[Path, Path]) -> None:
    cm, target = paths
    good = contract.encode(envelope("m1"))
    write_configmap(cm, good)
    make_syncer(paths).sync_once()
    restarted = make_syncer(paths, SCOPE.as_dict())
    assert restarted.restore() and restarted.ready
    assert restarted.sync_once().outcome == "unchanged"
    other_scope = make_syncer(paths, {"gateway": "other"})
    assert not other_scope.restore() and not other_scope.ready
    (target / NAME).unlink()
    assert restarted.sync_once().outcome == "accepted"
    assert (target / NAME).read_bytes() == good


def test_unwritable_target_is_a_write_error(paths: tuple[Path, Path]) -> None:
    cm, target = paths
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("a file where the directory should be")
    syncer = make_syncer(paths)
    write_configmap(cm, contract.encode(envelope("m1")))
    result = syncer.sync_once()
    assert result.outcome == "write_error" and "cannot write" in (result.detail or "")
    assert not syncer.ready


# --- arguments ----------------------------------------------------------------------------------


def test_expected_scope_parsing() -> None:
    assert parse_scope("network=a, gateway=b,namespace=c,local_site=d") == {
        "network": "a", "gateway": "b", "namespace": "c", "local_site": "d"
    }
    for bad, message in [("region=x", "unknown scope key 'region'"), ("network", "not key=value"),
                         ("network=a,network=b", "given twice"), ("gateway=", "empty value")]:
        with pytest.raises(ValueError, match=message):
            parse_scope(bad)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--expected-scope", "zone=x"], "--expected-scope: unknown scope key 'zone'"),
        (["--admin", "127.0.0.1"], "--admin:"),
        (["--admin", "127.0.0.1:70000"], "--admin:"),
        (["--resync-seconds", "0"], "--resync-seconds"),
        (["--file-name", "..data"], "--file-name"),
    ],
)
def test_bad_arguments_exit_2_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    argv = ["--configmap-file", str(tmp_path / "cm.yaml"), "--target-dir", str(tmp_path / "out"), *extra]
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


# --- watching -----------------------------------------------------------------------------------


def test_watch_reports_changes_also_when_the_directory_appears_later(tmp_path: Path) -> None:
    import asyncio

    cm = tmp_path / "later" / "configmap.yaml"
    source = FileConfigMapSource(cm, debounce_ms=10, retry_seconds=0.05)
    body = contract.encode(envelope("m1"))

    async def scenario() -> list[bytes]:
        stop = asyncio.Event()
        seen: list[bytes] = []

        missing = asyncio.Event()

        async def consume() -> None:
            with pytest.raises(SourceError):
                source.read()  # what a caller does first: the file is missing
            missing.set()
            async for _ in source.changes(stop):
                try:
                    seen.append(source.read().data)
                except SourceError:
                    missing.set()
                    continue
                if seen[-1] == body:
                    stop.set()

        task = asyncio.create_task(consume())
        await asyncio.wait_for(missing.wait(), timeout=10)
        await asyncio.sleep(0)  # let the source start looking for the directory
        write_configmap(cm, body)  # creates the directory while the source is waiting for it
        try:
            await asyncio.wait_for(task, timeout=10)
        finally:
            stop.set()
        return seen

    assert asyncio.run(scenario())[-1] == body
