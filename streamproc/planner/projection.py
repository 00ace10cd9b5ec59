"""The planner's projections: schedules as it needs them, run markers with the spill backlog,
and the last report time per image. (Exports and cursors live in :mod:`.exports`.)

Each keeps a memory mirror of its table for the reactors, changed only after the fold has
decided to apply an event, written in ``flush`` and reloaded from the store on ``discard``.
Folds read only the event and the state: the event's own HLC is its time.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import ClassVar

import msgspec
from msgspec import UNSET

from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope
from streamproc.ids import spill_run_id
from streamproc.names import (
    PL_BACKLOG_CF,
    PL_FINDINGS_CF,
    PL_REPORTS,
    PL_REPORTS_CF,
    PL_RUNS,
    PL_RUNS_CF,
    PL_SCHEDULES,
    PL_SCHEDULES_CF,
)
from streamproc.planner import records as r
from streamproc.runtime.fold import folds
from streamproc.runtime.projection import Projection, Rejection
from streamproc.state.store import BULK, Reads, Store
from streamproc.state.tx import Tx

BACKLOG_CF = PL_BACKLOG_CF
REPORTS_CF = PL_REPORTS_CF
FINDINGS_CF = PL_FINDINGS_CF
RUNS_CF = PL_RUNS_CF
SCHEDULES_CF = PL_SCHEDULES_CF

_PATCH = ("cron", "timezone", "mode", "selection", "only_if", "limits", "subscriptions")


def parse_utc_ms(text: str | None) -> int | None:
    """``reason.scheduledFor`` (ISO 8601 with an offset) as UTC ms; None if absent or bad."""
    if not text:
        return None
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        return None
    if dt.tzinfo is None:
        return None
    return round(dt.timestamp() * 1000)


class PlannerSchedules(Projection):
    """Schedules by tenant, with the cron anchor and the latest tick fired."""

    name: ClassVar[str] = PL_SCHEDULES
    creates: ClassVar[frozenset[str]] = frozenset({"schedule.created"})
    families: ClassVar[tuple[str, ...]] = (SCHEDULES_CF,)
    family_reads: ClassVar[Mapping[str, Reads]] = {SCHEDULES_CF: BULK}
    """Read whole at :meth:`open`, then only written: its blocks are not worth caching."""

    def __init__(self) -> None:
        self.by_tenant: dict[str, dict[str, r.ScheduleView]] = {}
        self._dirty: set[tuple[str, str]] = set()
        self._store: Store | None = None

    def open(self, store: Store) -> None:
        self._store = store
        self.by_tenant.clear()
        for _, v in store.scan(SCHEDULES_CF):
            s = r.decode_schedule(v)
            self.by_tenant.setdefault(s.tenant, {})[s.id] = s

    def get(self, tenant: str, schedule_id: str) -> r.ScheduleView | None:
        return self.by_tenant.get(tenant, {}).get(schedule_id)

    def for_tenant(self, tenant: str) -> list[r.ScheduleView]:
        return [s for _, s in sorted(self.by_tenant.get(tenant, {}).items())]

    def all(self) -> Iterator[r.ScheduleView]:
        for t in sorted(self.by_tenant):
            yield from self.for_tenant(t)

    def _set(self, tenant: str, nxt: r.ScheduleView) -> None:
        """The next state (a new object: the mirror changes only once the fold decided)."""
        self.by_tenant.setdefault(tenant, {})[nxt.id] = nxt
        self._dirty.add((tenant, nxt.id))

    def _existing(self, e: Envelope, schedule_id: str) -> r.ScheduleView:
        cur = self.get(e.tenant, schedule_id)
        if cur is None or cur.deleted:
            raise Rejection("unknown_schedule", f"{e.kind} for a schedule that does not exist")
        return cur

    @folds(p.ScheduleCreated)
    def _created(self, tx: Tx, e: Envelope, c: p.ScheduleCreated) -> None:
        cur = self.get(e.tenant, c.schedule_id)
        if cur is not None:
            raise Rejection("schedule_exists", f"schedule {cur.id} already exists")
        view = r.ScheduleView(
            id=c.schedule_id,
            tenant=e.tenant,
            cron=c.cron,
            timezone=c.timezone,
            mode=c.mode,
            selection=c.selection,
            only_if=c.only_if,
            limits=c.limits,
            subscriptions=list(c.subscriptions),
            paused=not c.enabled,
            active_since_ms=r.physical_ms(e.hlc),
        )
        self._set(e.tenant, view)

    @folds(p.ScheduleUpdated)
    def _updated(self, tx: Tx, e: Envelope, u: p.ScheduleUpdated) -> None:
        cur = self._existing(e, u.schedule_id)
        changes = {f: getattr(u, f) for f in _PATCH if getattr(u, f) is not UNSET}
        if "subscriptions" in changes:
            changes["subscriptions"] = list(changes["subscriptions"])
        moved = any(f in changes and changes[f] != getattr(cur, f) for f in _PATCH[:2])
        if moved:  # a new cron or zone: ticks of the old one are not owed
            changes["active_since_ms"] = max(cur.active_since_ms, r.physical_ms(e.hlc))
        self._set(e.tenant, msgspec.structs.replace(cur, **changes))

    @folds(p.ScheduleStateChange, kinds=("schedule.paused",))
    def _paused(self, tx: Tx, e: Envelope, s: p.ScheduleStateChange) -> None:
        cur = self._existing(e, s.schedule_id)
        if cur.paused:
            raise Rejection("already_paused", f"schedule {cur.id} is already paused")
        self._set(e.tenant, msgspec.structs.replace(cur, paused=True))

    @folds(p.ScheduleStateChange, kinds=("schedule.resumed",))
    def _resumed(self, tx: Tx, e: Envelope, s: p.ScheduleStateChange) -> None:
        cur = self._existing(e, s.schedule_id)
        if not cur.paused:
            raise Rejection("not_paused", f"schedule {cur.id} is not paused")
        # Ticks that fell into the pause are not owed either.
        since = max(cur.active_since_ms, r.physical_ms(e.hlc))
        self._set(e.tenant, msgspec.structs.replace(cur, paused=False, active_since_ms=since))

    @folds(p.ScheduleStateChange, kinds=("schedule.deleted",))
    def _deleted(self, tx: Tx, e: Envelope, s: p.ScheduleStateChange) -> None:
        cur = self._existing(e, s.schedule_id)
        self._set(e.tenant, msgspec.structs.replace(cur, deleted=True))

    @folds(p.RunRequested)
    def _tick(self, tx: Tx, e: Envelope, req: p.RunRequested) -> None:
        """A cron run's request is the tick of its schedule: the latest one fired."""
        if req.trigger != "cron" or req.schedule_id is None:
            return
        cur = self.get(e.tenant, req.schedule_id)
        if cur is None:
            raise Rejection("unknown_schedule", f"a cron tick of unknown {req.schedule_id}")
        at = parse_utc_ms(req.reason.scheduled_for)
        if at is None or (cur.last_fired_ms or -1) >= at:
            return
        self._set(e.tenant, msgspec.structs.replace(cur, last_fired_ms=at))

    def flush(self, tx: Tx) -> None:
        table = tx.table(SCHEDULES_CF)
        for tenant, sid in sorted(self._dirty):
            table.put(r.key(tenant, sid), r.encode(self.by_tenant[tenant][sid]))
        self._dirty.clear()

    def discard(self) -> None:
        self._dirty.clear()
        if self._store is not None:
            self.open(self._store)


