"""The planner's folds, pure: schedules, export storms, claims and cursors, run markers,
the spill backlog, last reports — and coalescing decided by HLC time alone."""

from __future__ import annotations

import msgspec

from streamproc.events import payloads as p
from streamproc.ids import export_run_id, spill_run_id
from streamproc.planner.changes import coalesce, feedser_change
from streamproc.planner.records import CRITICAL, KEV, ExportRecord
from streamproc.state.digest import state_digest
from tests.planner.util import T0, Log, created, event, feedser, lib


def run_requested(run_id: str, trigger: str = "manual", **kw: object) -> p.RunRequested:
    return p.RunRequested(run_id=run_id, trigger=trigger, **kw)  # type: ignore[arg-type]


def planned(run_id: str, queued: int = 1, spilled: int = 0) -> p.RunPlanned:
    return p.RunPlanned(
        run_id=run_id, trigger="feedser", stats=p.RunStats(queued=queued, spilled=spilled)
    )


def test_schedule_lifecycle_and_rejections() -> None:
    log = Log()
    log.fold(event("schedule.created", created("s1", subscriptions=["feedser"]), ms=T0))
    s = log.state.schedules.get("t1", "s1")
    assert s is not None and s.active and s.active_since_ms == T0 and s.subscriptions == ["feedser"]
    seq = log.fold(event("schedule.created", created("s1"), ms=T0 + 1))
    assert log.rejection(seq, "pl_schedules") == "schedule_exists"
    log.fold(event("schedule.paused", p.ScheduleStateChange(schedule_id="s1"), ms=T0 + 2))
    assert not log.state.schedules.get("t1", "s1").active  # type: ignore[union-attr]
    seq = log.fold(event("schedule.paused", p.ScheduleStateChange(schedule_id="s1")))
    assert log.rejection(seq, "pl_schedules") == "already_paused"
    log.fold(event("schedule.resumed", p.ScheduleStateChange(schedule_id="s1"), ms=T0 + 3))
    s = log.state.schedules.get("t1", "s1")
    assert s is not None and s.active and s.active_since_ms == T0 + 3
    log.fold(
        event(
            "schedule.updated",
            p.ScheduleUpdated(schedule_id="s1", limits=p.Limits(max_jobs=5)),
            ms=T0 + 4,
        )
    )
    assert log.state.schedules.get("t1", "s1").active_since_ms == T0 + 3  # type: ignore[union-attr]
    log.fold(
        event("schedule.updated", p.ScheduleUpdated(schedule_id="s1", cron="5 2 * * *"), ms=T0 + 5)
    )
    s = log.state.schedules.get("t1", "s1")
    assert s is not None and s.cron == "5 2 * * *" and s.active_since_ms == T0 + 5
    assert s.limits.max_jobs == 5
    log.fold(event("schedule.deleted", p.ScheduleStateChange(schedule_id="s1")))
    assert not log.state.schedules.get("t1", "s1").active  # type: ignore[union-attr]
    seq = log.fold(event("schedule.updated", p.ScheduleUpdated(schedule_id="s1", cron="1 1 * * *")))
    assert log.rejection(seq, "pl_schedules") == "unknown_schedule"


def test_cron_tick_records_latest_fire_time() -> None:
    log = Log()
    log.fold(event("schedule.created", created("s1")))
    tick = run_requested(
        "c1", "cron", schedule_id="s1", reason=p.RunReason(scheduled_for="2026-01-02T02:00:00Z")
    )
    older = run_requested(
        "c0", "cron", schedule_id="s1", reason=p.RunReason(scheduled_for="2026-01-01T02:00:00Z")
    )
    log.fold(event("run.requested", tick), event("run.requested", older))
    s = log.state.schedules.get("t1", "s1")
    assert s is not None and s.last_fired_ms == 1_767_319_200_000


def test_export_storm_folds_once() -> None:
    log = Log()
    x = feedser("fx-1", [lib(1)])
    seqs = [log.fold(event("export.feedser", x, ms=T0 + i)) for i in range(50)]
    assert [log.rejection(s, "pl_exports") for s in seqs[1:]] == ["duplicate_export"] * 49
    pending = log.state.exports.pending[("t1", "feedser")]
    assert list(pending) == ["fx-1"] and pending["fx-1"].ms == T0
    # the same id from the other source, or another tenant, is another export
    log.fold(event("export.vexer", p.VexerExport(export_id="fx-1")))
    log.fold(event("export.feedser", x, tenant="t2"))
    assert len(log.state.exports.pending) == 3


