"""Entry format: which events are chained, their actions, and the payload digest."""

from __future__ import annotations

import hashlib
import json
import struct

import msgspec
import pytest

from streamproc.audit import layout
from streamproc.audit.chain import ChainEntry, chain_link
from streamproc.audit.entry import (
    CHAINED_KINDS,
    CONTROL_PLANE,
    LIFECYCLE,
    SNAPSHOT_KIND,
    Entry,
    action_for,
    make_entry,
    payload_digest,
)
from streamproc.events import payloads as p
from streamproc.events.catalog import KINDS
from streamproc.events.envelope import new_event
from streamproc.state.store import RocksStore
from tests.audit.conftest import Pristine
from tests.samples import sample_event, sample_payload


def test_every_catalog_kind_is_classified() -> None:
    for kind in KINDS:
        chained = kind in CHAINED_KINDS
        if kind.startswith(("image.", "sbom.", "export.")) or kind == SNAPSHOT_KIND:
            assert not chained, kind
        else:
            assert chained, kind
    assert not set(LIFECYCLE) & CONTROL_PLANE


def test_action_mapping() -> None:
    expected = {
        "run.requested": "ENQUEUE",
        "run.planned": "DEQUEUE",
        "run.completed": "COMPLETE",
        "segment.enqueued": "ENQUEUE",
        "segment.started": "DEQUEUE",
        "verdict.recorded": "EXECUTE",
        "segment.completed": "COMPLETE",
        "segment.failed": "FAIL",
        "schedule.created": "schedule.created",
        "run.cancel_requested": "run.cancel_requested",
        "run.cancelled": "run.cancelled",
    }
    seen = {}
    for i in range(200):
        e = sample_event(i)
        if e.kind in CHAINED_KINDS:
            seen[e.kind] = action_for(e)
    for kind, action in expected.items():
        assert seen[kind] == action, kind
    failed_run = new_event(
        "run.completed", "t", p.RunCompleted(run_id="r", state="error"), "1:0:n", event_id="x"
    )
    failed_verdict = new_event(
        "verdict.recorded",
        "t",
        p.VerdictRecorded(run_id="r", segment_id="s", digest="sha256:" + "a" * 64, status="failed"),
        "1:0:n",
        event_id="y",
    )
    assert action_for(failed_run) == "FAIL"
    assert action_for(failed_verdict) == "FAIL"


def test_payload_digest_known_answer() -> None:
    fields = ["1767225600000:0:n1", "seg-1", "ENQUEUE", "evt-1", "segment.enqueued"]
    payload = b'{"segmentId":"seg-1"}'
    parts = [*(f.encode() for f in fields), payload]
    by_hand = hashlib.sha256(b"streamproc.audit.entry.v1")
    for part in parts:
        by_hand.update(len(part).to_bytes(4, "big"))
    for part in parts:
        by_hand.update(part)
    assert payload_digest(*fields, payload) == by_hand.hexdigest()
    assert by_hand.hexdigest() == (
        "1af6019bba65dadf804cdb5e225219a2c6ee92cd4e56e34bfa0fdc6543440e8a"
    )


def test_field_shift_keeps_the_link_but_changes_the_payload_digest() -> None:
    """The published link concatenates without separators: moving a character from the HLC's
    node id into job_id gives the same link input. The payload digest tells them apart."""
    d = "ab" * 32
    a = chain_link("1767225600000:0:nodeA", "Bseg-1", "ENQUEUE", None, d)
    b = chain_link("1767225600000:0:nodeAB", "seg-1", "ENQUEUE", None, d)
    assert a == b
    pa = payload_digest("1767225600000:0:nodeA", "Bseg-1", "ENQUEUE", "e", "k", b"{}")
    pb = payload_digest("1767225600000:0:nodeAB", "seg-1", "ENQUEUE", "e", "k", b"{}")
    assert pa != pb
    # ... and between job_id and action, and action and the previous link.
    assert payload_digest("t", "job-1E", "NQUEUE", "e", "k", b"{}") != payload_digest(
        "t", "job-1", "ENQUEUE", "e", "k", b"{}"
    )


def test_make_entry_fields_and_link() -> None:
    e = sample_event(6)  # segment.enqueued
    entry = make_entry(e, 3, "cd" * 32)
    assert (entry.position, entry.t_hlc, entry.job_id, entry.action) == (
        3,
        e.hlc,
        "seg-0",
        "ENQUEUE",
    )
    assert entry.event_id == e.id and entry.kind == e.kind
    assert entry.payload == msgspec.json.encode(e.payload, order="sorted").decode()
    assert entry.payload_digest == entry.recompute_digest()
    assert entry.chain_link == chain_link(
        e.hlc, "seg-0", "ENQUEUE", "cd" * 32, entry.payload_digest
    )
    genesis = make_entry(e, 0, None)
    assert genesis.chain_link == chain_link(
        e.hlc, "seg-0", "ENQUEUE", "genesis", genesis.payload_digest
    )


