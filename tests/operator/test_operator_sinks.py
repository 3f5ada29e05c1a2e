"""The `dir` sink: ConfigMap object plus kubelet-style projected directory, unchanged revisions left alone,
and GridNetwork status that keeps the distributed revision when a render or write fails."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_support import network, provider, queue_provider

from reference.operator.core import FixedClock, MetricSample, Resources, render
from reference.operator.core.configmap import ENVELOPE_KEY, LEGACY_KEY
from reference.operator.sinks import DATA_LINK, DirSink, project

WALL = datetime(2026, 1, 1, tzinfo=UTC)


def resources(*extra: dict[str, Any]) -> Resources:
    return Resources.from_objects([network(scoringPolicy={"strategy": "queueDepth"}), provider("p1"), *extra])


def status_entry(out: Path) -> dict[str, Any]:
    doc = yaml.safe_load((out / "net-1.status.yaml").read_text())
    (entry,) = doc["status"]["overlayStatus"]
    return dict(entry)


def test_writes_configmap_projection_and_status(tmp_path: Path) -> None:
    res = resources()
    (rendered,) = render(res, [], [], FixedClock())
    DirSink(tmp_path).publish(res.networks, [rendered], WALL)
    name = rendered.configmap["metadata"]["name"]
    stored = yaml.safe_load((tmp_path / f"{name}.configmap.yaml").read_text())
    assert stored == rendered.configmap
    projected = tmp_path / name
    assert (projected / DATA_LINK).is_symlink()
    assert os.readlink(projected / ENVELOPE_KEY) == f"{DATA_LINK}/{ENVELOPE_KEY}"
    envelope = json.loads((projected / ENVELOPE_KEY).read_text())
    assert envelope["revision"]["value"] == rendered.revision
    assert json.loads((projected / LEGACY_KEY).read_text()) == envelope["overlay"]
    entry = status_entry(tmp_path)
    assert entry["renderedRevision"] == entry["distributedRevision"] == rendered.revision
    assert entry["contentDigest"] == rendered.envelope["content_digest"]["value"]
    assert (entry["candidateCount"], entry["phase"], entry["gatewayName"]) == (1, "Distributed", "gw-1")


def test_identical_revision_is_not_rewritten(tmp_path: Path) -> None:
    res = resources()
    clock = FixedClock()
    sink = DirSink(tmp_path)
    (first,) = render(res, [], [], clock)
    sink.publish(res.networks, [first], WALL)
    name = first.configmap["metadata"]["name"]
    data_dir = os.readlink(tmp_path / name / DATA_LINK)
    mtime = (tmp_path / f"{name}.configmap.yaml").stat().st_mtime_ns
    clock.wall_time = datetime(2026, 6, 1, tzinfo=UTC)
    (again,) = render(res, [], [], clock)
    assert again.revision == first.revision
    assert sink.write_configmap(again) is False
    sink.publish(res.networks, [again], WALL)
    assert os.readlink(tmp_path / name / DATA_LINK) == data_dir
    assert (tmp_path / f"{name}.configmap.yaml").stat().st_mtime_ns == mtime
    assert status_entry(tmp_path)["message"] == "overlay unchanged"


def test_changed_revision_swaps_data_and_removes_old_dir(tmp_path: Path) -> None:
    sink = DirSink(tmp_path)
    res = resources()
    (first,) = render(res, [], [], FixedClock())
    sink.publish(res.networks, [first], WALL)
    name = first.configmap["metadata"]["name"]
    old_dir = os.readlink(tmp_path / name / DATA_LINK)
    res2 = resources(provider("p2"))
    (second,) = render(res2, [], [], FixedClock())
    assert second.revision != first.revision
    sink.publish(res2.networks, [second], WALL)
    assert os.readlink(tmp_path / name / DATA_LINK) != old_dir
    assert json.loads((tmp_path / name / ENVELOPE_KEY).read_text())["revision"]["value"] == second.revision
    assert status_entry(tmp_path)["distributedRevision"] == second.revision
    # the replaced data dir stays for a reader that resolved ..data an instant before the swap, until the next
    res3 = resources(provider("p2"), provider("p3"))
    (third,) = render(res3, [], [], FixedClock())
    sink.publish(res3.networks, [third], WALL)
    assert not (tmp_path / name / old_dir).exists()


def test_failed_render_keeps_distributed_revision(tmp_path: Path) -> None:
    sink = DirSink(tmp_path)
    res = resources()
    (first,) = render(res, [], [], FixedClock())
    sink.publish(res.networks, [first], WALL)
    sink.publish(res.networks, [], WALL, render_error="ResourceError: spec.admissionPolicy: bad")
    entry = status_entry(tmp_path)
    assert entry["distributedRevision"] == first.revision
    assert (entry["phase"], entry["reason"]) == ("Error", "RenderFailed")
    assert "admissionPolicy" in entry["message"]


def test_failed_write_keeps_distributed_revision(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sink = DirSink(tmp_path)
    res = resources()
    (first,) = render(res, [], [], FixedClock())
    sink.publish(res.networks, [first], WALL)
    res2 = Resources.from_objects([network(scoringPolicy={"strategy": "queueDepth"}), queue_provider("p1")])
    (second,) = render(res2, [MetricSample("p1", 1, queue_depth=9)], [], FixedClock())
    assert second.revision != first.revision

    def broken(*_: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("reference.operator.sinks.project", broken)
    sink.publish(res2.networks, [second], WALL)
    entry = status_entry(tmp_path)
    assert (entry["phase"], entry["reason"]) == ("Error", "WriteFailed")
    assert entry["renderedRevision"] == second.revision
    assert entry["distributedRevision"] == first.revision
    assert "disk full" in entry["message"]


def test_status_validates_against_the_crd_schema(tmp_path: Path) -> None:
    from reference.operator.sources import default_kinds, schema_errors

    res = resources()
    DirSink(tmp_path).publish(res.networks, render(res, [], [], FixedClock()), WALL)
    doc = yaml.safe_load((tmp_path / "net-1.status.yaml").read_text())
    doc["spec"] = {}
    assert schema_errors(doc, default_kinds()) == []


def test_project_replaces_stray_files(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.json").write_text("stray")
    project(tmp_path / "d", {"a.json": "one"})
    project(tmp_path / "d", {"a.json": "two"})
    assert (tmp_path / "d" / "a.json").read_text() == "two"
    assert sorted(p.name for p in (tmp_path / "d").iterdir() if not p.name.startswith("..2")) == [
        DATA_LINK,
        "a.json",
    ]
