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

from streamproc.events.envelope import Envelope
from streamproc.names import PL_OPEN, PL_OPEN_CF
from streamproc.planner import records as r
from streamproc.projection import Projection, Rejection, Tx
from streamproc.state.store import Store

OPEN_CF = PL_OPEN_CF

SegmentState = Literal["planned", "enqueued", "taken"]
_TAKEN = frozenset({"segment.started", "segment.completed", "segment.failed"})


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
    kinds: ClassVar[frozenset[str]] = frozenset(
        {"run.planned", "segment.enqueued", *_TAKEN, "run.completed", "run.cancelled"}
    )
    creates: ClassVar[frozenset[str]] = frozenset({"run.planned"})
    """An open run starts at its plan; a later event of a run that is not open (never
    planned, or finished and forgotten) or of a segment its plan does not list is rejected."""
    families: ClassVar[tuple[str, ...]] = (OPEN_CF,)

    def __init__(self) -> None:
        self._store: Store | None = None

    def open(self, store: Store) -> None:
        self._store = store

    def fold(self, tx: Tx, event: Envelope) -> None:
        pl = event.payload
        t = tx.table(OPEN_CF)
        run_key = r.key(event.tenant, pl.run_id)
        kind = event.kind
        raw_run = t.get(run_key)
        if kind == "run.planned":
            if raw_run is None:
                run = OpenRun(
                    tenant=event.tenant,
                    run_id=pl.run_id,
                    planned_ms=r.physical_ms(event.hlc),
                    segments=[s.segment_id for s in pl.segments],
                    images=[s.images for s in pl.segments],
                )
                t.put(run_key, _enc.encode(run))
            return
        if raw_run is None:
            raise Rejection("unknown_run", f"{kind} for run {pl.run_id}: not open here")
        if kind in ("run.completed", "run.cancelled"):
            for k, _ in list(t.scan(run_key + r.SEP)):
                t.delete(k)
            t.delete(run_key)
            return
        if pl.segment_id not in _run(raw_run).segments:
            raise Rejection("unknown_segment", f"{kind}: {pl.segment_id} is not in the plan")
        seg_key = r.key(event.tenant, pl.run_id, pl.segment_id)
        raw = t.get(seg_key)
        cur = OpenSegment() if raw is None else _seg(raw)
        if kind == "segment.enqueued":
            if cur.seq:
                return  # a repeat (another planner's redo): the first one stands
            nxt = msgspec.structs.replace(
                cur, seq=tx.seq, ms=r.physical_ms(event.hlc), priority=pl.priority
            )
            if nxt.state == "planned":
                nxt = msgspec.structs.replace(nxt, state="enqueued")
        else:
            nxt = msgspec.structs.replace(cur, state="taken")
        t.put(seg_key, _enc.encode(nxt))


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
