"""The runner's projection: what it needs to execute, account for and finish runs.

Folded from the event log, purely: run plans (their segment lists), cancel requests, segment
outcomes, every verdict (per run and digest, so a redelivered segment skips what is already
verdicted), each image's latest findings (the "previous verdict" deltas are computed
against), per-run per-vulnerability newly affected images (the run summary), the notify
rules and limits of schedules, and when each run's cause happened (the run latency metric:
the earliest export an export-driven run was coalesced from, else its ``run.requested``;
an export's time is kept until the run that claims it is requested). The completion reactor
and the segment workers read it.
"""

from __future__ import annotations

from typing import ClassVar

import msgspec

from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope
from streamproc.hlc import sort_key
from streamproc.ids import export_run_id
from streamproc.names import RUNNER
from streamproc.runner.delta import new_findings
from streamproc.runner.records import (
    EXPORTS_CF,
    IMAGES_CF,
    OPEN_CF,
    RULES_CF,
    RUNS_CF,
    SEP,
    SUMMARY_CF,
    SUMMARY_IMAGES,
    SUMMARY_IMAGES_CF,
    VERDICTS_CF,
    ImageRec,
    Rule,
    RunRec,
    SegDone,
    StoredNotify,
    VerdictRec,
    VulnAgg,
    decode_image,
    decode_rule,
    decode_run,
    decode_vuln,
    encode,
    export_key,
    failure_category,
    key,
)
from streamproc.runtime.fold import folds
from streamproc.runtime.projection import Projection, Rejection
from streamproc.state.tx import Table, Tx


