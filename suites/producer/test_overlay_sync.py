"""The overlay-sync sidecar on its own: it follows a ConfigMap, validates, delivers atomically, keeps LKG.

No operator is involved: the harness writes the ConfigMap the sidecar follows (as the operator's sink
writes it) and reads back the serving file in the directory the sidecar delivers into, as a gateway
would. Probes are judged as kubelet runs them (2xx or 3xx is a success) on the paths the descriptor
names. The tests run under the overlaySync feature, which a descriptor claims with an overlay_sync
section: the sidecar is an optional deployment choice ("With overlay-sync enabled").
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from harness import contract
from harness.backends.local import OperatorUnsupported
from harness.control import SyncFeed
from harness.grid import Site
from harness.timeouts import timeouts
from harness.waiting import WaitTimeout, hold_for, poll_until

ARCH = "routing-architecture-and-overlay-contract"
DELIVERY = (f"{ARCH}#how-the-new-overlay-reaches-praxis: \"With overlay-sync enabled, the sidecar watches the named "
            "ConfigMap, validates the envelope and digest, atomically replaces the serving file, and exposes "
            "readiness/liveness state.\"")
REGEN = (f"{ARCH}#when-the-routing-overlay-regenerates: \"The recommended deployment uses grid-overlay-sync to watch "
         "the named ConfigMap through the Kubernetes API, validate each content-addressed envelope, and atomically "
         "write accepted revisions into a shared emptyDir.\"; \"It also adds validation, atomic writes, "
         "last-known-good retention, delivery health, and revision metrics at the handoff boundary.\"")
FEATURE = "overlaySync"
#: The window in which an invalid update must not be delivered: this many times the latency the same
#: sidecar just took to deliver a valid update, within the bounds below. A sidecar that delivered
#: without validating would do it about as fast as it delivers a valid one.
WINDOW_FACTOR = 4.0
WINDOW_BOUNDS = (1.0, 5.0)

_models = itertools.count(1)

Feeds = Callable[[bytes], SyncFeed]


@pytest.fixture
def feeds(site: Site) -> Iterator[Feeds]:
    """Start overlay-syncs under test on ConfigMaps of their own; all are stopped when the test ends."""
    started: list[SyncFeed] = []

    def start(first: bytes) -> SyncFeed:
        try:
            feed = site.start_overlay_sync(site.scope, first)
        except OperatorUnsupported as exc:
            pytest.skip(f"unsupported feature: {FEATURE} on this backend ({exc})")
        started.append(feed)
        return feed

    yield start
    for feed in started:
        site.stop_overlay_sync(feed)


def revision(site: Site, candidates: int = 1) -> dict[str, Any]:
    """A valid envelope for the site's scope with a model of its own (so every revision differs)."""
    provider = site.spec.model_providers[0].name
    model = f"sync-model-{next(_models)}"
    return site.envelope([site.candidate(provider, f"{model}-{i}") for i in range(candidates)])


def delivered_revision(feed: SyncFeed) -> str | None:
    data = feed.delivered_bytes()
    try:
        doc = json.loads(data) if data is not None else None
    except ValueError:
        return None
    value = ((doc or {}).get("revision") or {}).get("value") if isinstance(doc, dict) else None
    return value if isinstance(value, str) else None


def wait_delivered(feed: SyncFeed, doc: dict[str, Any], what: str) -> float:
    """Wait until the serving file holds `doc`'s revision; returns when it was seen."""
    want = contract.revision_of(doc)
    try:
        poll_until(lambda: delivered_revision(feed), lambda r: r == want, timeout=timeouts().delivery,
                   what=f"overlay-sync to deliver {what} ({want[:12]})",
                   describe=lambda r: f"the serving file holds revision {r[:12] if r else r}")
    except WaitTimeout as exc:
        raise WaitTimeout(f"{exc}\n--- overlay-sync log (tail) ---\n{feed.log_tail()}") from None
    return time.monotonic()


