"""Read-model retention as pure folds: what leaves, what stays, and that the result does not
depend on how the log is cut into batches (so a replay equals the live state)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from prometheus_client import REGISTRY

from streamproc.config import ConfigError
from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope, encode
from streamproc.readmodel import Exports, Runs, Schedules
from streamproc.readmodel.acks import CF as ACKS_CF
from streamproc.readmodel.acks import DeltaAcks
from streamproc.readmodel.queries import ReadModel
from streamproc.readmodel.retention import EXPIRY_CF, FINISHED_PREFIX
from streamproc.readmodel.runs import BY_TIME_CF, CF, DELTAS_CF
from streamproc.readmodel.settings import retention_days
from streamproc.roles import projections_for
from streamproc.runtime.projection import Folder
from streamproc.runtime.projector import report
from streamproc.state import keys
from streamproc.state.digest import state_digest
from streamproc.state.store import MemoryStore
from tests.helpers import env_configuration
from tests.readmodel.retention_scenario import (
    EXPECTED_AFTER,
    SEQ_GHOST,
    SEQ_LATE_VERDICT,
    at,
    requested,
    scenario,
    verdict,
)


def fold(events: Sequence[Envelope], batch: int, days: int = 180) -> MemoryStore:
    store = MemoryStore()
    folder = Folder(store, [Schedules(), Runs(retention_days=days), Exports(), DeltaAcks()], "test")
    for i in range(0, len(events), batch):
        chunk = events[i : i + batch]
        msgs = [(i + j + 1, f"x.{e.kind}", encode(e)) for j, e in enumerate(chunk)]
        folded = folder.apply(msgs, keys.Checkpoint("S", "epoch", i + len(chunk)))
        report("test", folded, log_each=False)  # metrics are counted from the result
    return store


def listed(rm: ReadModel, tenant: str) -> list[str]:
    return [r.id for r in rm.runs(tenant, limit=100).items]


def pruned_total(tenant: str) -> float:
    return REGISTRY.get_sample_value("scheduler_runs_pruned_total", {"tenant": tenant}) or 0.0


def test_finished_runs_leave_with_their_detail_running_ones_stay() -> None:
    before = pruned_total("t1"), pruned_total("t2")
    store = fold(scenario(), batch=1)
    rm = ReadModel(store)
    assert {t: listed(rm, t) for t in ("t1", "t2")} == EXPECTED_AFTER
    running = rm.run("t1", "running")
    assert running is not None and running.state == "running"
    assert rm.run("t1", "cancelled") is None and rm.run("t2", "other") is None
    recent = rm.run("t1", "recent")
    assert recent is not None and recent.state == "error"
    reborn = rm.run("t1", "old")
    assert reborn is not None and reborn.state == "planning" and reborn.stats.deltas == 0
    assert rm.deltas("t1", "old", limit=10).items == [], "the pruned run's deltas went too"
    assert list(store.scan(DELTAS_CF)) == []
    assert len(list(store.scan(CF))) == len(list(store.scan(BY_TIME_CF))) == 3
    index = [k for k, _ in store.scan(EXPIRY_CF, FINISHED_PREFIX)]
    assert len(index) == 1, "only the one finished run still held is indexed"
    late = rm.rejection(SEQ_LATE_VERDICT, Runs.name)
    assert late is not None and late.reason == "unknown_run"
    ghost = rm.rejection(SEQ_GHOST, Runs.name)
    assert ghost is not None and ghost.reason == "unknown_run"
    assert (pruned_total("t1") - before[0], pruned_total("t2") - before[1]) == (2, 1)


@pytest.mark.parametrize("batch", [2, 3, 7, 100])
def test_state_is_the_same_whatever_the_batches(batch: int) -> None:
    events = scenario()
    one_by_one = state_digest(fold(events, batch=1))
    assert state_digest(fold(events, batch=batch)) == one_by_one


def test_an_expired_run_reads_as_gone_inside_the_batch_that_expires_it() -> None:
    events = [
        at(0, "run.requested", requested("r")),
        at(1, "run.completed", p.RunCompleted(run_id="r")),
        at(200, "export.feedser", p.FeedserExport(export_id="e")),
        at(200, "run.cancel_requested", p.RunCancelRequested(run_id="r")),
    ]
    store = fold(events, batch=len(events))
    rejected = ReadModel(store).rejection(4, Runs.name)
    assert rejected is not None and rejected.reason == "unknown_run", "not run_finished"
    assert ReadModel(store).run("t1", "r") is None


def test_idle_log_prunes_nothing_until_its_next_event() -> None:
    events = [
        at(0, "run.requested", requested("r")),
        at(1, "run.completed", p.RunCompleted(run_id="r")),
    ]
    store = MemoryStore()
    folder = Folder(store, [Schedules(), Runs(retention_days=30), Exports()], "test")
    folder.apply(
        [(i + 1, "x", encode(e)) for i, e in enumerate(events)], keys.Checkpoint("S", "e", 2)
    )
    assert ReadModel(store).run("t1", "r") is not None, "no wall clock: nothing expires alone"
    schedule = p.ScheduleCreated(schedule_id="s", name="n", cron="* * * * *", timezone="UTC")
    tick = at(31.5, "schedule.created", schedule)
    folder.apply([(3, "x", encode(tick))], keys.Checkpoint("S", "e", 3))
    assert ReadModel(store).run("t1", "r") is None


class _FailsOnce(MemoryStore):
    """A store whose next commit fails (a full disk, say), once."""

    fail = False

    def commit(self, writes: dict[str, dict[bytes, bytes | None]]) -> None:
        if self.fail:
            self.fail = False
            raise OSError("no space left on device")
        super().commit(writes)


def test_a_run_finished_after_the_index_was_found_empty_still_leaves_on_time() -> None:
    store = _FailsOnce()
    folder = Folder(store, [Schedules(), Runs(retention_days=30), Exports()], "test")
    seq = 0

    def apply(*events: Envelope) -> None:
        nonlocal seq
        msgs = [(seq + i + 1, "x", encode(e)) for i, e in enumerate(events)]
        seq += len(events)
        folder.apply(msgs, keys.Checkpoint("S", "e", seq))

    apply(at(0, "export.feedser", p.FeedserExport(export_id="e0")))  # nothing indexed yet
    apply(
        at(1, "run.requested", requested("r")), at(2, "run.completed", p.RunCompleted(run_id="r"))
    )
    for day in (10, 20, 31.9):  # batches that find nothing due
        apply(at(day, "export.feedser", p.FeedserExport(export_id=f"e{day}")))
        assert ReadModel(store).run("t1", "r") is not None
    store.fail = True  # the batch that prunes it does not commit ...
    with pytest.raises(OSError):
        apply(at(32.5, "export.feedser", p.FeedserExport(export_id="e32")))
    assert ReadModel(store).run("t1", "r") is not None
    seq -= 1
    apply(at(32.5, "export.feedser", p.FeedserExport(export_id="e32")))  # ... its retry does
    assert ReadModel(store).run("t1", "r") is None
    assert [k for k, _ in store.scan(EXPIRY_CF, FINISHED_PREFIX)] == []


def test_paging_skips_pruned_runs_and_keeps_order() -> None:
    events = []
    for i in range(12):
        events.append(at(i, "run.requested", requested(f"r{i:02}")))
        if i % 3 != 2:
            events.append(at(i + 0.5, "run.completed", p.RunCompleted(run_id=f"r{i:02}")))
    events.append(at(i, "verdict.recorded", verdict("r11", "sha256:" + "c" * 64)))
    events.append(at(186, "export.feedser", p.FeedserExport(export_id="e")))  # cutoff day 6
    rm = ReadModel(fold(events, batch=5))
    ids, cursor = [], None
    while True:
        page = rm.runs("t1", limit=2, cursor=cursor)
        ids += [r.id for r in page.items]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    kept = [f"r{i:02}" for i in range(11, -1, -1) if i >= 6 or i % 3 == 2]
    assert ids == kept
    assert listed(rm, "t1") == kept
    finished = rm.runs("t1", limit=100, states=frozenset({"completed"})).items
    assert [r.id for r in finished] == [i for i in kept if int(i[1:]) % 3 != 2]


def test_pruning_turned_off_keeps_everything() -> None:
    rm = ReadModel(fold(scenario(), batch=4, days=0))
    assert set(listed(rm, "t1")) == {"cancelled", "recent", "running", "old"}
    assert listed(rm, "t2") == ["other"]


@pytest.mark.parametrize(
    ("value", "days"), [(None, 180), ("", 180), ("1", 1), ("30", 30), (" 7 ", 7)]
)
def test_setting_is_read_with_its_default(value: str | None, days: int) -> None:
    env = {} if value is None else {"STREAMPROC_READMODEL_RETENTION_DAYS": value}
    assert retention_days(env) == days


@pytest.mark.parametrize("value", ["0", "-1", "ten", "1.5", "99999"])
def test_bad_settings_are_refused_clearly(value: str) -> None:
    with pytest.raises(ConfigError, match="STREAMPROC_READMODEL_RETENTION_DAYS"):
        retention_days({"STREAMPROC_READMODEL_RETENTION_DAYS": value})


def test_the_gateway_folds_with_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    def gateway_runs() -> Runs:
        return next(
            p for p in projections_for("gateway", env_configuration()) if isinstance(p, Runs)
        )

    assert Runs().keep_ms == 180 * 86_400_000
    monkeypatch.setenv("STREAMPROC_READMODEL_RETENTION_DAYS", "3")
    assert gateway_runs().keep_ms == 3 * 86_400_000
    monkeypatch.setenv("STREAMPROC_READMODEL_RETENTION_DAYS", "soon")
    with pytest.raises(ConfigError):
        gateway_runs()


def test_a_pruned_runs_acknowledgements_leave_with_it() -> None:
    digest = "sha256:" + "c" * 64
    ack = p.DeltaAcknowledged(run_id="r", digest=digest, by="alice", ticket="SEC-1")
    kept = p.DeltaAcknowledged(run_id="k", digest=digest, by="bob")
    seg = p.SegmentEnqueued(segment_id="g1", run_id="r", shard=0, digests=[digest])
    events = [
        at(0, "run.requested", requested("r")),
        at(0, "segment.enqueued", seg),
        at(0, "verdict.recorded", verdict("r", digest)),
        at(0, "delta.acknowledged", ack),
        at(1, "run.completed", p.RunCompleted(run_id="r")),
        at(150, "run.requested", requested("k")),
        at(
            150,
            "segment.enqueued",
            p.SegmentEnqueued(segment_id="g1", run_id="k", shard=0, digests=[digest]),
        ),
        at(150, "verdict.recorded", verdict("k", digest)),
        at(150, "delta.acknowledged", kept),
    ]
    store = fold(events, batch=1)
    rm = ReadModel(store)
    assert rm.acknowledgement("t1", "r", digest) is not None, "not due yet"
    store = fold([*events, at(200, "export.feedser", p.FeedserExport(export_id="e"))], batch=1)
    rm = ReadModel(store)
    assert rm.run("t1", "r") is None
    assert rm.acknowledgement("t1", "r", digest) is None
    assert [k for k, _ in store.scan(ACKS_CF)] == [b"t1\x00k\x00" + digest.encode()]
