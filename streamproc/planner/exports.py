"""The planner's export projection: exports awaiting their debounce window, which run claimed
which export, the per-tenant cursors, and the KEV/critical flags of vulns.

A storm of deliveries of one export id folds once: later copies are rejected as
``duplicate_export``. An export is *pending* until a ``run.requested`` naming it is folded
(the run claims it, and its HLC time opens the source's next coalescing window); when that
run's ``run.planned`` is folded, the cursors advance in the same batch, and once a run chain
spills nothing more the export's keys are released.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

import msgspec

from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope
from streamproc.fold import folds
from streamproc.names import PL_CLAIMS_CF, PL_CURSORS_CF, PL_EXPORTS, PL_EXPORTS_CF, PL_VULNS_CF
from streamproc.planner import records as r
from streamproc.planner.changes import KeyChange, feedser_change, vexer_change
from streamproc.projection import Projection, Rejection, Table, Tx
from streamproc.projections.cursor import advanced
from streamproc.state.store import Store

CLAIMS_CF = PL_CLAIMS_CF
CURSORS_CF = PL_CURSORS_CF
EXPORTS_CF = PL_EXPORTS_CF
VULNS_CF = PL_VULNS_CF


def _refs(req: p.RunRequested) -> list[tuple[r.Source, str]]:
    reason = req.reason
    feedser: list[tuple[r.Source, str]] = [("feedser", x) for x in reason.feedser_export_ids]
    vexer: list[tuple[r.Source, str]] = [("vexer", x) for x in reason.vexer_export_ids]
    return sorted(set(feedser + vexer))


class PlannerExports(Projection):
    name: ClassVar[str] = PL_EXPORTS
    creates: ClassVar[frozenset[str]] = frozenset(
        {"export.feedser", "export.vexer", "run.requested"}
    )
    """A request claims the exports it names (a claim of the run)."""
    observes: ClassVar[frozenset[str]] = frozenset({"run.planned", "run.cancel_requested"})
    """They act on the run's claim, which most runs (manual, cron) never make."""
    families: ClassVar[tuple[str, ...]] = (EXPORTS_CF, CLAIMS_CF, CURSORS_CF, VULNS_CF)
    version: ClassVar[int] = 2
    """2: cursors hold when each source's latest coalescing window opened."""

    def __init__(self) -> None:
        self.pending: dict[tuple[str, r.Source], dict[str, r.ExportRecord]] = {}
        """Unclaimed exports by (tenant, source), then export id."""
        self.cursors: dict[str, r.Cursor] = {}
        self._store: Store | None = None

    def open(self, store: Store) -> None:
        self._store = store
        self.pending.clear()
        self.cursors.clear()
        for _, v in store.scan(EXPORTS_CF):
            e = r.decode_export(v)
            if e.run_id is None:
                self.pending.setdefault((e.tenant, e.source), {})[e.export_id] = e
        for k, v in store.scan(CURSORS_CF):
            self.cursors[k.decode()] = r.decode_cursor(v)

    # ------------------------------------------------------------------ reading

    def exports(self, tenant: str, refs: Iterable[tuple[r.Source, str]]) -> list[r.ExportRecord]:
        """Committed records of the named exports (unknown ones are skipped)."""
        assert self._store is not None
        out = []
        for source, export_id in refs:
            raw = self._store.get(EXPORTS_CF, r.key(tenant, source, export_id))
            if raw is not None:
                out.append(r.decode_export(raw))
        return out

    def exports_of(self, tenant: str, req: p.RunRequested) -> list[r.ExportRecord]:
        return self.exports(tenant, _refs(req))

    def cursor(self, tenant: str) -> r.Cursor:
        return self.cursors.get(tenant) or r.Cursor()

    # ------------------------------------------------------------------ folding

    @folds(p.FeedserExport, p.VexerExport)
    def _export(self, tx: Tx, event: Envelope, pl: p.FeedserExport | p.VexerExport) -> None:
        t = event.tenant
        source: r.Source = "feedser" if isinstance(pl, p.FeedserExport) else "vexer"
        table = tx.table(EXPORTS_CF)
        ref = pl.ref  # <source>:<exportId>: one source's ids never stand in for another's
        k = r.key(t, source, ref)
        if table.get(k) is not None:
            raise Rejection("duplicate_export", f"{source} export {ref} already folded")
        vulns = tx.table(VULNS_CF)
        change: KeyChange
        if isinstance(pl, p.FeedserExport):
            change, flags = feedser_change(pl)
            for vuln, f in sorted(flags.items()):
                vk = r.key(t, vuln)
                old = vulns.get(vk)
                merged = f | (old[0] if old else 0)
                if old is None or merged != old[0]:
                    vulns.put(vk, bytes([merged]))
        else:

            def flags_of(vuln: str) -> int:
                raw = vulns.get(r.key(t, vuln))
                return raw[0] if raw else 0

            change = vexer_change(pl, flags_of)
        rec = r.ExportRecord(
            export_id=ref,
            source=source,
            tenant=t,
            ms=r.physical_ms(event.hlc),
            hlc=event.hlc,
            event_id=event.id,
            keys=change.keys,
            kev_keys=change.kev_keys,
            critical_keys=change.critical_keys,
            kev_vulns=change.kev_vulns,
        )
        table.put(k, r.encode(rec))
        self.pending.setdefault((t, source), {})[ref] = rec

    @folds(p.RunRequested)
    def _claim(self, tx: Tx, e: Envelope, req: p.RunRequested) -> None:
        tenant, at_ms = e.tenant, r.physical_ms(e.hlc)
        refs = _refs(req)
        if not refs:
            return
        table = tx.table(EXPORTS_CF)
        claims = tx.table(CLAIMS_CF)
        ck = r.key(tenant, req.run_id)
        if claims.get(ck) is not None:
            return  # a repeated request of the same run claims nothing new
        opened: set[r.Source] = set()
        for source, export_id in refs:
            k = r.key(tenant, source, export_id)
            raw = table.get(k)
            if raw is None:
                continue
            rec = r.decode_export(raw)
            if rec.run_id is None:
                table.put(k, r.encode(msgspec.structs.replace(rec, run_id=req.run_id)))
                opened.add(source)
                group = self.pending.get((tenant, source))
                if group is not None:
                    group.pop(export_id, None)
                    if not group:
                        del self.pending[(tenant, source)]
        claims.put(ck, r.encode([f"{s}\x00{x}" for s, x in refs]))
        self._open_windows(tx, tenant, opened, at_ms)

    def _open_windows(self, tx: Tx, tenant: str, sources: set[r.Source], at_ms: int) -> None:
        """A run that claimed exports of a source opens its next coalescing window."""
        cur = self.cursor(tenant)
        new = cur
        for source in sorted(sources):
            if at_ms > (new.window_ms(source) or 0):
                field = "feedser_window_ms" if source == "feedser" else "vexer_window_ms"
                new = msgspec.structs.replace(new, **{field: at_ms})
        if new != cur:
            tx.table(CURSORS_CF).put(tenant.encode(), r.encode(new))
            self.cursors[tenant] = new

    def _claimed(self, claims: Table, tenant: str, run_id: str) -> list[tuple[r.Source, str]]:
        raw = claims.get(r.key(tenant, run_id))
        if raw is None:
            return []
        out: list[tuple[r.Source, str]] = []
        for item in r.decode_strs(raw):
            source, _, export_id = item.partition("\x00")
            out.append(("feedser" if source == "feedser" else "vexer", export_id))
        return out

    @folds(p.RunPlanned)
    def _planned(self, tx: Tx, event: Envelope, pl: p.RunPlanned) -> None:
        tenant = event.tenant
        table = tx.table(EXPORTS_CF)
        refs = self._claimed(tx.table(CLAIMS_CF), tenant, pl.run_id)
        if not refs:
            return
        cur = self.cursor(tenant)
        new = cur
        for source, export_id in refs:
            raw = table.get(r.key(tenant, source, export_id))
            if raw is not None:
                new = advanced(new, source, export_id, r.decode_export(raw).ms)
        if new != cur:
            tx.table(CURSORS_CF).put(tenant.encode(), r.encode(new))
            self.cursors[tenant] = new
        if pl.stats.spilled == 0:
            self._release(tx, table, tenant, pl.run_id)
        else:  # the chain's last run releases the keys; the cursors have advanced already
            tx.table(CLAIMS_CF).delete(r.key(tenant, pl.run_id))

    @folds(p.RunCancelRequested)
    def _cancelled(self, tx: Tx, e: Envelope, c: p.RunCancelRequested) -> None:
        self._release(tx, tx.table(EXPORTS_CF), e.tenant, c.run_id)

    def _release(self, tx: Tx, table: Table, tenant: str, run_id: str) -> None:
        """The run (chain) is done with these exports: drop their keys, keep their ids."""
        claims = tx.table(CLAIMS_CF)
        for source, export_id in self._claimed(claims, tenant, run_id):
            k = r.key(tenant, source, export_id)
            raw = table.get(k)
            if raw is None:
                continue
            e = r.decode_export(raw)
            if not e.released and e.run_id is not None:
                slim = msgspec.structs.replace(
                    e, keys=[], kev_keys=[], critical_keys=[], kev_vulns=[], released=True
                )
                table.put(k, r.encode(slim))
        claims.delete(r.key(tenant, run_id))

    def discard(self) -> None:
        if self._store is not None:
            self.open(self._store)