def publish_and_time(feed: SyncFeed, doc: dict[str, Any], what: str) -> float:
    """Publish a valid revision and return how long the sidecar took to deliver it."""
    started = time.monotonic()
    feed.publish(contract.encode(doc))
    return wait_delivered(feed, doc, what) - started


def window_after(latency: float) -> float:
    low, high = WINDOW_BOUNDS
    return min(high, max(low, WINDOW_FACTOR * latency))


@pytest.mark.conformance(id="PROD-SYNC-DELIVERS-EACH-REVISION", profile="producer", level="extended", feature=FEATURE,
                         spec=DELIVERY + "; " + REGEN,
                         statements=["OC-DELIVERY-OVERLAY-SYNC", "OC-REGEN-OVERLAY-SYNC-WRITES"])
def test_each_valid_revision_is_delivered(site: Site, feeds: Feeds) -> None:
    """The envelope in the ConfigMap reaches the serving file unchanged (the same document), the sidecar is
    ready and alive, and a later revision in the same ConfigMap replaces it without a restart. Fails if
    the sidecar reads the ConfigMap once, changes the envelope it delivers, or never reports ready."""
    first, second = revision(site), revision(site)
    feed = feeds(contract.encode(first))
    wait_delivered(feed, first, "the revision the ConfigMap held at start")
    data = feed.delivered_bytes()
    assert data is not None and json.loads(data) == first, "the serving file must hold the ConfigMap's envelope"
    assert feed.ready(), f"a sidecar serving a valid revision must pass its readiness probe\n{feed.log_tail()}"
    assert feed.live(), f"a running sidecar must pass its liveness probe\n{feed.log_tail()}"
    publish_and_time(feed, second, "the next revision written into the same ConfigMap")
    data = feed.delivered_bytes()
    assert data is not None and json.loads(data) == second, "the serving file must hold the new envelope"


def _wrong_digest(doc: dict[str, Any]) -> bytes:
    doc["content_digest"]["value"] = doc["revision"]["value"] = "0" * 64
    return contract.encode(doc)


def _stale_digest(doc: dict[str, Any]) -> bytes:
    doc["overlay"]["candidates"][0]["cluster"] = "edited-after-sealing"
    return contract.encode(doc)


def _foreign_scope(doc: dict[str, Any]) -> bytes:
    doc["scope"]["gateway"] = "another-gateway"
    return contract.encode(contract.seal(doc))


def _not_json(_doc: dict[str, Any]) -> bytes:
    return b'{"schema_version": "1.0.0", "revision": '


INVALID: dict[str, Callable[[dict[str, Any]], bytes]] = {
    "wrong-content-digest": _wrong_digest,
    "stale-digest-after-edit": _stale_digest,
    "foreign-scope": _foreign_scope,
    "not-json": _not_json,
}


@pytest.mark.conformance(id="PROD-SYNC-INVALID-KEEPS-LKG", profile="producer", level="extended", feature=FEATURE,
                         spec=DELIVERY + "; " + REGEN,
                         statements=["OC-DELIVERY-OVERLAY-SYNC", "OC-REGEN-OVERLAY-SYNC-WRITES",
                                     "OC-REGEN-OVERLAY-SYNC-FEATURES"])
@pytest.mark.parametrize("case", list(INVALID))
def test_invalid_update_keeps_the_last_good_file(site: Site, feeds: Feeds, case: str) -> None:
    """After a valid revision B, the ConfigMap gets an invalid envelope: for several times the latency the
    sidecar took to deliver B, the serving file stays B byte for byte (same inode) and the sidecar stays
    alive. Twin: the next valid revision is delivered. Fails if the sidecar delivers without checking the
    digest or scope, or removes or truncates the serving file when it refuses an update."""
    first, good, after = revision(site), revision(site), revision(site)
    feed = feeds(contract.encode(first))
    wait_delivered(feed, first, "the first revision")
    latency = publish_and_time(feed, good, "a second valid revision")
    kept, inode = feed.delivered_bytes(), feed.delivered_inode()
    bad = INVALID[case](json.loads(contract.encode(revision(site))))
    feed.publish(bad)
    window = window_after(latency)
    hold_for(lambda: (feed.delivered_bytes(), feed.delivered_inode()), lambda seen: seen == (kept, inode),
             seconds=window,
             what=f"the ConfigMap holds an invalid envelope ({case}); for {window:.1f}s (the sidecar delivered a "
                  f"valid update in {latency:.2f}s) the serving file must stay the last good revision, same inode",
             describe=lambda seen: (f"the serving file {'is gone' if seen[0] is None else 'changed'}, inode "
                                    f"{inode} -> {seen[1]}\n{feed.log_tail()}"))
    assert feed.live(), f"the sidecar must stay alive after refusing an update\n{feed.log_tail()}"
    publish_and_time(feed, after, "the valid revision that follows the invalid one")