def test_two_sources_may_use_one_export_id() -> None:
    """Export ids are the sender's: a second Feedser source sending one first must not make
    the planner drop the first source's export of the same id as a duplicate."""
    log = Log()
    other = feedser("fx-1", [lib(9)], source="feedser-b")
    mine = feedser("fx-1", [lib(1)], source="feedser-a")
    seqs = [log.fold(event("export.feedser", x, ms=T0 + i)) for i, x in enumerate([other, mine])]
    assert [log.rejection(s, "pl_exports") for s in seqs] == [None, None]
    pending = log.state.exports.pending[("t1", "feedser")]
    assert sorted(pending) == ["feedser-a:fx-1", "feedser-b:fx-1"]
    assert pending["feedser-a:fx-1"].keys == [lib(1)]
    seq = log.fold(event("export.feedser", mine, ms=T0 + 5))
    assert log.rejection(seq, "pl_exports") == "duplicate_export"


def test_feedser_change_tags_kev_and_critical_keys() -> None:
    x = p.FeedserExport(
        export_id="e",
        changed_product_keys=[lib(1)],
        kev=["CVE-K"],
        advisories=[
            p.AdvisoryChange(vuln_id="CVE-K", product_keys=[lib(2)]),
            p.AdvisoryChange(vuln_id="CVE-C", product_keys=[lib(3)], severity="critical"),
            p.AdvisoryChange(vuln_id="CVE-L", product_keys=[lib(4)], severity="low"),
        ],
    )
    change, flags = feedser_change(x)
    assert change.keys == sorted([lib(1), lib(2), lib(3), lib(4)])
    assert change.kev_keys == [lib(2)] and change.critical_keys == [lib(3)]
    assert change.kev_vulns == ["CVE-K"] and flags == {"CVE-K": KEV, "CVE-C": CRITICAL}


def test_vexer_claims_on_known_kev_vulns_are_tagged() -> None:
    log = Log()
    log.fold(event("export.feedser", p.FeedserExport(export_id="f", kev=["CVE-K"])))
    claims = [
        p.ChangedClaim(product_key=lib(1), vuln_id="CVE-K", status="not_affected→affected"),
        p.ChangedClaim(product_key=lib(2), vuln_id="CVE-X", status="affected→fixed"),
    ]
    log.fold(event("export.vexer", p.VexerExport(export_id="v", changed_claims=claims)))
    rec = log.state.exports.pending[("t1", "vexer")]["v"]
    assert rec.keys == [lib(1), lib(2)] and rec.kev_keys == [lib(1)]


def test_claim_plan_cursor_and_release_in_the_same_batch() -> None:
    log = Log()
    log.fold(
        event("export.feedser", feedser("a", [lib(1)]), ms=T0),
        event("export.feedser", feedser("b", [lib(2)]), ms=T0 + 5),
    )
    run = export_run_id("t1", ["b", "a"])
    req = run_requested(run, "feedser", reason=p.RunReason(feedser_export_ids=["a", "b"]))
    log.fold(event("run.requested", req, ms=T0 + 10))
    st = log.state
    assert ("t1", "feedser") not in st.exports.pending
    assert [r.run_id for r in st.runs.pending.values()] == [run]
    assert st.exports.cursor("t1").feedser_last_export_id is None
    # the claim opens the source's next coalescing window, at the request's HLC time
    assert st.exports.cursor("t1").window_ms("feedser") == T0 + 10
    assert st.exports.cursor("t1").window_ms("vexer") is None
    log.fold(event("run.requested", req, ms=T0 + 20))  # a repeat claims nothing
    assert log.state.exports.cursor("t1").window_ms("feedser") == T0 + 10
    log.fold(event("run.planned", planned(run), ms=T0 + 11))
    st = log.state
    assert st.runs.pending == {} and st.runs.is_settled("t1", run)
    assert st.exports.cursor("t1").feedser_last_export_id == "b"
    recs = st.exports.exports("t1", [("feedser", "a", 1), ("feedser", "b", 1)])
    assert all(r.released and r.keys == [] and r.run_id == run for r in recs)
    seq = log.fold(event("run.planned", planned(run), ms=T0 + 12))
    assert log.rejection(seq, "pl_runs") == "already_planned"
    seq = log.fold(event("export.feedser", feedser("a", [lib(1)]), ms=T0 + 13))
    assert log.rejection(seq, "pl_exports") == "duplicate_export"


