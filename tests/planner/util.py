"""Builders for planner tests: an in-memory ImpactIndex (its real code), schedules, events,
and an in-memory log folded through the planner's projections (no clock, no I/O)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope, encode, new_event
from streamproc.impact.index import ImpactIndex
from streamproc.planner.exports import PlannerExports
from streamproc.planner.projection import LastReports, PlannerRuns, PlannerSchedules
from streamproc.planner.reactor import PlannerState
from streamproc.planner.records import ScheduleView
from streamproc.runtime.projection import Folder
from streamproc.sbom.image import build_image
from streamproc.state import keys
from streamproc.state.store import MemoryStore

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def digest(tenant: str, n: int) -> str:
    return "sha256:" + hashlib.sha256(f"{tenant}/{n}".encode()).hexdigest()


def lib(k: int) -> str:
    return f"pkg:deb/debian/lib{k}"


def add_images(
    index: ImpactIndex,
    tenant: str,
    count: int,
    *,
    keys_of: object = None,
    start: int = 0,
    namespace: str = "default",
    registry: str = "registry.local",
    used: bool = True,
) -> list[str]:
    """``count`` images; image ``n`` contains lib(n % 100) and lib(100 + n % 7) unless
    ``keys_of(n)`` names its product keys."""
    out = []
    for n in range(start, start + count):
        ks = keys_of(n) if callable(keys_of) else [lib(n % 100), lib(100 + n % 7)]
        d = digest(tenant, n)
        index.index_image(
            build_image(
                tenant=tenant,
                digest=d,
                purls=[f"{k}@1.{n % 3}" for k in ks],
                used=[used] * len(ks),
                registry=registry,
                repo=f"app{n % 5}",
                namespace=namespace,
            )
        )
        out.append(d)
    return out


def schedule(
    sid: str = "s1",
    tenant: str = "t1",
    *,
    cron: str = "0 2 * * *",
    timezone: str = "UTC",
    subscriptions: Iterable[str] = ("feedser", "vexer"),
    selection: p.Selection | None = None,
    limits: p.Limits | None = None,
    only_if: p.OnlyIf | None = None,
    mode: p.Mode = "analysis-only",
    paused: bool = False,
    deleted: bool = False,
) -> ScheduleView:
    return ScheduleView(
        id=sid,
        tenant=tenant,
        cron=cron,
        timezone=timezone,
        mode=mode,
        selection=selection or p.Selection(),
        only_if=only_if or p.OnlyIf(),
        limits=limits or p.Limits(),
        subscriptions=list(subscriptions),
        paused=paused,
        deleted=deleted,
    )


def created(sid: str = "s1", **kw: object) -> p.ScheduleCreated:
    fields: dict[str, object] = {
        "schedule_id": sid,
        "name": f"schedule {sid}",
        "cron": "0 2 * * *",
        "timezone": "UTC",
    }
    fields.update(kw)
    return p.ScheduleCreated(**fields)  # type: ignore[arg-type]


def feedser(export_id: str, keys: Iterable[str] = (), **kw: object) -> p.FeedserExport:
    return p.FeedserExport(export_id=export_id, changed_product_keys=list(keys), **kw)  # type: ignore[arg-type]


def event(
    kind: str, payload: p.Payload, tenant: str = "t1", ms: int = T0, event_id: str | None = None
) -> Envelope:
    return new_event(kind, tenant, payload, f"{ms}:0:n1", event_id=event_id)


class Log:
    """An in-memory event log folded batch by batch through the planner's projections."""

    def __init__(self) -> None:
        self.store = MemoryStore()
        self.projections = [PlannerSchedules(), PlannerExports(), PlannerRuns(), LastReports()]
        self.folder = Folder(self.store, self.projections, "test")
        self.seq = 0

    @property
    def state(self) -> PlannerState:
        st = PlannerState.of({x.name: x for x in self.projections})
        assert st is not None
        return st

    def fold(self, *events: Envelope) -> int:
        msgs = []
        for e in events:
            self.seq += 1
            msgs.append((self.seq, f"x.{e.kind}", encode(e)))
        self.folder.apply(msgs, keys.Checkpoint("S", "epoch", self.seq))
        return self.seq

    def rejection(self, seq: int, projection: str) -> str | None:
        import msgspec

        raw = self.store.get(
            keys.META_CF, keys.seq_key(keys.REJECTION_PREFIX, seq) + projection.encode()
        )
        return None if raw is None else msgspec.json.decode(raw, type=keys.Rejected).reason