@pytest.mark.conformance(id="PROD-SYNC-ATOMIC-REPLACE", profile="producer", level="extended", feature=FEATURE,
                         spec=DELIVERY + "; " + REGEN,
                         statements=["OC-DELIVERY-OVERLAY-SYNC", "OC-REGEN-OVERLAY-SYNC-WRITES",
                                     "OC-REGEN-OVERLAY-SYNC-FEATURES"])
def test_serving_file_is_replaced_atomically(site: Site, feeds: Feeds) -> None:
    """Five large revisions (about 200 KiB each) follow each other while a reader keeps opening the serving
    file: every read is a whole envelope of a published revision, and each delivery puts a new file in
    place (a new inode) rather than rewriting the old one. Fails if the sidecar truncates and rewrites the
    serving file, so a gateway can read half an envelope, or leaves it missing between revisions."""
    docs = [revision(site, candidates=1000) for _ in range(6)]
    published = {contract.revision_of(d) for d in docs}
    feed = feeds(contract.encode(docs[0]))
    wait_delivered(feed, docs[0], "the first large revision")
    problems: list[str] = []
    reads = [0]
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            data = feed.delivered_bytes()
            reads[0] += 1
            if data is None:
                problems.append("the serving file was missing")
                continue
            try:
                value = json.loads(data)["revision"]["value"]
            except (ValueError, KeyError, TypeError):
                problems.append(f"a read of {len(data)} bytes was not a whole envelope")
                continue
            if value not in published:
                problems.append(f"a read held revision {value[:12]}, which was never published")

    thread = threading.Thread(target=reader, name="serving-file-reader", daemon=True)
    thread.start()
    inodes = [feed.delivered_inode()]
    try:
        for doc in docs[1:]:
            publish_and_time(feed, doc, "the next large revision")
            inodes.append(feed.delivered_inode())
    finally:
        stop.set()
        thread.join(timeout=timeouts().request)
    reused = [i for i, (a, b) in enumerate(itertools.pairwise(inodes), start=1) if a == b]
    assert not reused, (f"deliveries {reused} rewrote the serving file in place (inode unchanged: {inodes}); an "
                        "atomic replacement puts a new file in place")
    assert reads[0] > 0, "the reader never ran"
    assert not problems, f"{len(problems)} of {reads[0]} reads saw a partial state: {sorted(set(problems))[:3]}"


@pytest.mark.conformance(id="PROD-SYNC-READY-ONCE-SERVING", profile="producer", level="extended", feature=FEATURE,
                         spec=DELIVERY,
                         statements=["OC-DELIVERY-OVERLAY-SYNC", "OC-REGEN-OVERLAY-SYNC-FEATURES"])
