"""Schedules fold: versions, patches, pause/resume, soft delete, and named rejections."""

from __future__ import annotations

from streamproc.events import payloads as p
from streamproc.readmodel.schedules import Schedules
from tests.readmodel.util import Log, created

NAME = Schedules.name


def test_create_records_version_time_and_enabled_state() -> None:
    log = Log()
    seq = log.emit("schedule.created", created(enabled=False, created_by="alice"))
    rec = log.rm.schedule("t1", "s1")
    assert rec is not None
    assert rec.version == seq == 1
    assert rec.paused and not rec.deleted
    assert rec.created_by == rec.updated_by == "alice"
    assert rec.created_ms == rec.updated_ms


def test_update_patches_only_given_fields_and_bumps_version() -> None:
    log = Log()
    log.emit("schedule.created", created())
    log.emit("schedule.created", created("other"))
    seq = log.emit(
        "schedule.updated",
        p.ScheduleUpdated(schedule_id="s1", cron="*/5 * * * *", updated_by="bob"),
    )
    rec = log.rm.schedule("t1", "s1")
    assert rec is not None
    assert (rec.cron, rec.name, rec.timezone, rec.version) == ("*/5 * * * *", "nightly", "UTC", seq)
    assert rec.updated_by == "bob"
    other = log.rm.schedule("t1", "other")
    assert other is not None and other.version == 2


def test_updates_never_create() -> None:
    log = Log()
    seq = log.emit("schedule.updated", p.ScheduleUpdated(schedule_id="ghost", name="x"))
    assert log.rm.schedule("t1", "ghost") is None
    assert log.rejection(seq, NAME) == "unknown_schedule"
    for verb in ("paused", "resumed", "deleted"):
        seq = log.emit(f"schedule.{verb}", p.ScheduleStateChange(schedule_id="ghost"))
        assert log.rejection(seq, NAME) == "unknown_schedule"
    assert log.rm.schedule("t1", "ghost") is None


def test_pause_resume_and_impossible_repeats() -> None:
    log = Log()
    log.emit("schedule.created", created())
    assert (
        log.rejection(log.emit("schedule.resumed", p.ScheduleStateChange(schedule_id="s1")), NAME)
        == "not_paused"
    )
    log.emit("schedule.paused", p.ScheduleStateChange(schedule_id="s1", by="ops"))
    rec = log.rm.schedule("t1", "s1")
    assert rec is not None and rec.paused and rec.version == 3
    seq = log.emit("schedule.paused", p.ScheduleStateChange(schedule_id="s1"))
    assert log.rejection(seq, NAME) == "already_paused"
    rec2 = log.rm.schedule("t1", "s1")
    assert rec2 is not None and rec2.version == 3, "a rejected event changes nothing"
    log.emit("schedule.resumed", p.ScheduleStateChange(schedule_id="s1"))
    rec3 = log.rm.schedule("t1", "s1")
    assert rec3 is not None and not rec3.paused


def test_soft_delete_keeps_the_record_and_refuses_later_edits_and_recreation() -> None:
    log = Log()
    log.emit("schedule.created", created())
    log.emit("schedule.deleted", p.ScheduleStateChange(schedule_id="s1", by="ops"))
    rec = log.rm.schedule("t1", "s1")
    assert rec is not None and rec.deleted and rec.deleted_ms is not None
    seq = log.emit("schedule.updated", p.ScheduleUpdated(schedule_id="s1", name="again"))
    assert log.rejection(seq, NAME) == "unknown_schedule"
    seq = log.emit("schedule.created", created())
    assert log.rejection(seq, NAME) == "schedule_exists"
    assert log.rm.schedules("t1", limit=10).items == []
    assert [r.id for r in log.rm.schedules("t1", limit=10, include_deleted=True).items] == ["s1"]


def test_tenants_are_separate_keyspaces() -> None:
    log = Log()
    log.emit("schedule.created", created(), tenant="t1")
    seq = log.emit("schedule.updated", p.ScheduleUpdated(schedule_id="s1", name="x"), tenant="t2")
    assert log.rejection(seq, NAME) == "unknown_schedule"
    log.emit("schedule.created", created(), tenant="t2")
    a, b = log.rm.schedule("t1", "s1"), log.rm.schedule("t2", "s1")
    assert a is not None and b is not None and a.version != b.version


def test_several_events_of_one_schedule_in_one_batch() -> None:
    log = Log()
    log.fold(
        log.event("schedule.created", created()),
        log.event("schedule.paused", p.ScheduleStateChange(schedule_id="s1")),
        log.event("schedule.paused", p.ScheduleStateChange(schedule_id="s1")),
        log.event("schedule.updated", p.ScheduleUpdated(schedule_id="s1", name="renamed")),
    )
    rec = log.rm.schedule("t1", "s1")
    assert rec is not None and rec.paused and rec.name == "renamed" and rec.version == 4
    assert log.rejection(3, NAME) == "already_paused"
