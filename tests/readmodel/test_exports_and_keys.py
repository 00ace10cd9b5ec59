"""Export records, cursors and next fire times."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from streamproc.events import payloads as p
from streamproc.readmodel import keys
from streamproc.readmodel.exports import Exports, payload_digest
from streamproc.readmodel.nextfire import next_fire_times
from tests.readmodel.util import Log


def test_one_export_record_per_tenant_kind_and_id() -> None:
    log = Log()
    fe = p.FeedserExport(export_id="e1", changed_product_keys=["pkg:deb/debian/openssl"])
    seq = log.emit("export.feedser", fe)
    rec = log.rm.export("t1", "feedser", "e1")
    assert rec is not None and rec.seq == seq and rec.payload_sha256 == payload_digest(fe)
    assert log.rm.export("t1", "vexer", "e1") is None
    assert log.rm.export("t2", "feedser", "e1") is None
    again = log.emit("export.feedser", fe)
    assert log.rejection(again, Exports.name) == "duplicate_export"
    log.emit("export.vexer", p.VexerExport(export_id="e1"))
    assert log.rm.export("t1", "vexer", "e1") is not None


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