def test_spill_backlog_becomes_a_continuation_run() -> None:
    log = Log()
    log.fold(event("export.feedser", feedser("a", [lib(1)])))
    run = export_run_id("t1", ["a"])
    req = run_requested(run, "feedser", reason=p.RunReason(feedser_export_ids=["a"]))
    log.fold(event("run.requested", req, ms=T0 + 1))
    log.fold(event("run.planned", planned(run, queued=10, spilled=5), ms=T0 + 2))
    child = spill_run_id(run, 10)
    b = log.state.runs.backlog[("t1", child)]
    assert (b.offset, b.spilled, b.root_run_id, b.planned_ms, b.cause_ms) == (
        10,
        5,
        run,
        T0 + 2,
        T0 + 1,
    )
    assert log.state.runs.backlog_images() == {"t1": 5}
    assert log.state.exports.exports("t1", [("feedser", "a", 1)])[0].keys == [lib(1)]  # kept
    child_req = msgspec.structs.replace(req, run_id=child)
    log.fold(event("run.requested", child_req, ms=T0 + 3))
    rec = log.state.runs.pending[("t1", child)]
    assert (rec.offset, rec.root_run_id, rec.cause_ms) == (10, run, T0 + 1)
    assert log.state.runs.backlog == {}
    log.fold(event("run.planned", planned(child, queued=5), ms=T0 + 4))
    assert log.state.exports.exports("t1", [("feedser", "a", 1)])[0].released


def test_cancel_stops_a_pending_run_and_its_spill_chain() -> None:
    log = Log()
    log.fold(event("run.requested", run_requested("m1")))
    log.fold(event("run.cancel_requested", p.RunCancelRequested(run_id="m1")))
    # Cancelled before its plan: still to be planned (empty), so that the runner can end it.
    assert log.state.runs.record("t1", "m1").state == "cancelled"  # type: ignore[union-attr]
    assert list(log.state.runs.pending) == [("t1", "m1")]
    assert not log.state.runs.is_settled("t1", "m1")
    log.fold(event("run.planned", planned("m1", queued=0)))
    assert log.state.runs.pending == {} and log.state.runs.is_settled("t1", "m1")
    log.fold(event("run.requested", run_requested("m2")))
    log.fold(event("run.planned", planned("m2", queued=1, spilled=3)))
    assert log.state.runs.backlog
    log.fold(event("run.cancel_requested", p.RunCancelRequested(run_id="m2")))
    assert log.state.runs.backlog == {}


def test_last_reports_keep_the_latest_ok_verdict() -> None:
    log = Log()
    d = "sha256:" + "a" * 64

    def verdict(status: str = "ok", **kw: object) -> p.VerdictRecorded:
        return p.VerdictRecorded(run_id="r", segment_id="s", digest=d, status=status, **kw)  # type: ignore[arg-type]

    log.fold(event("verdict.recorded", verdict(kev_hits=["CVE-1"]), ms=T0 + 10))
    log.fold(event("verdict.recorded", verdict(new_criticals=1), ms=T0 + 5))  # older: ignored
    log.fold(event("verdict.recorded", verdict("failed"), ms=T0 + 20))
    assert log.state.reports.get("t1")[d] == (T0 + 10, KEV)


def test_batching_does_not_change_state() -> None:
    events = [
        event("schedule.created", created("s1")),
        *[event("export.feedser", feedser(f"x{i % 7}", [lib(i)]), ms=T0 + i) for i in range(30)],
        event(
            "run.requested",
            run_requested("r", "feedser", reason=p.RunReason(feedser_export_ids=["x1", "x2"])),
        ),
        event("run.planned", planned("r", queued=3, spilled=2)),
    ]
    one, many = Log(), Log()
    one.fold(*events)
    for e in events:
        many.fold(e)
    assert state_digest(one.store) == state_digest(many.store)


def rec(export_id: str, ms: int) -> ExportRecord:
    return ExportRecord(
        export_id=export_id,
        source="feedser",
        tenant="t1",
        ms=ms,
        hlc=f"{ms}:0:n",
        event_id=export_id,
    )


def test_coalescing_by_hlc_time_is_order_independent() -> None:
    exports = [
        rec("e3", 1_000 + 29_999),
        rec("e1", 1_000),
        rec("e2", 1_000 + 10_000),
        rec("e4", 1_000 + 30_001),
    ]
    groups = coalesce(exports, 30_000)
    # e1 finds the system quiet: at once; e2, e3 within its window: when it closes (31,000);
    # e4 within the window that run opens
    assert [g.export_ids for g in groups] == [["e1"], ["e2", "e3"], ["e4"]]
    assert [g.due_ms for g in groups] == [1_000, 31_000, 61_000]
    assert groups[1].latest.export_id == "e3"
    assert groups[1].run_id == export_run_id("t1", ["e3", "e2"])
    assert [g.export_ids for g in coalesce(exports[::-1], 30_000)] == [
        ["e1"], ["e2", "e3"], ["e4"]
    ]  # fmt: skip
    assert [g.export_ids for g in coalesce(exports, 0)] == [["e1"], ["e2"], ["e3"], ["e4"]]
    same_ms = [rec("b", 5), rec("a", 5)]
    assert [g.export_ids for g in coalesce(same_ms, 0)] == [["a", "b"]]
    # a run requested at 20,000 left its window open until 50,000
    assert [(g.export_ids, g.due_ms) for g in coalesce(exports, 30_000, 20_000)] == [
        (["e1", "e2", "e3", "e4"], 50_000)
    ]
