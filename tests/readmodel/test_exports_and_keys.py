"""Export records, cursors and next fire times."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest

from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope
from streamproc.readmodel import keys
from streamproc.readmodel.exports import Exports, export_digest, payload_digest
from streamproc.readmodel.nextfire import next_fire_times
from streamproc.state.digest import state_digest
from tests.readmodel.util import Log


def test_one_export_record_per_tenant_kind_and_id() -> None:
    log = Log()
    fe = p.FeedserExport(export_id="e1", changed_product_keys=["pkg:deb/debian/openssl"])
    seq = log.emit("export.feedser", fe)
    rec = log.rm.export("t1", "feedser", "e1")
    assert rec is not None and rec.seq == seq and rec.payload_sha256 == export_digest(fe)
    assert rec.payload_sha256 == payload_digest(p.export_body(fe))
    assert log.rm.export("t1", "vexer", "e1") is None
    assert log.rm.export("t2", "feedser", "e1") is None
    again = log.emit("export.feedser", fe)
    assert log.rejection(again, Exports.name) == "duplicate_export"
    log.emit("export.vexer", p.VexerExport(export_id="e1"))
    assert log.rm.export("t1", "vexer", "e1") is not None


def schema_1(event: Envelope) -> Envelope:
    """``event`` as a gateway wrote it before exports were scoped by source."""
    assert isinstance(event.payload, p.FeedserExport)
    return msgspec.structs.replace(event, schema=1, payload=p.export_body(event.payload))


def test_exports_are_keyed_by_source_and_old_events_keep_their_keys() -> None:
    """Two sources may use one export id; events from before refs keep their bare key, with
    the digest a new event of the same body has; replay gives the same bytes."""
    body = {"export_id": "e1", "changed_product_keys": ["pkg:deb/debian/openssl"]}
    log = Log()
    old = log.event("export.feedser", p.FeedserExport(**body))
    mine = p.FeedserExport(**body, source="feedser-a")
    theirs = p.FeedserExport(**body, kev=["pkg:deb/debian/zlib"], source="feedser-b")
    events = [
        schema_1(old),
        log.event("export.feedser", theirs),  # another source, the same id, first
        log.event("export.feedser", mine),
        log.event("export.feedser", mine),
    ]
    seqs = [log.fold(e) for e in events]
    assert [log.rejection(s, Exports.name) for s in seqs] == [None, None, None, "duplicate_export"]
    legacy, a, b = (log.rm.export("t1", "feedser", ref) for ref in ("e1", mine.ref, theirs.ref))
    assert mine.ref == "feedser-a:e1" and theirs.ref == "feedser-b:e1"
    assert legacy is not None and a is not None and b is not None
    assert (legacy.seq, b.seq, a.seq) == (1, 2, 3)
    assert legacy.payload_sha256 == a.payload_sha256 == export_digest(mine) != b.payload_sha256
    replayed = Log()
    for e in events:
        replayed.fold(e)
    assert state_digest(replayed.store) == state_digest(log.store)


def test_keys_are_tenant_nul_parts() -> None:
    assert keys.key("t1", "feedser", "src:e1") == b"t1\x00feedser\x00src:e1"
    assert keys.key("t1") == keys.tenant_prefix("t1") == b"t1\x00"
    assert keys.key("tén", "é").startswith(keys.tenant_prefix("tén"))


def test_cursor_round_trip_and_refusals() -> None:
    prefix = keys.tenant_prefix("t1")
    c = keys.encode_cursor(prefix, prefix + b"abc")
    assert keys.decode_cursor(prefix, c) == prefix + b"abc\x00"
    assert keys.decode_cursor(prefix, None) == prefix
    for bad in ("!!!", "AAAA", keys.encode_cursor(b"", b"x")[1:]):
        with pytest.raises(keys.CursorError):
            keys.decode_cursor(prefix, bad)
    # A cursor from another tenant's listing only moves within the caller's prefix.
    other = keys.encode_cursor(keys.tenant_prefix("t2"), keys.tenant_prefix("t2") + b"zz")
    assert keys.decode_cursor(prefix, other).startswith(prefix)


def test_next_fire_times_follow_the_time_zone_across_dst() -> None:
    now = datetime(2025, 3, 29, 12, 0, tzinfo=UTC)
    fires = next_fire_times("0 2 * * *", "Europe/Sofia", now, 3)
    assert [f.isoformat() for f in fires] == [
        "2025-03-30T02:00:00+02:00",
        "2025-03-31T02:00:00+03:00",
        "2025-04-01T02:00:00+03:00",
    ]
    # 03:30 does not exist on the spring-forward day in Sofia (03:00 -> 04:00).
    gap = next_fire_times("30 3 * * *", "Europe/Sofia", now, 2)
    assert gap[0].date().isoformat() == "2025-03-30" and gap[0].hour == 4
    assert next_fire_times("0 2 * * *", "UTC", now, 0) == []