def test_entry_starts_with_the_chain_entry_fields() -> None:
    assert Entry.__struct_fields__[:7] == ChainEntry.__struct_fields__
    e = make_entry(sample_event(0), 0, None)
    row = msgspec.json.decode(msgspec.json.encode(e))
    assert isinstance(row, list) and len(row) == 10
    assert row[6] == e.chain_link and row[9] == e.payload


def test_worked_example_of_the_docs() -> None:
    e1 = new_event(
        "segment.enqueued",
        "acme",
        p.SegmentEnqueued(
            segment_id="seg-1", run_id="run-1", shard=0, digests=["sha256:" + "ab" * 32]
        ),
        "1767225600000:0:node-a",
        event_id="evt-0001",
    )
    e2 = new_event(
        "segment.started",
        "acme",
        p.SegmentStarted(segment_id="seg-1", run_id="run-1", runner="runner-1"),
        "1767225600005:0:node-b",
        event_id="evt-0002",
    )
    a = make_entry(e1, 0, None)
    b = make_entry(e2, 1, a.chain_link)
    assert a.payload_digest == "43bbc6e9118b5cd18759208e6c3e0a6845b4ecd7f2853531afa0aaf7b4254639"
    assert a.chain_link == "bbb20dca8cb7e48762baf9c2bcbafd11a9f02baed998f3287250e25a43e1132e"
    assert b.payload_digest == "1f0016afce117c19ef0de4f50df821a80c800cd4e4add6d5997bd537d06571e2"
    assert b.chain_link == "4b23b99dbe2dd3f3398d056173874c220b15fc526b363fab39258fdc1ac92304"
    assert b.payload == '{"attempt":1,"runId":"run-1","runner":"runner-1","segmentId":"seg-1"}'


def _doc_payload_digest(e: dict[str, str]) -> str:
    """The independent verifier of docs/audit.md, verbatim."""
    fields = [e[k].encode() for k in ("t_hlc", "job_id", "action", "event_id", "kind", "payload")]
    head = struct.pack(">6I", *map(len, fields))
    return hashlib.sha256(b"streamproc.audit.entry.v1" + head + b"".join(fields)).hexdigest()


def _doc_verify(lines: list[str], head_link: str | None) -> None:
    prev = None
    for pos, line in enumerate(lines):
        e = json.loads(line)
        assert e["position"] == pos and e["prev_chain_link"] == prev, pos
        assert _doc_payload_digest(e) == e["payload_digest"], pos
        link = hashlib.sha256(
            (
                e["t_hlc"] + e["job_id"] + e["action"] + (prev or "genesis") + e["payload_digest"]
            ).encode()
        ).hexdigest()
        assert link == e["chain_link"], pos
        prev = link
    assert prev == head_link


def test_the_independent_verifier_of_the_docs_accepts_a_real_chain(pristine: Pristine) -> None:
    store = RocksStore(pristine.path, read_only=True)
    try:
        lines = [
            msgspec.json.encode(msgspec.structs.asdict(e)).decode()
            for e in layout.iter_entries(store, "acme")
        ]  # what `streamproc chain log --order chain` prints
        head = layout.read_head(store, "acme")
    finally:
        store.close()
    assert head is not None
    _doc_verify(lines, head.head_chain_link)
    bad = json.loads(lines[7])
    bad["t_hlc"], bad["job_id"] = bad["t_hlc"][:-1], bad["t_hlc"][-1] + bad["job_id"]
    lines[7] = json.dumps(bad)
    with pytest.raises(AssertionError):
        _doc_verify(lines, head.head_chain_link)


def test_fields_added_to_a_chained_kind_leave_old_links_alone() -> None:
    """A verdict recorded before the scanner fields existed (its JSON has none of them)
    hashes as it did; one that carries them hashes them."""
    old_json = {
        "runId": "r1", "segmentId": "s1", "digest": "sha256:" + "ab" * 32, "status": "ok",
        "findings": [{"purl": "pkg:pypi/a@1", "vulnId": "GHSA-x", "severity": "high"}],
    }  # fmt: skip
    old = msgspec.json.decode(msgspec.json.encode(old_json), type=p.VerdictRecorded)
    event = new_event("verdict.recorded", "acme", old, "1767225600000:0:n", event_id="e1")
    payload = make_entry(event, 0, None).payload
    assert "fixedVersion" not in payload and "scanner" not in payload
    assert "policyVerdict" not in payload and '"error":null' in payload  # old nulls stay
    new = msgspec.structs.replace(
        old,
        scanner="grype",
        findings=[msgspec.structs.replace(old.findings[0], fixed_version="1.2")],
    )
    event = new_event("verdict.recorded", "acme", new, "1767225600000:0:n", event_id="e1")
    payload = make_entry(event, 0, None).payload
    assert '"scanner":"grype"' in payload and '"fixedVersion":"1.2"' in payload


def test_every_chained_kind_has_a_sample_payload() -> None:
    """bench/audit.py chains one sample of every chained kind; a chained kind without a
    sample made it loop for ever (``delta.acknowledged``)."""
    for i, kind in enumerate(sorted(CHAINED_KINDS)):
        assert sample_payload(kind, i) is not None, kind
