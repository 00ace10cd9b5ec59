"""Export revisions in the planner's folds, pure: keep last while pending, a follow-up for a
revision that arrives after its export was claimed (only what no claim covered), the
freeze that makes a replan derive the same plan, and the ids."""

from __future__ import annotations

import msgspec

from streamproc.events import payloads as p
from streamproc.ids import export_run_id
from streamproc.planner.changes import (
    Changes,
    ExportGroup,
    add_coverage,
    coalesce,
    uncovered,
)
from streamproc.planner.records import ExportRecord
from streamproc.state.digest import state_digest
from tests.planner.util import T0, Log, event, feedser, lib


def revision(export_id: str, n: int, keys: list[str], **kw: object) -> p.FeedserExport:
    return feedser(export_id, keys, revision=n, source="fs", **kw)


def claim(run_id: str, refs: list[str], revisions: dict[str, int] | None = None):  # type: ignore[no-untyped-def]
    reason = p.RunReason(feedser_export_ids=refs, revisions=revisions or {})
    return p.RunRequested(run_id=run_id, trigger="feedser", reason=reason)


def planned(run_id: str, spilled: int = 0) -> p.RunPlanned:
    return p.RunPlanned(run_id=run_id, trigger="feedser", stats=p.RunStats(spilled=spilled))


def pending(log: Log) -> dict[str, ExportRecord]:
    return log.state.exports.pending.get(("t1", "feedser"), {})


def test_a_pending_revision_is_replaced_by_the_next_one_in_its_place() -> None:
    """Keep last: revision 2 arrives while revision 1 waits in its window; the window's run
    plans revision 2 (its keys), and keeps revision 1's place (its time)."""
    log = Log()
    log.fold(event("export.feedser", revision("x", 1, [lib(1), lib(2)]), ms=T0))
    log.fold(event("export.feedser", revision("x", 2, [lib(3)]), ms=T0 + 5_000))
    (rec,) = pending(log).values()
    assert (rec.export_id, rec.revision, rec.keys, rec.ms) == ("fs:x", 2, [lib(3)], T0)
    assert log.state.exports.to_plan(rec).keys == [lib(3)], "nothing claimed: all of it"
    (group,) = coalesce(list(pending(log).values()), 30_000, T0 - 1_000)
    assert group.revisions == {"fs:x": 2}
    assert group.run_id == export_run_id("t1", ["fs:x"], {"fs:x": 2})
    assert group.run_id != export_run_id("t1", ["fs:x"]), "a new id for another revision"
    # The same revision again (a re-stamped copy) and an older one are refused.
    for n in (2, 1):
        seq = log.fold(event("export.feedser", revision("x", n, [lib(9)]), ms=T0 + 6_000))
        assert log.rejection(seq, "pl_exports") == "duplicate_export"
    seq = log.fold(event("export.feedser", revision("y", 2, [lib(9)])))
    assert log.rejection(seq, "pl_exports") == "unknown_export", "updates never create"
    assert pending(log)["fs:x"].keys == [lib(3)]


