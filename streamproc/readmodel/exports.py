"""Export records: one per (tenant, source kind, exportId), so a repeated delivery of an
export is recognised long after JetStream's duplicate window has passed."""

from __future__ import annotations

import hashlib
from typing import ClassVar, Literal

import msgspec

from streamproc.events.envelope import Envelope
from streamproc.events.payloads import FeedserExport, VexerExport
from streamproc.fold import folds
from streamproc.projection import Projection, Rejection, Tx
from streamproc.readmodel import keys
from streamproc.readmodel.records import ExportRecord, encode
from streamproc.readmodel.schedules import physical_ms

CF = "rm_exports"


def payload_digest(payload: FeedserExport | VexerExport) -> str:
    """SHA-256 of the canonical payload encoding: tells a true repeat from a conflicting one."""
    return hashlib.sha256(msgspec.json.encode(payload)).hexdigest()


def export_key(tenant: str, kind: str, export_id: str) -> bytes:
    return keys.key(tenant, kind, export_id)


class Exports(Projection):
    name: ClassVar[str] = "rm_exports"
    creates: ClassVar[frozenset[str]] = frozenset({"export.feedser", "export.vexer"})
    families: ClassVar[tuple[str, ...]] = (CF,)

    @folds(FeedserExport, VexerExport)
    def _export(self, tx: Tx, event: Envelope, payload: FeedserExport | VexerExport) -> None:
        kind: Literal["feedser", "vexer"] = (
            "feedser" if isinstance(payload, FeedserExport) else "vexer"
        )
        table = tx.table(CF)
        k = export_key(event.tenant, kind, payload.export_id)
        if table.get(k) is not None:
            raise Rejection("duplicate_export", f"{kind} export {payload.export_id} is recorded")
        rec = ExportRecord(
            export_id=payload.export_id,
            kind=kind,
            event_id=event.id,
            seq=tx.seq,
            payload_sha256=payload_digest(payload),
            recorded_ms=physical_ms(event),
        )
        table.put(k, encode(rec))