class RunnerState(Projection):
    name: ClassVar[str] = RUNNER
    creates: ClassVar[frozenset[str]] = frozenset(
        {"export.feedser", "export.vexer", "schedule.created", "run.requested"}
    )
    """A run is known from its request on: every later event of an unknown run (or of a
    segment its plan does not list) is rejected, so nothing stays open that never ran."""
    families: ClassVar[tuple[str, ...]] = (
        RUNS_CF,
        VERDICTS_CF,
        IMAGES_CF,
        RULES_CF,
        SUMMARY_CF,
        SUMMARY_IMAGES_CF,
        OPEN_CF,
        EXPORTS_CF,
    )
    version: ClassVar[int] = 3
    """2: export times and each run's cause time (the run latency metric); a summary's
    images one key each. 3: export times by ref and revision. (What VEX claims resolved and
    the EPSS of a summary's vulnerabilities are fields left out until set: states without
    them keep their bytes.)"""

    def __init__(self) -> None:
        self._runs: dict[bytes, RunRec] = {}
        self._dirty: set[bytes] = set()
        self._aggs: dict[bytes, VulnAgg] = {}
        """Summary entries changed in this batch, written once in ``flush``."""

    def _load(self, tx: Tx, k: bytes) -> RunRec | None:
        rec = self._runs.get(k)
        if rec is None:
            raw = tx.table(RUNS_CF).get(k)
            if raw is None:
                return None
            rec = self._runs[k] = decode_run(raw)
        return rec

    def _run(self, tx: Tx, e: Envelope, run_id: str) -> tuple[bytes, RunRec]:
        """The run this event updates; :class:`Rejection` (``unknown_run``) if there is none.
        Checked before anything changes, so a rejection leaves the batch untouched."""
        k = key(e.tenant, run_id)
        rec = self._load(tx, k)
        if rec is None:
            raise Rejection("unknown_run", f"{e.kind} for run {run_id}, never requested")
        self._dirty.add(k)
        return k, rec

    def _segment(self, tx: Tx, e: Envelope, run_id: str, segment_id: str) -> RunRec:
        """The run of a segment its plan lists (``unknown_segment`` otherwise)."""
        _, rec = self._run(tx, e, run_id)
        if segment_id not in rec.segments:
            raise Rejection(
                "unknown_segment", f"{e.kind} for segment {segment_id}, not in run {run_id}'s plan"
            )
        return rec

    # ------------------------------------------------------------------ exports

    @folds(p.FeedserExport)
    def _export_feedser(self, tx: Tx, e: Envelope, x: p.FeedserExport) -> None:
        self._export(tx, e, "feedser", x.ref, x.revision)

    @folds(p.VexerExport)
    def _export_vexer(self, tx: Tx, e: Envelope, x: p.VexerExport) -> None:
        self._export(tx, e, "vexer", x.ref, x.revision)

    @staticmethod
    def _export(tx: Tx, e: Envelope, source: str, ref: str, revision: int) -> None:
        """The time of the export (by its ref, as runs name it), per revision."""
        t = tx.table(EXPORTS_CF)
        k = export_key(e.tenant, source, ref, revision)
        if t.get(k) is None:  # a redelivered export keeps its first time
            t.put(k, b"%d" % sort_key(e.hlc)[0])

    # ------------------------------------------------------------------ schedules

    @folds(p.ScheduleCreated)
    def _schedule_created(self, tx: Tx, e: Envelope, s: p.ScheduleCreated) -> None:
        t = tx.table(RULES_CF)
        if t.get(key(e.tenant, s.schedule_id)) is not None:
            raise Rejection("schedule_exists", f"schedule {s.schedule_id} already exists")
        t.put(
            key(e.tenant, s.schedule_id),
            encode(Rule(notify=StoredNotify.of(s.notify), limits=s.limits)),
        )

    @staticmethod
    def _rule(t: Table, e: Envelope, schedule_id: str) -> bytes:
        raw = t.get(key(e.tenant, schedule_id))
        if raw is None:
            raise Rejection("unknown_schedule", f"{e.kind} for a schedule that does not exist")
        return raw

    @folds(p.ScheduleUpdated)
    def _schedule_updated(self, tx: Tx, e: Envelope, s: p.ScheduleUpdated) -> None:
        t = tx.table(RULES_CF)
        rule = decode_rule(self._rule(t, e, s.schedule_id))
        if s.notify is not msgspec.UNSET:
            rule.notify = StoredNotify.of(s.notify)
        if s.limits is not msgspec.UNSET:
            rule.limits = s.limits
        t.put(key(e.tenant, s.schedule_id), encode(rule))

    @folds(p.ScheduleStateChange, kinds=("schedule.deleted",))
    def _schedule_deleted(self, tx: Tx, e: Envelope, s: p.ScheduleStateChange) -> None:
        t = tx.table(RULES_CF)
        self._rule(t, e, s.schedule_id)
        t.delete(key(e.tenant, s.schedule_id))

    # ------------------------------------------------------------------ runs

    @folds(p.RunRequested)
    def _run_requested(self, tx: Tx, e: Envelope, r: p.RunRequested) -> None:
        k = key(e.tenant, r.run_id)
        if self._load(tx, k) is not None:
            raise Rejection("run_exists", f"run {r.run_id} was already requested")
        self._runs[k] = RunRec(
            tenant=e.tenant,
            run_id=r.run_id,
            trigger=r.trigger,
            mode=r.mode,
            schedule_ids=[r.schedule_id] if r.schedule_id else [],
            cause_ms=self._cause_ms(tx, e, r),
        )
        self._dirty.add(k)

    @staticmethod
    def _cause_ms(tx: Tx, e: Envelope, r: p.RunRequested) -> int:
        """The request's time, or its earliest export's when the request is the run those
        exports were coalesced into (a spill continuation names them too, but is not it);
        that run claims its exports, whose times are then forgotten."""
        ms = sort_key(e.hlc)[0]
        reason = r.reason
        feedser, vexer = reason.feedser_export_ids, reason.vexer_export_ids
        claims = r.trigger in ("feedser", "vexer")
        if (
            not claims
            or export_run_id(e.tenant, feedser + vexer, reason.later_revisions) != r.run_id
        ):
            return ms
        t = tx.table(EXPORTS_CF)
        for source, ids in (("feedser", feedser), ("vexer", vexer)):
            for export_id in ids:
                ek = export_key(e.tenant, source, export_id, reason.revision_of(export_id))
                raw = t.get(ek)
                if raw is not None:
                    ms = min(ms, int(raw))
                    t.delete(ek)
        return ms

    @folds(p.RunPlanned)
    def _run_planned(self, tx: Tx, e: Envelope, r: p.RunPlanned) -> None:
        _, rec = self._run(tx, e, r.run_id)
        if rec.planned:
            return
        rec.planned = True
        rec.trigger = r.trigger
        rec.plan = r.stats
        rec.schedule_ids = list(dict.fromkeys([*rec.schedule_ids, *r.schedule_ids]))
        rec.segments = {s.segment_id: s.images for s in r.segments}

    @folds(p.RunCancelRequested)
    def _run_cancel_requested(self, tx: Tx, e: Envelope, r: p.RunCancelRequested) -> None:
        _, rec = self._run(tx, e, r.run_id)
        if rec.terminal is None and not rec.cancel_requested:
            rec.cancel_requested = True
            rec.cancel_reason = r.reason

    @folds(p.RunCompleted)
    def _run_completed(self, tx: Tx, e: Envelope, r: p.RunCompleted) -> None:
        _, rec = self._run(tx, e, r.run_id)
        rec.terminal = rec.terminal or r.state

    @folds(p.RunCancelled)
    def _run_cancelled(self, tx: Tx, e: Envelope, r: p.RunCancelled) -> None:
        _, rec = self._run(tx, e, r.run_id)
        rec.terminal = rec.terminal or "cancelled"

    # ------------------------------------------------------------------ segments

    @folds(p.SegmentCompleted)
    def _segment_completed(self, tx: Tx, e: Envelope, s: p.SegmentCompleted) -> None:
        rec = self._segment(tx, e, s.run_id, s.segment_id)
        if s.segment_id not in rec.done:
            rec.done = {**rec.done, s.segment_id: SegDone(s.completed, s.failed, s.cancelled)}

    @folds(p.SegmentFailed)
    def _segment_failed(self, tx: Tx, e: Envelope, s: p.SegmentFailed) -> None:
        rec = self._segment(tx, e, s.run_id, s.segment_id)
        if not s.dead_lettered:
            return  # a failed attempt: the segment will be delivered again
        if s.segment_id not in rec.done:
            ok, failed = rec.verdicts.get(s.segment_id, [0, 0])
            images = rec.segments.get(s.segment_id, ok + failed)
            rec.done = {
                **rec.done,
                s.segment_id: SegDone(ok, images - ok, 0, True, s.reason[:200]),
            }

    # ------------------------------------------------------------------ verdicts

    @folds(p.VerdictRecorded)
    def _verdict_recorded(self, tx: Tx, e: Envelope, v: p.VerdictRecorded) -> None:
        rec = self._segment(tx, e, v.run_id, v.segment_id)
        vt = tx.table(VERDICTS_CF)
        vk = key(e.tenant, v.run_id, v.digest)
        if vt.get(vk) is not None:
            return  # one verdict per (run, image): a re-emission changes nothing
        counts = list(rec.verdicts.get(v.segment_id, [0, 0]))
        delta = v.new_criticals > 0 or v.new_high > 0 or bool(v.kev_hits)
        if v.status == "ok":
            counts[0] += 1
        else:
            counts[1] += 1
            reason = failure_category(v.error)
            rec.failure_reasons = {
                **rec.failure_reasons,
                reason: rec.failure_reasons.get(reason, 0) + 1,
            }
        rec.verdicts = {**rec.verdicts, v.segment_id: counts}
        vt.put(vk, encode(VerdictRec(v.status, v.segment_id, delta)))
        if delta:
            rec.deltas += 1
            rec.new_criticals += v.new_criticals
        if v.status != "ok":
            return
        it = tx.table(IMAGES_CF)
        ik = key(e.tenant, v.digest)
        raw = it.get(ik)
        previous = decode_image(raw).findings if raw is not None else []
        current = [(f.purl, f.vuln_id, f.severity, f.kev) for f in v.findings]
        if v.suppressed and previous:
            gone = {(s.purl, s.vuln_id) for s in v.suppressed}
            n = sum(1 for f in previous if (f[0], f[1]) in gone)
            if n:
                rec.resolved = (rec.resolved or 0) + n
        epss: dict[str, p.Epss] = {}
        for f in v.findings:
            if isinstance(f.epss, p.Epss) and (
                f.vuln_id not in epss or f.epss.score > epss[f.vuln_id].score
            ):
                epss[f.vuln_id] = f.epss
        st = tx.table(SUMMARY_CF)
        for vuln in {(f[1], f[2], f[3]) for f in new_findings(previous, current)}:
            sk = key(e.tenant, v.run_id, vuln[0])
            agg = self._aggs.get(sk)
            if agg is None:
                sraw = st.get(sk)
                agg = (
                    decode_vuln(sraw)
                    if sraw is not None
                    else VulnAgg(severity=vuln[1], kev=vuln[2])
                )
                self._aggs[sk] = agg
            # One verdict per (run, image) was checked above, so the image is new here.
            agg.count += 1
            if agg.count <= SUMMARY_IMAGES:
                tx.table(SUMMARY_IMAGES_CF).put(sk + SEP + b"%08d" % agg.count, v.digest.encode())
            agg.kev = agg.kev or vuln[2]
            score = epss.get(vuln[0])
            if score is not None and (
                not isinstance(agg.epss, p.Epss) or score.score > agg.epss.score
            ):
                agg.epss = score
        it.put(ik, encode(ImageRec(sorted(current))))

    # ------------------------------------------------------------------ batch hooks

    def flush(self, tx: Tx) -> None:
        t, o = tx.table(RUNS_CF), tx.table(OPEN_CF)
        for k in self._dirty:
            rec = self._runs[k]
            t.put(k, encode(rec))
            if rec.terminal is None:
                o.put(k, b"")
            else:
                o.delete(k)
        self._dirty.clear()
        self._runs.clear()
        st = tx.table(SUMMARY_CF)
        for sk, agg in self._aggs.items():
            st.put(sk, encode(agg))
        self._aggs.clear()

    def discard(self) -> None:
        self._dirty.clear()
        self._runs.clear()
        self._aggs.clear()
