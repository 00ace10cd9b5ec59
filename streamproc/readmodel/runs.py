"""Runs: the state machine planning → queued → running → completed|cancelled|error (the
specification's six states), with stats folded from ``run.planned``, ``segment.*`` and
``verdict.recorded``, the exports each run covers (:mod:`.run_exports`), and the impact
cursors that planned runs move.

Each fold checks first and mutates after, so a :class:`Rejection` leaves the batch cache
untouched. Terminal runs accept nothing more: a cancel (or a late segment) for a finished run
is rejected with ``run_finished``.

Finished runs leave the read model by retention (:mod:`streamproc.readmodel.retention`): a
run that finished more than the retention before the read model's clock reads as absent to
every fold at once, and each batch then deletes it with its deltas and index keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import msgspec

from streamproc import metrics
from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope
from streamproc.ids import spill_run_id
from streamproc.names import (
    RM_BACKLOG_CF,
    RM_DELTA_ACKS,
    RM_RUN_DELTAS_CF,
    RM_RUNS,
    RM_RUNS_BY_TIME_CF,
)
from streamproc.readmodel import keys, retention, run_exports
from streamproc.readmodel.exports import Exports
from streamproc.readmodel.records import (
    TERMINAL,
    BacklogRecord,
    DeltaRecord,
    RunRecord,
    SegmentState,
    decode_backlog,
    decode_delta,
    decode_run,
    encode,
)
from streamproc.readmodel.retention import EXPIRY_CF, FINISHED_PREFIX, expiry_key
from streamproc.readmodel.schedules import Schedules, physical_ms
from streamproc.runtime.fold import folds
from streamproc.runtime.projection import Projection, Rejection
from streamproc.state.store import BULK, Reads, Store
from streamproc.state.tx import Tx

DELTAS_CF = RM_RUN_DELTAS_CF
BACKLOG_CF = RM_BACKLOG_CF
"""(tenant, continuation run id) → :class:`BacklogRecord`: work spilled to the next window."""
CF = RM_RUNS
BY_TIME_CF = RM_RUNS_BY_TIME_CF

_EMPTY_STATS = p.RunStats()
CLOCK_KINDS: frozenset[str] = Schedules.kinds | Exports.kinds
"""Other kinds the read model folds (:meth:`Runs._clock`): they only advance its retention
clock."""


def run_key(tenant: str, run_id: str) -> bytes:
    return keys.key(tenant, run_id)


def time_key(tenant: str, seq: int, run_id: str) -> bytes:
    return keys.tenant_prefix(tenant) + keys.newest_first(seq) + run_id.encode()


def delta_prefix(tenant: str, run_id: str) -> bytes:
    return keys.key(tenant, run_id) + keys.SEP


def _open_segment(rec: RunRecord, segment_id: str, event: Envelope) -> SegmentState:
    """The segment's state so far; one the run never planned or enqueued is
    ``unknown_segment`` (updates never create), a finished one takes no more events."""
    seg = rec.segments.get(segment_id)
    if seg is None:
        raise Rejection(
            "unknown_segment", f"{event.kind} for segment {segment_id}, not in run {rec.id}"
        )
    if seg.state in ("completed", "failed"):
        raise Rejection("segment_finished", f"segment {segment_id} is already {seg.state}")
    return seg


def _live(rec: RunRecord | None, event: Envelope) -> RunRecord:
    if rec is None:
        raise Rejection(
            "unknown_run", f"{event.kind} for a run that does not exist (or left by retention)"
        )
    if rec.state in TERMINAL:
        raise Rejection("run_finished", f"{event.kind} for run {rec.id}, already {rec.state}")
    return rec


def _is_delta(v: p.VerdictRecorded) -> bool:
    return v.new_criticals > 0 or v.new_high > 0 or bool(v.kev_hits)


_AFTER_EVERY_RUN = 1 << 64
"""Past any finish time (8-byte milliseconds in the index key)."""


class Runs(Projection):
    name: ClassVar[str] = CF
    creates: ClassVar[frozenset[str]] = frozenset({"run.requested"})
    """Everything else needs its run (``unknown_run``); a segment comes with the run's plan
    or its ``segment.enqueued``, and ``segment.started|completed|failed`` and verdicts of
    any other are ``unknown_segment``."""
    observes: ClassVar[frozenset[str]] = CLOCK_KINDS
    version: ClassVar[int] = 4
    """2: finish-time index and retention clock (``rm_runs_expiry``); 3: the six states of
    the specification, the exports of a run one key each (``rm_run_exports``) with a bounded
    summary in its record, and the impact cursors (``rm_cursors``); 4: the backlog
    (``rm_backlog``)."""
    families: ClassVar[tuple[str, ...]] = (
        CF,
        BY_TIME_CF,
        DELTAS_CF,
        EXPIRY_CF,
        run_exports.ITEMS_CF,
        run_exports.CURSORS_CF,
        BACKLOG_CF,
    )
    family_reads: ClassVar[Mapping[str, Reads]] = {EXPIRY_CF: BULK}
    """The finish-time index is only swept (its clock key, written every batch, is read from
    the memtable): a retention sweep's blocks are not kept."""
    reads: ClassVar[tuple[str, ...]] = (Exports.name,)
    """Each export a run names, as recorded: its id as sent and its time (the run's order,
    its first exports, the cursor it moves)."""
    removes: ClassVar[tuple[str, ...]] = (RM_DELTA_ACKS,)
    """A pruned run's deltas' acknowledgements (:mod:`streamproc.readmodel.acks`, keyed as
    its deltas are) leave with it."""

    def __init__(self, retention_days: int = retention.DEFAULT_DAYS) -> None:
        """``retention_days``: ``readmodel.retention_days``, as the gateway passes it
        (:func:`streamproc.readmodel.settings.runs`); 0 turns pruning off (tools and tests;
        the setting itself is at least 1)."""
        self.keep_ms = retention_days * retention.DAY_MS
        self._cache: dict[bytes, RunRecord | None] = {}
        """Runs as stored (expired ones included) read or changed in this batch."""
        self._dirty: set[bytes] = set()
        self._store: Store | None = None
        self._now = 0
        """The retention clock: the newest event time applied (committed, then this batch's)."""
        self._first_due: int | None = None
        """No run in the finish-time index finished before this (a lower bound; None:
        unknown). Every batch moves the clock, so without it every batch would seek the index
        to find nothing due: it is sought only once the cutoff passes this."""

    def open(self, store: Store) -> None:
        self._store = store
        self._now = retention.decode_ms(store.get(EXPIRY_CF, retention.CLOCK_KEY))
        self._first_due = None

    def _expired(self, rec: RunRecord, now: int) -> bool:
        return (
            self.keep_ms > 0
            and rec.finished_ms is not None
            and rec.state in TERMINAL
            and rec.finished_ms < now - self.keep_ms
        )

    def _get(self, tx: Tx, k: bytes, now: int) -> RunRecord | None:
        """The run as of event time ``now``: None if absent or past its retention."""
        if k in self._cache:
            rec = self._cache[k]
        else:
            raw = tx.table(CF).get(k)
            rec = decode_run(raw) if raw is not None else None
            self._cache[k] = rec
        return None if rec is None or self._expired(rec, now) else rec

    def _run(self, tx: Tx, e: Envelope, run_id: str) -> tuple[bytes, RunRecord | None]:
        """The run's key and record as of this event's time (the clock moves only later)."""
        k = run_key(e.tenant, run_id)
        return k, self._get(tx, k, max(self._now, physical_ms(e)))

    def _live_run(self, tx: Tx, e: Envelope, run_id: str) -> tuple[bytes, RunRecord]:
        """The run an update is for: ``unknown_run`` or ``run_finished`` otherwise."""
        k, rec = self._run(tx, e, run_id)
        return k, _live(rec, e)

    def _touch(self, k: bytes, rec: RunRecord, event: Envelope, seq: int) -> None:
        """The event applied to the run: record it and move the clock."""
        rec.updated_ms = physical_ms(event)
        rec.version = seq
        self._cache[k] = rec
        self._dirty.add(k)
        self._advance(event)

    def _advance(self, event: Envelope) -> None:
        """Only once the event applied: a rejected one moves nothing."""
        self._now = max(self._now, physical_ms(event))

    @folds(
        p.ScheduleCreated, p.ScheduleUpdated, p.ScheduleStateChange, p.FeedserExport, p.VexerExport
    )
    def _clock(self, tx: Tx, e: Envelope, _: p.Payload) -> None:
        """Schedules and exports only advance the retention clock."""
        self._advance(e)

    # -------------------------------------------------------------- run lifecycle

    @folds(p.RunRequested)
    def _run_requested(self, tx: Tx, e: Envelope, r: p.RunRequested) -> None:
        k, rec = self._run(tx, e, r.run_id)
        if rec is not None:
            raise Rejection("run_exists", f"run {r.run_id} already exists")
        stale = self._cache.get(k)
        if stale is not None and stale.finished_ms is not None:
            # past its retention but not deleted yet (same batch): the id is free again
            self._purge(tx, stale.tenant, stale.id, stale.requested_seq, stale.finished_ms)
        tx.table(BY_TIME_CF).put(time_key(e.tenant, tx.seq, r.run_id), b"")
        rec = RunRecord(
            id=r.run_id,
            tenant=e.tenant,
            trigger=r.trigger,
            schedule_id=r.schedule_id,
            schedule_ids=[r.schedule_id] if r.schedule_id else [],
            mode=r.mode,
            selection=r.selection,
            reason=run_exports.record_exports(tx, e.tenant, r.run_id, r.reason),
            requested_by=r.requested_by,
            requested_ms=physical_ms(e),
            requested_seq=tx.seq,
        )
        self._touch(k, rec, e, tx.seq)
        backlog = tx.table(BACKLOG_CF)
        raw = backlog.get(k)
        if raw is not None:  # the continuation of a spilled run: its work is planned now
            entry = decode_backlog(raw)
            backlog.put(k, encode(msgspec.structs.replace(entry, requested=True)))

    @folds(p.RunPlanned)
    def _run_planned(self, tx: Tx, e: Envelope, r: p.RunPlanned) -> None:
        k, rec = self._live_run(tx, e, r.run_id)
        if rec.planned or rec.state not in ("planning", "queued"):
            what = "planned" if rec.planned else rec.state
            raise Rejection("invalid_transition", f"run.planned for a run already {what}")
        rec.planned = True
        rec.state = "queued"  # segments may be enqueued before the plan is recorded
        if not rec.cancel_requested:
            run_exports.advance_cursor(tx, e.tenant, rec.reason, physical_ms(e))
        rec.schedule_ids = list(r.schedule_ids) or rec.schedule_ids
        rec.stats = msgspec.structs.replace(
            rec.stats,
            candidates=r.stats.candidates,
            deduped=r.stats.deduped,
            queued=r.stats.queued,
            spilled=r.stats.spilled,
        )
        segs = dict(rec.segments)
        for s in r.segments:
            segs.setdefault(s.segment_id, SegmentState(images=s.images))
        rec.segments = segs
        rec.degraded = r.degraded
        rec.degraded_reason = r.degraded_reason
        self._touch(k, rec, e, tx.seq)
        self._spilled(tx, e, r, rec)

    @staticmethod
    def _spilled(tx: Tx, e: Envelope, r: p.RunPlanned, rec: RunRecord) -> None:
        """A run whose surplus spills is backlog until the continuation the planner will
        request for it (the id it derives the same way) is requested."""
        backlog = tx.table(BACKLOG_CF)
        k = run_key(e.tenant, r.run_id)
        raw = backlog.get(k)
        own = decode_backlog(raw) if raw is not None else None
        if own is not None:  # a continuation: its own surplus continues the same chain
            backlog.delete(k)
        if r.stats.spilled == 0 or rec.cancel_requested:
            return
        root = own.root_run_id if own is not None else r.run_id
        offset = (own.offset if own is not None else 0) + r.stats.queued
        entry = BacklogRecord(
            run_id=r.run_id,
            root_run_id=root,
            continuation_id=spill_run_id(root, offset),
            offset=offset,
            spilled=r.stats.spilled,
            planned_ms=physical_ms(e),
        )
        backlog.put(run_key(e.tenant, entry.continuation_id), encode(entry))

    @folds(p.RunCancelRequested)
    def _run_cancel_requested(self, tx: Tx, e: Envelope, r: p.RunCancelRequested) -> None:
        k, rec = self._live_run(tx, e, r.run_id)
        rec.cancel_requested = True
        rec.cancel_reason = r.reason
        self._touch(k, rec, e, tx.seq)
        backlog = tx.table(BACKLOG_CF)  # the rest of its spill chain goes too
        for bk, raw in list(backlog.scan(keys.tenant_prefix(e.tenant))):
            entry = decode_backlog(raw)
            if r.run_id in (entry.run_id, entry.root_run_id, entry.continuation_id):
                backlog.delete(bk)

    def _finish(
        self, tx: Tx, rec: RunRecord, e: Envelope, state: str, stats: p.RunStats
    ) -> RunRecord:
        rec.state = state  # type: ignore[assignment]  # state is one of RunRecord's Literal values at every caller
        rec.finished_ms = physical_ms(e)
        tx.table(EXPIRY_CF).put(
            expiry_key(rec.finished_ms, rec.tenant, rec.id), rec.requested_seq.to_bytes(8, "big")
        )
        if self._first_due is not None:
            self._first_due = min(self._first_due, rec.finished_ms)
        if stats != _EMPTY_STATS:
            rec.stats = stats  # the runner's final count wins over the folded one
        return rec

    @folds(p.RunCancelled)
    def _run_cancelled(self, tx: Tx, e: Envelope, r: p.RunCancelled) -> None:
        k, rec = self._live_run(tx, e, r.run_id)
        if r.reason and not rec.cancel_reason:
            rec.cancel_reason = r.reason
        self._touch(k, self._finish(tx, rec, e, "cancelled", r.stats), e, tx.seq)

    @folds(p.RunCompleted)
    def _run_completed(self, tx: Tx, e: Envelope, r: p.RunCompleted) -> None:
        k, rec = self._live_run(tx, e, r.run_id)
        rec.coverage = r.coverage
        rec.error = r.error
        self._touch(k, self._finish(tx, rec, e, r.state, r.stats), e, tx.seq)

    # -------------------------------------------------------------- segments

    @folds(p.SegmentEnqueued)
    def _segment_enqueued(self, tx: Tx, e: Envelope, s: p.SegmentEnqueued) -> None:
        k, rec = self._live_run(tx, e, s.run_id)
        if s.segment_id in rec.segments:  # planned (or a repeat): it must still be open
            _open_segment(rec, s.segment_id, e)
        rec.segments = {**rec.segments, s.segment_id: SegmentState(len(s.digests), "enqueued")}
        if rec.state == "planning":
            rec.state = "queued"
        self._touch(k, rec, e, tx.seq)

    @folds(p.SegmentStarted)
    def _segment_started(self, tx: Tx, e: Envelope, s: p.SegmentStarted) -> None:
        k, rec = self._live_run(tx, e, s.run_id)
        seg = _open_segment(rec, s.segment_id, e)
        rec.segments = {
            **rec.segments,
            s.segment_id: SegmentState(seg.images, "running", max(seg.attempts, s.attempt)),
        }
        if rec.state != "running":
            rec.state = "running"
            rec.started_ms = rec.started_ms or physical_ms(e)
        self._touch(k, rec, e, tx.seq)

    @folds(p.SegmentCompleted)
    def _segment_completed(self, tx: Tx, e: Envelope, s: p.SegmentCompleted) -> None:
        k, rec = self._live_run(tx, e, s.run_id)
        seg = _open_segment(rec, s.segment_id, e)
        rec.segments = {
            **rec.segments,
            s.segment_id: SegmentState(seg.images, "completed", seg.attempts),
        }
        st = rec.stats
        rec.stats = msgspec.structs.replace(
            st,
            completed=st.completed + s.completed,
            failed=st.failed + s.failed,
            cancelled=st.cancelled + s.cancelled,
        )
        self._touch(k, rec, e, tx.seq)

    @folds(p.SegmentFailed)
    def _segment_failed(self, tx: Tx, e: Envelope, s: p.SegmentFailed) -> None:
        k, rec = self._live_run(tx, e, s.run_id)
        seg = _open_segment(rec, s.segment_id, e)
        attempts = max(seg.attempts, s.deliveries)
        if not s.dead_lettered:  # a retryable failure: it will be delivered again
            rec.segments = {
                **rec.segments,
                s.segment_id: SegmentState(seg.images, seg.state, attempts),
            }
            self._touch(k, rec, e, tx.seq)
            return
        rec.segments = {**rec.segments, s.segment_id: SegmentState(seg.images, "failed", attempts)}
        rec.stats = msgspec.structs.replace(rec.stats, failed=rec.stats.failed + seg.images)
        self._touch(k, rec, e, tx.seq)

    @folds(p.VerdictRecorded)
    def _verdict_recorded(self, tx: Tx, e: Envelope, v: p.VerdictRecorded) -> None:
        k, rec = self._live_run(tx, e, v.run_id)
        if v.segment_id not in rec.segments:
            raise Rejection(
                "unknown_segment", f"a verdict of segment {v.segment_id}, not in run {rec.id}"
            )
        table = tx.table(DELTAS_CF)
        dk = delta_prefix(e.tenant, v.run_id) + v.digest.encode()
        raw = table.get(dk)
        old = decode_delta(raw) if raw is not None else None
        st = rec.stats
        deltas, crit = st.deltas, st.new_criticals
        if old is not None:  # a re-evaluation of the same image replaces its earlier verdict
            deltas -= 1
            crit -= old.new_criticals
        if _is_delta(v):
            deltas += 1
            crit += v.new_criticals
            table.put(
                dk,
                encode(
                    DeltaRecord(
                        digest=v.digest,
                        segment_id=v.segment_id,
                        status=v.status,
                        new_criticals=v.new_criticals,
                        new_high=v.new_high,
                        kev_hits=list(v.kev_hits),
                        top_findings=list(v.top_findings),
                        report_url=v.report_url,
                        seq=tx.seq,
                    )
                ),
            )
        elif old is not None:
            table.delete(dk)
        rec.stats = msgspec.structs.replace(st, deltas=deltas, new_criticals=crit)
        self._touch(k, rec, e, tx.seq)

    # -------------------------------------------------------------- batch hooks

    def flush(self, tx: Tx) -> None:
        table = tx.table(CF)
        for k in self._dirty:
            rec = self._cache[k]
            assert rec is not None
            table.put(k, encode(rec))
        self._dirty.clear()
        self._cache.clear()
        expiry = tx.table(EXPIRY_CF)
        if retention.decode_ms(expiry.get(retention.CLOCK_KEY)) != self._now:
            expiry.put(retention.CLOCK_KEY, retention.encode_ms(self._now))
        if self.keep_ms > 0:
            cutoff = self._now - self.keep_ms
            if self._first_due is None or self._first_due < cutoff:
                self._first_due = self._prune(tx, cutoff)

    def discard(self) -> None:
        self._dirty.clear()
        self._cache.clear()
        self._first_due = None  # this batch's prune did not commit: the index is as it was
        if self._store is not None:  # back to the committed clock
            self._now = retention.decode_ms(self._store.get(EXPIRY_CF, retention.CLOCK_KEY))

    # -------------------------------------------------------------- retention

    def _prune(self, tx: Tx, cutoff: int) -> int:
        """Delete every run that finished before ``cutoff``: a seek into the finish-time
        index, never a scan of the runs. The finish time of the first run kept (after the
        index's end: one no run can have), before which nothing else is due."""
        due = []
        first_kept = _AFTER_EVERY_RUN
        for k, v in tx.table(EXPIRY_CF).scan(FINISHED_PREFIX):
            finished, tenant, run_id = retention.parse_expiry_key(k)
            if finished >= cutoff:
                first_kept = finished
                break
            due.append((tenant, run_id, int.from_bytes(v, "big"), finished))
        for tenant, run_id, requested_seq, finished in due:
            self._purge(tx, tenant, run_id, requested_seq, finished)
        return first_kept

    def _purge(self, tx: Tx, tenant: str, run_id: str, requested_seq: int, finished: int) -> None:
        """Remove one run with everything keyed by it: record, listing key, deltas and their
        acknowledgements, index."""
        tx.table(EXPIRY_CF).delete(expiry_key(finished, tenant, run_id))
        tx.table(CF).delete(run_key(tenant, run_id))
        tx.table(BY_TIME_CF).delete(time_key(tenant, requested_seq, run_id))
        run_exports.delete_exports(tx, tenant, run_id)
        for cf in (DELTAS_CF, RM_DELTA_ACKS):
            table = tx.table(cf)
            for dk in [k for k, _ in table.scan(delta_prefix(tenant, run_id))]:
                table.delete(dk)
        tx.count(metrics.RUNS_PRUNED, tenant)
