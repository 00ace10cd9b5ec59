"""The ``pl_open`` projection: planned runs that have not finished, and where each of their
segments stands — what the restart check (:mod:`.recovery`) reads.

Folded from ``run.planned`` (the run and its segment list), ``segment.enqueued`` (the
segment's event is in the log: its stream sequence, HLC ms and priority), ``segment.started``
/ ``segment.completed`` / ``segment.failed`` (a runner took its work item) and
``run.completed`` / ``run.cancelled`` (the run is finished: its records go). A runner
publishes ``segment.completed`` or ``segment.failed`` before it acknowledges (or removes)
the work item, so a segment that is neither taken nor finished here, once this projection
has folded the log past a look at the work queue, either still has its work item in the
queue or never had one stored.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar, Literal

import msgspec

from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope
from streamproc.names import PL_OPEN, PL_OPEN_CF
from streamproc.planner import records as r
from streamproc.runtime.fold import folds
from streamproc.runtime.projection import Projection, Rejection
from streamproc.state.store import Store
from streamproc.state.tx import Table, Tx

OPEN_CF = PL_OPEN_CF

SegmentState = Literal["planned", "enqueued", "taken"]


class OpenRun(msgspec.Struct, kw_only=True):
    tenant: str
    run_id: str
    planned_ms: int
    segments: list[str]
    """The plan's segment ids, in order."""
    images: list[int] = []
    """Images per segment, in the same order."""


class OpenSegment(msgspec.Struct, kw_only=True):
    state: SegmentState = "planned"
    seq: int = 0
    """Stream sequence of its ``segment.enqueued`` (0 until folded)."""
    ms: int = 0
    priority: int = 5


_enc = msgspec.msgpack.Encoder()
_run = msgspec.msgpack.Decoder(OpenRun).decode
_seg = msgspec.msgpack.Decoder(OpenSegment).decode


class PlannerOpenRuns(Projection):
    name: ClassVar[str] = PL_OPEN
    creates: ClassVar[frozenset[str]] = frozenset({"run.planned"})
    """An open run starts at its plan; a later event of a run that is not open (never
    planned, or finished and forgotten) or of a segment its plan does not list is rejected."""
    families: ClassVar[tuple[str, ...]] = (OPEN_CF,)

    def __init__(self) -> None:
        self._store: Store | None = None

    def open(self, store: Store) -> None:
        self._store = store

    @folds(p.RunPlanned)
    def _planned(self, tx: Tx, e: Envelope, pl: p.RunPlanned) -> None:
        t = tx.table(OPEN_CF)
        run_key = r.key(e.tenant, pl.run_id)
        if t.get(run_key) is None:
            run = OpenRun(
                tenant=e.tenant,
                run_id=pl.run_id,
                planned_ms=r.physical_ms(e.hlc),
                segments=[s.segment_id for s in pl.segments],
                images=[s.images for s in pl.segments],
            )
            t.put(run_key, _enc.encode(run))

    @staticmethod
    def _open(t: Table, e: Envelope, run_id: str) -> tuple[bytes, bytes]:
        """The open run's key and record: ``unknown_run`` if it is not open here."""
        run_key = r.key(e.tenant, run_id)
        raw_run = t.get(run_key)
        if raw_run is None:
            raise Rejection("unknown_run", f"{e.kind} for run {run_id}: not open here")
        return run_key, raw_run

    @folds(p.RunCompleted, p.RunCancelled)
    def _finished(self, tx: Tx, e: Envelope, pl: p.RunCompleted | p.RunCancelled) -> None:
        t = tx.table(OPEN_CF)
        run_key, _ = self._open(t, e, pl.run_id)
        for k, _ in list(t.scan(run_key + r.SEP)):
            t.delete(k)
        t.delete(run_key)

    def _segment(self, t: Table, e: Envelope, run_id: str, segment_id: str) -> OpenSegment:
        """The segment's state so far; ``unknown_segment`` if the plan does not list it."""
        _, raw_run = self._open(t, e, run_id)
        if segment_id not in _run(raw_run).segments:
            raise Rejection("unknown_segment", f"{e.kind}: {segment_id} is not in the plan")
        raw = t.get(r.key(e.tenant, run_id, segment_id))
        return OpenSegment() if raw is None else _seg(raw)

    @folds(p.SegmentEnqueued)
    def _enqueued(self, tx: Tx, e: Envelope, pl: p.SegmentEnqueued) -> None:
        t = tx.table(OPEN_CF)
        cur = self._segment(t, e, pl.run_id, pl.segment_id)
        if cur.seq:
            return  # a repeat (another planner's redo): the first one stands
        nxt = msgspec.structs.replace(
            cur, seq=tx.seq, ms=r.physical_ms(e.hlc), priority=pl.priority
        )
        if nxt.state == "planned":
            nxt = msgspec.structs.replace(nxt, state="enqueued")
        t.put(r.key(e.tenant, pl.run_id, pl.segment_id), _enc.encode(nxt))

    @folds(p.SegmentStarted, p.SegmentCompleted, p.SegmentFailed)
    def _taken(
        self, tx: Tx, e: Envelope, pl: p.SegmentStarted | p.SegmentCompleted | p.SegmentFailed
    ) -> None:
        """A runner took the segment's work item."""
        t = tx.table(OPEN_CF)
        cur = self._segment(t, e, pl.run_id, pl.segment_id)
        nxt = msgspec.structs.replace(cur, state="taken")
        t.put(r.key(e.tenant, pl.run_id, pl.segment_id), _enc.encode(nxt))


class OpenRunView(msgspec.Struct, kw_only=True):
    run: OpenRun
    segments: dict[str, OpenSegment]
    """Every planned segment id → its state (``planned`` when nothing was folded for it)."""


def open_runs(store: Store) -> Iterator[OpenRunView]:
    """Committed open runs, by tenant and run id."""
    run: OpenRun | None = None
    segs: dict[str, OpenSegment] = {}
    for k, v in store.scan(OPEN_CF):
        parts = r.split(k)
        if len(parts) == 2:
            if run is not None:
                yield _view(run, segs)
            run, segs = _run(v), {}
        elif run is not None and parts[:2] == [run.tenant, run.run_id]:
            segs[parts[2]] = _seg(v)
    if run is not None:
        yield _view(run, segs)


def _view(run: OpenRun, segs: dict[str, OpenSegment]) -> OpenRunView:
    return OpenRunView(run=run, segments={s: segs.get(s, OpenSegment()) for s in run.segments})
