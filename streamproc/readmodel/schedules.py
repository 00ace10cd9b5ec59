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
from streamproc.readmodel import keys
from streamproc.readmodel.records import ScheduleRecord, decode_schedule, encode
from streamproc.runtime.fold import folds
from streamproc.runtime.projection import Projection, Rejection
from streamproc.state.tx import Tx

CF = RM_SCHEDULES


def physical_ms(event: Envelope) -> int:
    """Wall-clock part of the event's HLC stamp: the event's own time, so folds stay pure."""
    return int(event.hlc.split(":", 1)[0])


def created(event: Envelope, c: p.ScheduleCreated, seq: int) -> ScheduleRecord:
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


class Schedules(Projection):
    """One record per schedule; each fold checks, then writes the next state (a new
    record: the stored one is never mutated)."""

    name: ClassVar[str] = CF
    creates: ClassVar[frozenset[str]] = frozenset({"schedule.created"})
    families: ClassVar[tuple[str, ...]] = (CF,)
    version: ClassVar[int] = 2
    """2: the notify rule stored with the specification's ``includeKEV``."""

    @staticmethod
    def _existing(tx: Tx, event: Envelope, schedule_id: str) -> ScheduleRecord:
        """The schedule an update is for: ``unknown_schedule`` if absent or deleted."""
        raw = tx.table(CF).get(keys.key(event.tenant, schedule_id))
        rec = decode_schedule(raw) if raw is not None else None
        if rec is None or rec.deleted:
            raise Rejection("unknown_schedule", f"{event.kind} for a schedule that does not exist")
        return rec

    @staticmethod
    def _put(tx: Tx, event: Envelope, rec: ScheduleRecord) -> None:
        tx.table(CF).put(keys.key(event.tenant, rec.id), encode(rec))

    @folds(p.ScheduleCreated)
    def _created(self, tx: Tx, e: Envelope, c: p.ScheduleCreated) -> None:
        if tx.table(CF).get(keys.key(e.tenant, c.schedule_id)) is not None:
            raise Rejection("schedule_exists", f"schedule {c.schedule_id} already exists")
        self._put(tx, e, created(e, c, tx.seq))

    @folds(p.ScheduleUpdated)
    def _updated(self, tx: Tx, e: Envelope, u: p.ScheduleUpdated) -> None:
        rec = self._existing(tx, e, u.schedule_id)
        changes = {f: getattr(u, f) for f in p.SCHEDULE_PATCHABLE if getattr(u, f) is not UNSET}
        self._put(
            tx,
            e,
            msgspec.structs.replace(
                rec, **changes, updated_by=u.updated_by, updated_ms=physical_ms(e), version=tx.seq
            ),
        )

    @folds(p.ScheduleStateChange, kinds=("schedule.paused",))
    def _paused(self, tx: Tx, e: Envelope, s: p.ScheduleStateChange) -> None:
        rec = self._existing(tx, e, s.schedule_id)
        if rec.paused:
            raise Rejection("already_paused", f"schedule {rec.id} is already paused")
        self._put(tx, e, self._changed(rec, e, s, tx.seq, paused=True))

    @folds(p.ScheduleStateChange, kinds=("schedule.resumed",))
    def _resumed(self, tx: Tx, e: Envelope, s: p.ScheduleStateChange) -> None:
        rec = self._existing(tx, e, s.schedule_id)
        if not rec.paused:
            raise Rejection("not_paused", f"schedule {rec.id} is not paused")
        self._put(tx, e, self._changed(rec, e, s, tx.seq, paused=False))

    @folds(p.ScheduleStateChange, kinds=("schedule.deleted",))
    def _deleted(self, tx: Tx, e: Envelope, s: p.ScheduleStateChange) -> None:
        rec = self._existing(tx, e, s.schedule_id)
        ms = physical_ms(e)
        self._put(tx, e, self._changed(rec, e, s, tx.seq, deleted=True, deleted_ms=ms))

    @staticmethod
    def _changed(
        rec: ScheduleRecord, e: Envelope, s: p.ScheduleStateChange, seq: int, **fields: object
    ) -> ScheduleRecord:
        return msgspec.structs.replace(
            rec, **fields, updated_by=s.by, updated_ms=physical_ms(e), version=seq
        )