def test_ready_only_once_a_valid_revision_is_served(site: Site, feeds: Feeds) -> None:
    """Started on a ConfigMap whose envelope has a wrong digest, the sidecar is alive but not ready and
    serves nothing; once a valid revision is published it serves it and becomes ready. Fails if readiness
    is reported before anything valid is delivered (or never), or liveness depends on the ConfigMap."""
    valid = revision(site)
    feed = feeds(_wrong_digest(revision(site)))
    hold_for(lambda: (feed.live(), feed.ready(), feed.delivered_bytes()),
             lambda seen: seen == (True, False, None), seconds=WINDOW_BOUNDS[0],
             what="with only an invalid envelope to deliver, the sidecar must be alive, not ready, and serve nothing",
             describe=lambda seen: (f"liveness {'passes' if seen[0] else 'fails'}, readiness "
                                    f"{'passes' if seen[1] else 'fails'}, serving file "
                                    f"{'absent' if seen[2] is None else 'present'}\n{feed.log_tail()}"))
    feed.publish(contract.encode(valid))
    wait_delivered(feed, valid, "the first valid revision")
    poll_until(feed.ready, bool, timeout=timeouts().delivery, what="the sidecar to pass its readiness probe once "
               "it serves a valid revision")


METRICS_SOURCE = ("series names of the public grid-overlay-sync (praxis-proxy/grid, crates/overlay-sync/src/"
                  "metrics.rs)")


def _series(feed: SyncFeed) -> dict[str, float]:
    """The sidecar's unlabelled gauges and its validation failures summed over reasons."""
    samples = feed.metrics()
    out = {name: value for (name, labels), value in samples.items() if not labels}
    out["validation_failures"] = sum(value for (name, _labels), value in samples.items()
                                     if name == "grid_overlay_sync_validation_failures_total")
    return out


@pytest.mark.conformance(id="PROD-SYNC-METRICS", profile="producer", level="extended",
                         feature="overlaySyncMetrics", spec=REGEN + "; " + METRICS_SOURCE,
                         statements=["OC-REGEN-OVERLAY-SYNC-FEATURES"])
def test_delivery_health_and_revision_metrics(site: Site, feeds: Feeds) -> None:
    """After a delivery: grid_overlay_sync_ready 1, _degraded 0, _payload_bytes the serving file's size and
    _last_write_timestamp_seconds the time of that write. An invalid update counts in
    _validation_failures_total and makes the sidecar degraded (still ready, no write); the next valid
    revision clears degraded and moves the write time on. Fails if the series miss a delivery or a
    refusal, or report health the sidecar does not have."""
    first, second = revision(site), revision(site)
    before = time.time()
    feed = feeds(contract.encode(first))
    wait_delivered(feed, first, "the first revision")
    served = feed.delivered_bytes() or b""
    seen = poll_until(lambda: _series(feed), lambda m: m.get("grid_overlay_sync_ready") == 1,
                      timeout=timeouts().delivery, what="grid_overlay_sync_ready to be 1 once a revision is served")
    assert seen.get("grid_overlay_sync_degraded") == 0, f"nothing was refused yet: {seen}"
    assert seen.get("grid_overlay_sync_payload_bytes") == len(served), (
        f"grid_overlay_sync_payload_bytes is the serving file's size ({len(served)}): {seen}")
    written = seen.get("grid_overlay_sync_last_write_timestamp_seconds", 0.0)
    assert before - 1 <= written <= time.time() + 1, f"the last write happened during this test: {written}"
    failures = seen["validation_failures"]
    feed.publish(_wrong_digest(revision(site)))
    refused = poll_until(lambda: _series(feed), lambda m: m["validation_failures"] >= failures + 1,
                         timeout=timeouts().delivery, what="grid_overlay_sync_validation_failures_total to count the "
                         "refused update", describe=lambda m: f"series {m}")
    assert (refused.get("grid_overlay_sync_degraded"), refused.get("grid_overlay_sync_ready")) == (1, 1), (
        f"serving the last good revision after a refusal is ready and degraded: {refused}")
    assert refused.get("grid_overlay_sync_last_write_timestamp_seconds") == written, (
        f"a refused update writes nothing: {refused}")
    publish_and_time(feed, second, "the next valid revision")
    poll_until(lambda: _series(feed),
               lambda m: m.get("grid_overlay_sync_degraded") == 0
               and m.get("grid_overlay_sync_last_write_timestamp_seconds", 0.0) > written,
               timeout=timeouts().delivery, what="the next delivery to clear degraded and move the write time on",
               describe=lambda m: f"series {m}")