class PlannerRuns(Projection):
    """Requested runs (pending until planned, a cancelled one too: its plan is empty),
    planned markers, the backlog."""

    name: ClassVar[str] = PL_RUNS
    creates: ClassVar[frozenset[str]] = frozenset({"run.requested"})
    families: ClassVar[tuple[str, ...]] = (RUNS_CF, BACKLOG_CF)
    family_reads: ClassVar[Mapping[str, Reads]] = {BACKLOG_CF: BULK}
    """The backlog is read whole at :meth:`open` (then kept in memory); runs are point-read."""

    def __init__(self) -> None:
        self.pending: dict[tuple[str, str], r.RunRecord] = {}
        self.backlog: dict[tuple[str, str], r.Backlog] = {}
        self._store: Store | None = None

    def open(self, store: Store) -> None:
        self._store = store
        self.pending.clear()
        self.backlog.clear()
        for _, v in store.scan(RUNS_CF):
            rec = r.decode_run(v)
            if rec.state in r.UNPLANNED:
                self.pending[(rec.tenant, rec.run_id)] = rec
        for _, v in store.scan(BACKLOG_CF):
            b = r.decode_backlog(v)
            self.backlog[(b.tenant, b.run_id)] = b

    def record(self, tenant: str, run_id: str) -> r.RunRecord | None:
        assert self._store is not None
        raw = self._store.get(RUNS_CF, r.key(tenant, run_id))
        return None if raw is None else r.decode_run(raw)

    def is_settled(self, tenant: str, run_id: str) -> bool:
        """Its plan is recorded: nothing more to plan for this run id."""
        rec = self.record(tenant, run_id)
        return rec is not None and rec.state not in r.UNPLANNED

    def backlog_images(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for b in self.backlog.values():
            out[b.tenant] = out.get(b.tenant, 0) + b.spilled
        return out

    @staticmethod
    def _current(tx: Tx, tenant: str, run_id: str) -> r.RunRecord | None:
        raw = tx.table(RUNS_CF).get(r.key(tenant, run_id))
        return None if raw is None else r.decode_run(raw)

    @folds(p.RunRequested)
    def _requested(self, tx: Tx, e: Envelope, pl: p.RunRequested) -> None:
        t = e.tenant
        if self._current(tx, t, pl.run_id) is not None:
            raise Rejection("run_exists", f"run {pl.run_id} was already requested")
        b = self.backlog.get((t, pl.run_id))
        ms = r.physical_ms(e.hlc)
        rec = r.RunRecord(
            run_id=pl.run_id,
            tenant=t,
            event_id=e.id,
            hlc=e.hlc,
            ms=ms,
            request=pl,
            offset=b.offset if b else 0,
            root_run_id=b.root_run_id if b else None,
            cause_ms=b.cause_ms if b else ms,
        )
        tx.table(RUNS_CF).put(r.key(t, pl.run_id), r.encode(rec))
        if b is not None:
            tx.table(BACKLOG_CF).delete(r.key(t, pl.run_id))
            del self.backlog[(t, pl.run_id)]
        self.pending[(t, pl.run_id)] = rec

    @folds(p.RunPlanned)
    def _planned(self, tx: Tx, e: Envelope, pl: p.RunPlanned) -> None:
        t = e.tenant
        cur = self._current(tx, t, pl.run_id)
        ms = r.physical_ms(e.hlc)
        if cur is None:
            raise Rejection("unknown_run", f"run.planned for run {pl.run_id}, never requested")
        if cur.state == "planned":
            raise Rejection("already_planned", f"run {pl.run_id} was already planned")
        was_cancelled = cur.state == "cancelled"
        rec = msgspec.structs.replace(
            cur, state="planned", stats=pl.stats, planned_ms=ms, segments=list(pl.segments)
        )
        tx.table(RUNS_CF).put(r.key(t, pl.run_id), r.encode(rec))
        self.pending.pop((t, pl.run_id), None)
        if pl.stats.spilled > 0 and cur.request is not None and not was_cancelled:
            root = cur.root_run_id or cur.run_id
            offset = cur.offset + pl.stats.queued
            b = r.Backlog(
                run_id=spill_run_id(root, offset),
                tenant=t,
                parent_run_id=pl.run_id,
                root_run_id=root,
                request=cur.request,
                offset=offset,
                spilled=pl.stats.spilled,
                planned_ms=ms,
                cause_ms=cur.cause_ms or cur.ms,
            )
            tx.table(BACKLOG_CF).put(r.key(t, b.run_id), r.encode(b))
            self.backlog[(t, b.run_id)] = b

    @folds(p.RunCancelRequested)
    def _cancel(self, tx: Tx, e: Envelope, c: p.RunCancelRequested) -> None:
        tenant, run_id = e.tenant, c.run_id
        cur = self._current(tx, tenant, run_id)
        if cur is None:
            raise Rejection("unknown_run", f"a cancel for run {run_id}, never requested")
        if cur.state == "requested":  # it stays pending: the planner records an empty plan
            rec = msgspec.structs.replace(cur, state="cancelled")
            tx.table(RUNS_CF).put(r.key(tenant, run_id), r.encode(rec))
            self.pending[(tenant, run_id)] = rec
        for key, b in sorted(self.backlog.items()):  # the rest of a spill chain goes too
            if b.tenant == tenant and run_id in (b.parent_run_id, b.root_run_id):
                tx.table(BACKLOG_CF).delete(r.key(tenant, b.run_id))
                del self.backlog[key]

    def discard(self) -> None:
        if self._store is not None:
            self.open(self._store)


def _report_flags(v: p.VerdictRecorded) -> int:
    findings = (*v.top_findings, *v.findings)
    kev = bool(v.kev_hits) or any(f.kev for f in findings)
    crit = v.new_criticals > 0 or any(f.severity == "critical" for f in findings)
    return (r.KEV if kev else 0) | (r.CRITICAL if crit else 0)


def _by_vuln(v: p.VerdictRecorded) -> list[tuple[str, int, bool]]:
    """(vulnId, highest severity rank, KEV) per vulnerability of a report, sorted."""
    best: dict[str, tuple[int, bool]] = {}
    for f in (*v.top_findings, *v.findings):
        rank, kev = best.get(f.vuln_id, (0, False))
        best[f.vuln_id] = (max(rank, p.SEVERITY_RANK[f.severity]), kev or f.kev)
    return [(vuln, rank, kev) for vuln, (rank, kev) in sorted(best.items())]


class LastReports(Projection):
    """Per tenant and digest: when its last report was made (HLC ms) and whether it had KEV
    or critical findings — for ``onlyIf.lastReportOlderThanDays`` and nightly ordering —
    and, read from the store on demand, its findings by vulnerability (what the impact
    preview's projected deltas are judged against)."""

    name: ClassVar[str] = PL_REPORTS
    creates: ClassVar[frozenset[str]] = frozenset({"verdict.recorded"})
    """An image's first report creates its entry (reports are about images, not runs)."""
    families: ClassVar[tuple[str, ...]] = (REPORTS_CF, FINDINGS_CF)
    family_reads: ClassVar[Mapping[str, Reads]] = {REPORTS_CF: BULK}
    """Reports are read whole at :meth:`open` (then kept in memory); findings on demand."""
    version: ClassVar[int] = 2
    """2: each image's last findings (``pl_findings``)."""

    def __init__(self) -> None:
        self.by_tenant: dict[str, dict[str, tuple[int, int]]] = {}
        self._dirty: set[tuple[str, str]] = set()
        self._store: Store | None = None

    def open(self, store: Store) -> None:
        self._store = store
        self.by_tenant.clear()
        for k, v in store.scan(REPORTS_CF):
            tenant, digest = r.split(k)
            self.by_tenant.setdefault(tenant, {})[digest] = (int.from_bytes(v[:8], "big"), v[8])

    def get(self, tenant: str) -> Mapping[str, tuple[int, int]]:
        return self.by_tenant.get(tenant, {})

    def findings(self, tenant: str, digest: str) -> dict[str, tuple[int, bool]] | None:
        """The image's last report by vulnerability: (severity rank, KEV); None if it has
        never been reported."""
        assert self._store is not None
        raw = self._store.get(FINDINGS_CF, r.key(tenant, digest))
        if raw is None:
            return None
        return {vuln: (rank, kev) for vuln, rank, kev in r.decode_findings(raw)}

    @folds(p.VerdictRecorded)
    def _verdict(self, tx: Tx, event: Envelope, v: p.VerdictRecorded) -> None:
        if v.status != "ok":
            return  # a failed evaluation is not a report
        ms = r.physical_ms(event.hlc)
        reports = self.by_tenant.setdefault(event.tenant, {})
        prev = reports.get(v.digest)
        if prev is not None and prev[0] > ms:
            return
        tx.table(FINDINGS_CF).put(r.key(event.tenant, v.digest), r.encode(_by_vuln(v)))
        reports[v.digest] = (ms, _report_flags(v))
        self._dirty.add((event.tenant, v.digest))

    def flush(self, tx: Tx) -> None:
        table = tx.table(REPORTS_CF)
        for tenant, digest in sorted(self._dirty):
            ms, flags = self.by_tenant[tenant][digest]
            table.put(r.key(tenant, digest), ms.to_bytes(8, "big") + bytes([flags]))
        self._dirty.clear()

    def discard(self) -> None:
        self._dirty.clear()
        if self._store is not None:
            self.open(self._store)
