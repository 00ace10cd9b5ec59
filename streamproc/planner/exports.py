"""The planner's export projection: exports awaiting their debounce window, which run claimed
which export, the per-tenant cursors, and the KEV/critical flags and EPSS of vulns.

A storm of deliveries of one export id folds once: later copies are rejected as
``duplicate_export``. An export is *pending* until a ``run.requested`` naming it is folded
(the run claims it, and its HLC time opens the source's next coalescing window); when that
run's ``run.planned`` is folded, the cursors advance in the same batch, and once a run chain
spills nothing more the export's keys are released.

Revisions (the same source re-sending an export id with another body) keep the last: a
revision that arrives while an earlier one is pending supersedes it and takes its place in
its window; one that arrives after an earlier one was claimed is pending itself, and its
run — a follow-up — plans only what no claimed revision of the export named: its keys and
KEV vuln ids outside the head's ``covered`` hashes, frozen into its record when it is
claimed, so a replan derives the same plan.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import ClassVar

import msgspec

from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope
from streamproc.names import PL_CLAIMS_CF, PL_CURSORS_CF, PL_EXPORTS, PL_EXPORTS_CF, PL_VULNS_CF
from streamproc.planner import records as r
from streamproc.planner.changes import (
    KeyChange,
    add_coverage,
    feedser_change,
    uncovered,
    vexer_change,
)
from streamproc.projections.cursor import advanced
from streamproc.projections.revision import check_revision
from streamproc.runtime.fold import folds
from streamproc.runtime.projection import Projection
from streamproc.state.store import BULK, Reads, Store
from streamproc.state.tx import Table, Tx

CLAIMS_CF = PL_CLAIMS_CF
CURSORS_CF = PL_CURSORS_CF
EXPORTS_CF = PL_EXPORTS_CF
VULNS_CF = PL_VULNS_CF


Ref = tuple[r.Source, str, int]
"""(source kind, export ref, revision)."""


def _refs(req: p.RunRequested) -> list[Ref]:
    reason = req.reason
    feedser: list[Ref] = [("feedser", x, reason.revision_of(x)) for x in reason.feedser_export_ids]
    vexer: list[Ref] = [("vexer", x, reason.revision_of(x)) for x in reason.vexer_export_ids]
    return sorted(set(feedser + vexer))


def record_key(tenant: str, source: r.Source, ref: str, revision: int = 1) -> bytes:
    """The first revision (the export's head) by its ref, later ones by ref and number."""
    if revision == 1:
        return r.key(tenant, source, ref)
    return r.key(tenant, source, ref, str(revision))


class PlannerExports(Projection):
    name: ClassVar[str] = PL_EXPORTS
    creates: ClassVar[frozenset[str]] = frozenset(
        {"export.feedser", "export.vexer", "run.requested"}
    )
    """A request claims the exports it names (a claim of the run); an export's first
    revision creates it, a later one needs it (``unknown_export``)."""
    observes: ClassVar[frozenset[str]] = frozenset({"run.planned", "run.cancel_requested"})
    """They act on the run's claim, which most runs (manual, cron) never make."""
    families: ClassVar[tuple[str, ...]] = (EXPORTS_CF, CLAIMS_CF, CURSORS_CF, VULNS_CF)
    family_reads: ClassVar[Mapping[str, Reads]] = {CURSORS_CF: BULK}
    """The cursors are read whole at :meth:`open` (then kept in memory); the rest by key."""
    version: ClassVar[int] = 4
    """2: cursors hold when each source's latest coalescing window opened. 3: revisions.
    4: a Vexer export's keys are its claims' packages (version-less), the EPSS of the
    changed findings is kept by key and each vuln's beside its flags."""

    def __init__(self) -> None:
        self.pending: dict[tuple[str, r.Source], dict[str, r.ExportRecord]] = {}
        """Unclaimed exports by (tenant, source), then export ref: each one's latest
        revision (an earlier pending one is superseded by it)."""
        self.cursors: dict[str, r.Cursor] = {}
        self._store: Store | None = None

    def open(self, store: Store) -> None:
        self._store = store
        self.pending.clear()
        self.cursors.clear()
        for _, v in store.scan(EXPORTS_CF):
            e = r.decode_export(v)
            if e.run_id is None and not e.superseded:
                self.pending.setdefault((e.tenant, e.source), {})[e.export_id] = e
        for k, v in store.scan(CURSORS_CF):
            self.cursors[k.decode()] = r.decode_cursor(v)

    # ------------------------------------------------------------------ reading

    def exports(self, tenant: str, refs: Iterable[Ref]) -> list[r.ExportRecord]:
        """Committed records of the named export revisions (unknown ones are skipped)."""
        assert self._store is not None
        out = []
        for source, export_id, revision in refs:
            raw = self._store.get(EXPORTS_CF, record_key(tenant, source, export_id, revision))
            if raw is not None:
                out.append(r.decode_export(raw))
        return out

    def exports_of(self, tenant: str, req: p.RunRequested) -> list[r.ExportRecord]:
        return self.exports(tenant, _refs(req))

    def to_plan(self, rec: r.ExportRecord) -> r.ExportRecord:
        """What planning ``rec`` covers: a pending revision, only what the export's claimed
        revisions did not name; a claimed one, what its claim froze."""
        if rec.run_id is not None or rec.revision == 1:
            return rec
        assert self._store is not None
        raw = self._store.get(EXPORTS_CF, record_key(rec.tenant, rec.source, rec.export_id))
        return uncovered(rec, r.decode_export(raw).covered) if raw is not None else rec

    def vuln(self, tenant: str, vuln_id: str) -> tuple[int, p.Epss | None]:
        """The KEV and critical bits (0: none) and the latest EPSS Feedser exports gave a
        vulnerability."""
        assert self._store is not None
        return r.decode_vuln(self._store.get(VULNS_CF, r.key(tenant, vuln_id)))

    def cursor(self, tenant: str) -> r.Cursor:
        return self.cursors.get(tenant) or r.Cursor()

    # ------------------------------------------------------------------ folding

    @folds(p.FeedserExport, p.VexerExport)
    def _export(self, tx: Tx, event: Envelope, pl: p.FeedserExport | p.VexerExport) -> None:
        t = event.tenant
        source: r.Source = "feedser" if isinstance(pl, p.FeedserExport) else "vexer"
        table = tx.table(EXPORTS_CF)
        ref = pl.ref  # <source>:<exportId>: one source's ids never stand in for another's
        n = pl.revision
        head_key = record_key(t, source, ref)
        raw_head = table.get(head_key)
        head = r.decode_export(raw_head) if raw_head is not None else None
        check_revision(source, ref, n, head.latest if head is not None else None)
        change = self._change(tx, t, pl)
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
            epss=change.epss or msgspec.UNSET,
            revision=n,
        )
        group = self.pending.get((t, source), {})
        before = group.get(ref)
        if before is not None:  # keep last: it takes the pending one's place in its window
            rec = msgspec.structs.replace(rec, ms=before.ms)
            table.put(
                record_key(t, source, ref, before.revision),
                r.encode(msgspec.structs.replace(self._current(table, before), superseded=True)),
            )
        if head is None:
            table.put(head_key, r.encode(rec))
        else:
            table.put(record_key(t, source, ref, n), r.encode(rec))
            head = _head(table, t, source, ref)  # as it is now: superseded just now, maybe
            table.put(head_key, r.encode(msgspec.structs.replace(head, latest=n)))
        self.pending.setdefault((t, source), {})[ref] = rec

    @staticmethod
    def _current(table: Table, rec: r.ExportRecord) -> r.ExportRecord:
        raw = table.get(record_key(rec.tenant, rec.source, rec.export_id, rec.revision))
        return r.decode_export(raw) if raw is not None else rec

    @staticmethod
    def _change(tx: Tx, t: str, pl: p.FeedserExport | p.VexerExport) -> KeyChange:
        """The export's keys; a Feedser export's KEV and critical vulns are remembered
        (flags only ever added) with their latest EPSS, a Vexer export's claims tagged and
        ranked with them."""
        vulns = tx.table(VULNS_CF)
        if isinstance(pl, p.FeedserExport):
            change, flags = feedser_change(pl)
            epss = {a.vuln_id: a.epss for a in pl.advisories if a.epss is not None}
            for vuln in sorted(flags.keys() | epss.keys()):
                vk = r.key(t, vuln)
                old = vulns.get(vk)
                held_flags, held_epss = r.decode_vuln(old)
                new = r.encode_vuln(flags.get(vuln, 0) | held_flags, epss.get(vuln) or held_epss)
                if new != old:
                    vulns.put(vk, new)
            return change

        def vuln_of(vuln: str) -> tuple[int, p.Epss | None]:
            return r.decode_vuln(vulns.get(r.key(t, vuln)))

        return vexer_change(pl, vuln_of)

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
        for source, export_id, revision in refs:
            k = record_key(tenant, source, export_id, revision)
            raw = table.get(k)
            if raw is None:
                continue
            rec = r.decode_export(raw)
            if rec.run_id is not None:
                continue
            # Freeze what this claim plans (the part no earlier claim covered), and add
            # what it names to what the export's claims cover.
            covered = _head(table, tenant, source, export_id).covered
            frozen = uncovered(rec, covered)
            table.put(k, r.encode(msgspec.structs.replace(frozen, run_id=req.run_id)))
            head = _head(table, tenant, source, export_id)
            table.put(
                record_key(tenant, source, export_id),
                r.encode(msgspec.structs.replace(head, covered=add_coverage(covered, rec))),
            )
            opened.add(source)
            group = self.pending.get((tenant, source))
            if group is not None and group.get(export_id) is not None:
                if group[export_id].revision == revision:
                    del group[export_id]
                if not group:
                    del self.pending[(tenant, source)]
        claims.put(ck, r.encode([_claim_item(s, x, n) for s, x, n in refs]))
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

    def _claimed(self, claims: Table, tenant: str, run_id: str) -> list[Ref]:
        raw = claims.get(r.key(tenant, run_id))
        if raw is None:
            return []
        out: list[Ref] = []
        for item in r.decode_strs(raw):
            source, _, rest = item.partition("\x00")
            export_id, _, revision = rest.partition("\x00")
            kind: r.Source = "feedser" if source == "feedser" else "vexer"
            out.append((kind, export_id, int(revision) if revision else 1))
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
        for source, export_id, revision in refs:
            raw = table.get(record_key(tenant, source, export_id, revision))
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
        """The run (chain) is done with these exports: drop their keys, keep their ids (and
        the head's coverage, for a later revision), and the keys of the revisions each
        one superseded, which no run will plan any more."""
        claims = tx.table(CLAIMS_CF)
        for source, export_id, revision in self._claimed(claims, tenant, run_id):
            for n in range(1, revision + 1):
                k = record_key(tenant, source, export_id, n)
                raw = table.get(k)
                if raw is None:
                    continue
                e = r.decode_export(raw)
                # The revision the run (chain) planned; an earlier one another run claimed
                # is that run's to release.
                mine = n == revision and e.run_id is not None
                if (mine or (e.superseded and e.run_id is None)) and not e.released:
                    slim = msgspec.structs.replace(
                        e,
                        keys=[],
                        kev_keys=[],
                        critical_keys=[],
                        kev_vulns=[],
                        epss=msgspec.UNSET,
                        released=True,
                    )
                    table.put(k, r.encode(slim))
        claims.delete(r.key(tenant, run_id))

    def discard(self) -> None:
        if self._store is not None:
            self.open(self._store)


def _head(table: Table, tenant: str, source: r.Source, ref: str) -> r.ExportRecord:
    """The export's first revision, which holds what its claims covered (it exists for every
    revision folded: a later one without it is ``unknown_export``)."""
    raw = table.get(record_key(tenant, source, ref))
    assert raw is not None, f"{source} export {ref} has no head"
    return r.decode_export(raw)


def _claim_item(source: r.Source, export_id: str, revision: int) -> str:
    """How a claim lists an export revision (the first one as before revisions existed)."""
    if revision == 1:
        return f"{source}\x00{export_id}"
    return f"{source}\x00{export_id}\x00{revision}"
