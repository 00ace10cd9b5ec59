"""The exports a run covers, kept bounded: one key per export in ``rm_run_exports`` (what
``GET /runs/{id}/exports`` pages through), a short summary in the run's record, and the
tenant's impact cursor (``rm_cursors``) that a planned run moves.

A storm coalesces thousands of exports into one run; its record, rewritten by every segment
and verdict fold, and its view, in every page of ``GET /runs``, must not grow with them.
"""

from __future__ import annotations

from streamproc.events import payloads as p
from streamproc.names import RM_CURSORS_CF, RM_RUN_EXPORTS_CF
from streamproc.projections.cursor import Source, advanced
from streamproc.readmodel import keys
from streamproc.readmodel.exports import CF as EXPORTS_CF
from streamproc.readmodel.exports import export_key
from streamproc.readmodel.records import (
    CursorRecord,
    ExportItem,
    ReasonRecord,
    decode_cursor,
    decode_export,
    encode,
    sort_key,
)
from streamproc.state.tx import Tx

ITEMS_CF = RM_RUN_EXPORTS_CF
CURSORS_CF = RM_CURSORS_CF
EXPORTS_SHOWN = 5
"""Refs a run's view lists in ``reason.exports``; ``exportCount`` says how many there are."""


def items_prefix(tenant: str, run_id: str) -> bytes:
    return keys.key(tenant, run_id) + keys.SEP


def item_key(tenant: str, run_id: str, n: int) -> bytes:
    return items_prefix(tenant, run_id) + n.to_bytes(4, "big")


def cursor_key(tenant: str) -> bytes:
    return tenant.encode()


def _items(tx: Tx, tenant: str, reason: p.RunReason) -> list[ExportItem]:
    """The run's exports with the id and time this view recorded for each, in order."""
    table = tx.table(EXPORTS_CF)
    out = []
    sources: tuple[tuple[Source, list[str]], ...] = (
        ("feedser", reason.feedser_export_ids),
        ("vexer", reason.vexer_export_ids),
    )
    for kind, refs in sources:
        for ref in dict.fromkeys(refs):
            raw = table.get(export_key(tenant, kind, ref))
            rec = decode_export(raw) if raw is not None else None
            n = reason.revision_of(ref)
            out.append(
                ExportItem(kind, ref, rec.export_id, rec.recorded_ms, n)
                if rec is not None
                else ExportItem(kind, ref, ref, None, n)
            )
    out.sort(key=sort_key)
    return out


def record_exports(tx: Tx, tenant: str, run_id: str, reason: p.RunReason) -> ReasonRecord:
    """Write the run's export list and return the reason its record keeps."""
    items = _items(tx, tenant, reason)
    table = tx.table(ITEMS_CF)
    first: dict[str, ExportItem] = {}
    latest: dict[str, ExportItem] = {}
    for n, x in enumerate(items):
        table.put(item_key(tenant, run_id, n), encode(x))
        first.setdefault(x.kind, x)
        if x.ms is not None:
            latest[x.kind] = x  # ascending: the last one recorded wins
    return ReasonRecord(
        text=reason.text,
        scheduled_for=reason.scheduled_for,
        export_count=len(items),
        exports=[x.ref for x in items[:EXPORTS_SHOWN]],
        revisions={x.ref: x.revision for x in items[:EXPORTS_SHOWN] if x.revision > 1},
        feedser_export_id=first["feedser"].export_id if "feedser" in first else None,
        vexer_export_id=first["vexer"].export_id if "vexer" in first else None,
        latest=latest,
    )


def delete_exports(tx: Tx, tenant: str, run_id: str) -> None:
    table = tx.table(ITEMS_CF)
    for k in [k for k, _ in table.scan(items_prefix(tenant, run_id))]:
        table.delete(k)


def advance_cursor(tx: Tx, tenant: str, reason: ReasonRecord, at_ms: int) -> None:
    """A planned run moves each source's cursor to its latest export (if that is later)."""
    if not reason.latest:
        return
    table = tx.table(CURSORS_CF)
    raw = table.get(cursor_key(tenant))
    cur = decode_cursor(raw) if raw is not None else CursorRecord()
    new = cur
    for kind, x in sorted(reason.latest.items()):
        assert x.ms is not None
        source: Source = "feedser" if kind == "feedser" else "vexer"
        new = advanced(
            new, source, x.ref, x.ms, **{f"{source}_export_id": x.export_id, "updated_ms": at_ms}
        )
    if new != cur:
        table.put(cursor_key(tenant), encode(new))
