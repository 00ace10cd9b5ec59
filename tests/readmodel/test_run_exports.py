"""The exports a run covers (one key each, a bounded summary in the run) and the impact
cursors that planned runs move — folded purely, and the same as the planner's cursors."""

from __future__ import annotations

from streamproc.events import payloads as p
from streamproc.events.envelope import encode
from streamproc.planner.exports import PlannerExports
from streamproc.planner.records import Cursor
from streamproc.readmodel.records import CursorRecord
from streamproc.readmodel.run_exports import EXPORTS_SHOWN
from streamproc.runtime.projection import Folder
from streamproc.state import keys
from streamproc.state.store import MemoryStore
from tests.readmodel.util import Log

NAME = "rm_runs"


def export(export_id: str, source: str = "feedser") -> p.FeedserExport:
    return p.FeedserExport(export_id=export_id, changed_product_keys=["pkg:pypi/x"], source=source)


def storm_run(run_id: str, refs: list[str]) -> p.RunRequested:
    return p.RunRequested(
        run_id=run_id,
        trigger="feedser",
        reason=p.RunReason(feedser_export_ids=refs, text=f"{len(refs)} coalesced"),
        requested_by="planner",
    )


def fold_exports(log: Log, ids: list[str], base_ms: int) -> list[str]:
    """Each export at its own HLC time, in the order given; their refs."""
    log.fold(*(log.event("export.feedser", export(x), ms=base_ms + i) for i, x in enumerate(ids)))
    return [f"feedser:{x}" for x in ids]


def test_a_run_keeps_every_export_one_key_each_and_a_bounded_summary() -> None:
    log = Log()
    # recorded in this order, named by the run sorted by ref (as the planner names them)
    ids = [f"2026-01-05.{n}" for n in (9, 10, 2, 30, 1, 7, 8)]
    refs = fold_exports(log, ids, 1_800_000_000_000)
    log.emit("run.requested", storm_run("r1", sorted(refs)))
    run = log.rm.run("t1", "r1")
    assert run is not None
    why = run.reason
    assert why.export_count == 7
    assert why.exports == refs[:EXPORTS_SHOWN], "the first few, in the order recorded"
    assert why.feedser_export_id == "2026-01-05.9", "the first recorded, as its sender named it"
    assert why.vexer_export_id is None
    assert why.cursor == "2026-01-05.8", "the last recorded"
    page = log.rm.run_exports("t1", "r1", limit=3)
    seen = [x.ref for x in page.items]
    while page.next_cursor:
        page = log.rm.run_exports("t1", "r1", limit=3, cursor=page.next_cursor)
        seen += [x.ref for x in page.items]
    assert seen == refs
    first = log.rm.run_exports("t1", "r1", limit=1).items[0]
    assert (first.kind, first.export_id, first.ms) == ("feedser", "2026-01-05.9", 1_800_000_000_000)


def test_an_export_the_view_never_recorded_is_listed_last_and_moves_no_cursor() -> None:
    log = Log()
    refs = fold_exports(log, ["a"], 1_800_000_000_000)
    log.emit("run.requested", storm_run("r1", ["feedser:ghost", *refs]))
    run = log.rm.run("t1", "r1")
    assert run is not None
    assert [x.ref for x in log.rm.run_exports("t1", "r1", limit=5).items] == [
        "feedser:a",
        "feedser:ghost",
    ]
    assert run.reason.cursor == "a"


def plan(run_id: str) -> p.RunPlanned:
    return p.RunPlanned(run_id=run_id, trigger="feedser")


def test_a_planned_run_moves_the_cursor_forward_only_and_a_cancel_before_the_plan_does_not() -> (
    None
):
    log = Log()
    assert log.rm.impact_cursor("t1") == CursorRecord()
    late = fold_exports(log, ["late"], 1_800_000_000_500)
    early = fold_exports(log, ["early"], 1_800_000_000_000)
    log.emit("run.requested", storm_run("r-late", late))
    log.emit("run.requested", storm_run("r-early", early))
    log.emit("run.planned", plan("r-late"))
    cur = log.rm.impact_cursor("t1")
    assert (cur.feedser_export_id, cur.feedser_last_export_id) == ("late", "feedser:late")
    assert cur.updated_ms is not None and cur.vexer_export_id is None
    log.emit("run.planned", plan("r-early"))  # an earlier export: the cursor stays
    assert log.rm.impact_cursor("t1") == cur
    newer = fold_exports(log, ["newer"], 1_800_000_001_000)
    log.emit("run.requested", storm_run("r-cancelled", newer))
    log.emit("run.cancel_requested", p.RunCancelRequested(run_id="r-cancelled"))
    log.emit("run.planned", plan("r-cancelled"))
    assert log.rm.impact_cursor("t1") == cur, "cancelled before its plan: no advance"
    assert log.rm.impact_cursor("t2") == CursorRecord(), "per tenant"


def test_a_second_plan_of_a_queued_run_is_an_invalid_transition() -> None:
    log = Log()
    log.emit("run.requested", p.RunRequested(run_id="r1", trigger="manual"))
    log.emit("run.planned", p.RunPlanned(run_id="r1", trigger="manual"))
    seq = log.emit("run.planned", p.RunPlanned(run_id="r1", trigger="manual"))
    assert log.rejection(seq, NAME) == "invalid_transition"


def test_the_read_models_cursor_is_the_planners() -> None:
    """Both fold the same events by the shared rule: the same refs and times."""
    log = Log()
    planner = MemoryStore()
    pl = PlannerExports()
    folder = Folder(planner, [pl], "planner")
    events = []
    for n in range(6):
        events.append(log.event("export.feedser", export(f"e{n}"), ms=1_800_000_000_000 + n))
    events.append(log.event("run.requested", storm_run("r1", ["feedser:e3", "feedser:e1"])))
    events.append(log.event("run.requested", storm_run("r2", ["feedser:e0", "feedser:e2"])))
    events.append(log.event("run.planned", plan("r2")))
    events.append(log.event("run.planned", plan("r1")))
    log.fold(*events)
    folder.apply(
        [(i + 1, "x", encode(e)) for i, e in enumerate(events)], keys.Checkpoint("S", "e", 10)
    )
    theirs: Cursor = pl.cursor("t1")
    ours = log.rm.impact_cursor("t1")
    assert (
        (ours.feedser_last_export_id, ours.feedser_ms)
        == (
            theirs.feedser_last_export_id,
            theirs.feedser_ms,
        )
        == ("feedser:e3", 1_800_000_000_003)
    )
