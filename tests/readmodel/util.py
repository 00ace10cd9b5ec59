"""Pure folding of hand-built events into a MemoryStore (no clock, no I/O)."""

from __future__ import annotations

from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope, encode, new_event
from streamproc.readmodel import READ_MODEL
from streamproc.readmodel.queries import ReadModel
from streamproc.runtime.projection import Folder
from streamproc.state import keys
from streamproc.state.store import MemoryStore


class Log:
    """An in-memory event log folded batch by batch, the way the projector does."""

    def __init__(self) -> None:
        self.store = MemoryStore()
        self.folder = Folder(self.store, [f() for f in READ_MODEL], "test")
        self.seq = 0
        self.rm = ReadModel(self.store)

    def event(self, kind: str, payload: p.Payload, tenant: str = "t1", ms: int = 0) -> Envelope:
        return new_event(kind, tenant, payload, f"{ms or 1_700_000_000_000 + self.seq}:0:n1")

    def fold(self, *events: Envelope) -> int:
        msgs = []
        for e in events:
            self.seq += 1
            msgs.append((self.seq, f"x.{e.kind}", encode(e)))
        self.folder.apply(msgs, keys.Checkpoint("S", "epoch", self.seq))
        return self.seq

    def emit(self, kind: str, payload: p.Payload, tenant: str = "t1") -> int:
        return self.fold(self.event(kind, payload, tenant))

    def rejection(self, seq: int, projection: str) -> str | None:
        r = self.rm.rejection(seq, projection)
        return None if r is None else r.reason


def created(sid: str = "s1", **kw: object) -> p.ScheduleCreated:
    fields = {"schedule_id": sid, "name": "nightly", "cron": "0 2 * * *", "timezone": "UTC"}
    fields.update(kw)
    return p.ScheduleCreated(**fields)  # type: ignore[arg-type]
