"""One schedule record type under the read model's and the planner's: shared fields declared
once, and records stored before it existed still decode."""

from __future__ import annotations

import msgspec

from streamproc.events import payloads as p
from streamproc.planner import records as planner
from streamproc.projections.schedule import ScheduleBase
from streamproc.readmodel import records as readmodel

SHARED = [f.name for f in msgspec.structs.fields(ScheduleBase)]


def test_both_stored_records_extend_the_shared_one() -> None:
    for record in (readmodel.ScheduleRecord, planner.ScheduleView):
        assert issubclass(record, ScheduleBase)
        assert [f.name for f in msgspec.structs.fields(record)][: len(SHARED)] == SHARED


def test_a_read_model_record_in_the_earlier_field_order_decodes() -> None:
    """Read-model records were written with ``name`` and ``notify`` among the shared fields:
    msgpack maps are keyed by name, so existing state directories read the same."""
    earlier = {
        "id": "s1",
        "tenant": "t1",
        "name": "nightly",
        "cron": "0 2 * * *",
        "timezone": "UTC",
        "mode": "analysis-only",
        "selection": msgspec.to_builtins(p.Selection()),
        "only_if": msgspec.to_builtins(p.OnlyIf()),
        "notify": msgspec.to_builtins(p.NotifyRule()),
        "limits": msgspec.to_builtins(p.Limits()),
        "subscriptions": ["feedser"],
        "paused": True,
        "deleted": False,
        "created_by": "alice",
        "updated_by": "bob",
        "created_ms": 1,
        "updated_ms": 2,
        "deleted_ms": None,
        "version": 7,
    }
    rec = readmodel.decode_schedule(msgspec.msgpack.encode(earlier))
    assert msgspec.to_builtins(rec) == earlier


def test_the_planner_record_is_stored_as_before() -> None:
    """Its fields were already the shared ones followed by its own: the bytes are unchanged."""
    rec = planner.ScheduleView(id="s1", tenant="t1", cron="0 2 * * *", timezone="UTC")
    stored = msgspec.msgpack.decode(planner.encode(rec))
    assert list(stored) == [*SHARED, "active_since_ms", "last_fired_ms"]