def test_a_late_revision_plans_only_what_the_claimed_one_did_not_cover() -> None:
    log = Log()
    log.fold(
        event(
            "export.feedser",
            revision("x", 1, [lib(1), lib(2)], kev=["CVE-1"]),
            ms=T0,
        )
    )
    first = export_run_id("t1", ["fs:x"])
    log.fold(event("run.requested", claim(first, ["fs:x"]), ms=T0 + 20))
    assert pending(log) == {}
    log.fold(event("run.planned", planned(first), ms=T0 + 30))
    # Revision 2: one key the first run covered, one it did not; KEV: one old, one new.
    late = revision(
        "x",
        2,
        [lib(2), lib(7)],
        kev=["CVE-1", "CVE-2"],
        advisories=[p.AdvisoryChange(vuln_id="CVE-9", product_keys=[lib(7)], severity="critical")],
    )
    log.fold(event("export.feedser", late, ms=T0 + 40_000))
    rec = pending(log)["fs:x"]
    assert (rec.revision, rec.ms) == (2, T0 + 40_000), "its own time: a new group"
    follow = log.state.exports.to_plan(rec)
    assert follow.keys == [lib(7)] and follow.kev_vulns == ["CVE-2"]
    assert follow.critical_keys == [lib(7)]
    changes = Changes.of([follow])
    assert changes.keys == {lib(7)}
    # Claimed, the follow-up's record is frozen to what it plans: a replan after a crash
    # (reading the record again) derives the same change, though the coverage grew.
    (group,) = coalesce([rec], 30_000, T0 + 20)
    run = group.run_id
    log.fold(event("run.requested", claim(run, ["fs:x"], {"fs:x": 2}), ms=T0 + 50_020))
    req = claim(run, ["fs:x"], {"fs:x": 2})
    (frozen,) = log.state.exports.exports_of("t1", req)
    assert frozen.run_id == run and frozen.keys == [lib(7)] and frozen.kev_vulns == ["CVE-2"]
    assert log.state.exports.to_plan(frozen) == frozen
    # A third revision: revisions 1 and 2 together covered lib1, lib2, lib7.
    log.fold(event("run.planned", planned(run), ms=T0 + 50_030))
    log.fold(event("export.feedser", revision("x", 3, [lib(1), lib(7), lib(8)]), ms=T0 + 99_000))
    assert log.state.exports.to_plan(pending(log)["fs:x"]).keys == [lib(8)]
    # The cursor names the export; the released revisions keep no keys.
    cursor = log.state.exports.cursor("t1")
    assert cursor.feedser_last_export_id == "fs:x"
    released = log.state.exports.exports("t1", [("feedser", "fs:x", 1), ("feedser", "fs:x", 2)])
    assert [(r.released, r.keys) for r in released] == [(True, []), (True, [])]


def test_a_claim_of_a_revision_superseded_while_in_flight_still_plans_it() -> None:
    """The planner requested revision 1's run; revision 2 folded before that request did.
    The request still claims revision 1 (what its plan was made from); revision 2 stays
    pending, for a follow-up of what revision 1 did not cover."""
    log = Log()
    log.fold(event("export.feedser", revision("x", 1, [lib(1)]), ms=T0))
    log.fold(event("export.feedser", revision("x", 2, [lib(1), lib(2)]), ms=T0 + 10))
    first = export_run_id("t1", ["fs:x"])
    log.fold(event("run.requested", claim(first, ["fs:x"]), ms=T0 + 20))
    (claimed,) = log.state.exports.exports("t1", [("feedser", "fs:x", 1)])
    assert claimed.run_id == first and claimed.keys == [lib(1)] and claimed.superseded
    rec = pending(log)["fs:x"]
    assert rec.revision == 2 and log.state.exports.to_plan(rec).keys == [lib(2)]


def test_replaying_revisions_gives_the_same_state() -> None:
    def run() -> str:
        log = Log()
        first = export_run_id("t1", ["fs:x"])
        for n, e in enumerate(
            [
                event("export.feedser", revision("x", 1, [lib(1)]), ms=T0),
                event("run.requested", claim(first, ["fs:x"]), ms=T0 + 1),
                event("export.feedser", revision("x", 2, [lib(2)]), ms=T0 + 2),
                event("export.feedser", revision("x", 3, [lib(3)]), ms=T0 + 3),
            ]
        ):
            log.fold(msgspec.structs.replace(e, id=f"e{n}"))
        return state_digest(log.store)

    assert run() == run()


def test_coverage_is_exact_for_keys_and_kev_vulns() -> None:
    base = ExportRecord(
        export_id="fs:x", source="feedser", tenant="t1", ms=0, hlc="0:0:n", event_id="e"
    )
    one = ExportRecord(**{**_fields(base), "keys": ["a", "b"], "kev_vulns": ["CVE-1"]})
    covered = add_coverage(b"", one)
    assert len(covered) == 8 * 3
    two = ExportRecord(
        **{
            **_fields(base),
            "keys": ["b", "c"],
            "kev_keys": ["b", "c"],
            "kev_vulns": ["CVE-1", "b"],
        }
    )
    left = uncovered(two, covered)
    assert (left.keys, left.kev_keys, left.kev_vulns) == (["c"], ["c"], ["b"]), (
        "a key and a vuln id of the same text are told apart"
    )
    assert uncovered(two, b"") is two
    assert ExportGroup("t1", "feedser", (one,), 0, 0).revisions == {}


def _fields(rec: ExportRecord) -> dict[str, object]:
    return {f: getattr(rec, f) for f in rec.__struct_fields__}
