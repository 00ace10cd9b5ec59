"""Schedules: created, updated, paused, resumed, soft-deleted; version = last stream sequence.

Updates never create: an event for an unknown or deleted schedule is rejected with
``unknown_schedule``. Next fire times are not stored — they depend on the clock, so they are
computed when read (:mod:`streamproc.readmodel.nextfire`).
"""

from __future__ import annotations

from typing import ClassVar

import msgspec
from msgspec import UNSET

from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope
from streamproc.names import RM_SCHEDULES
from streamproc.projection import Projection, Rejection, Tx
from streamproc.readmodel import keys
from streamproc.readmodel.records import ScheduleRecord, decode_schedule, encode

CF = RM_SCHEDULES


def physical_ms(event: Envelope) -> int:
    """Wall-clock part of the event's HLC stamp: the event's own time, so folds stay pure."""
    return int(event.hlc.split(":", 1)[0])


def created(event: Envelope, seq: int) -> ScheduleRecord:
    c = event.payload
    assert isinstance(c, p.ScheduleCreated)
    ms = physical_ms(event)
    return ScheduleRecord(
        id=c.schedule_id,
        tenant=event.tenant,
        name=c.name,
        cron=c.cron,
        timezone=c.timezone,
        mode=c.mode,
        selection=c.selection,
        only_if=c.only_if,
        notify=c.notify,
        limits=c.limits,
        subscriptions=list(c.subscriptions),
        paused=not c.enabled,
        created_by=c.created_by,
        updated_by=c.created_by,
        created_ms=ms,
        updated_ms=ms,
        version=seq,
    )


def apply(rec: ScheduleRecord | None, event: Envelope, seq: int) -> ScheduleRecord:
    """The next state of one schedule, or :class:`Rejection` (pure; ``rec`` is not mutated)."""
    kind = event.kind
    if kind == "schedule.created":
        if rec is not None:
            raise Rejection("schedule_exists", f"schedule {rec.id} already exists")
        return created(event, seq)
    if rec is None or rec.deleted:
        raise Rejection("unknown_schedule", f"{kind} for a schedule that does not exist")
    ms = physical_ms(event)
    if kind == "schedule.updated":
        u = event.payload
        assert isinstance(u, p.ScheduleUpdated)
        changes = {f: getattr(u, f) for f in p.SCHEDULE_PATCHABLE if getattr(u, f) is not UNSET}
        return msgspec.structs.replace(
            rec, **changes, updated_by=u.updated_by, updated_ms=ms, version=seq
        )
    s = event.payload
    assert isinstance(s, p.ScheduleStateChange)
    if kind == "schedule.paused":
        if rec.paused:
            raise Rejection("already_paused", f"schedule {rec.id} is already paused")
        return msgspec.structs.replace(
            rec, paused=True, updated_by=s.by, updated_ms=ms, version=seq
        )
    if kind == "schedule.resumed":
        if not rec.paused:
            raise Rejection("not_paused", f"schedule {rec.id} is not paused")
        return msgspec.structs.replace(
            rec, paused=False, updated_by=s.by, updated_ms=ms, version=seq
        )
    if kind == "schedule.deleted":
        return msgspec.structs.replace(
            rec, deleted=True, deleted_ms=ms, updated_by=s.by, updated_ms=ms, version=seq
        )
    raise Rejection("unhandled_kind", kind)  # pragma: no cover - kinds are declared below


class Schedules(Projection):
    name: ClassVar[str] = CF
    kinds: ClassVar[frozenset[str]] = frozenset(
        {
            "schedule.created",
            "schedule.updated",
            "schedule.paused",
            "schedule.resumed",
            "schedule.deleted",
        }
    )
    creates: ClassVar[frozenset[str]] = frozenset({"schedule.created"})
    families: ClassVar[tuple[str, ...]] = (CF,)

    def fold(self, tx: Tx, event: Envelope) -> None:
        table = tx.table(CF)
        k = keys.key(event.tenant, event.payload.schedule_id)
        raw = table.get(k)
        rec = decode_schedule(raw) if raw is not None else None
        table.put(k, encode(apply(rec, event, tx.seq)))
