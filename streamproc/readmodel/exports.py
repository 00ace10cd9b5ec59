"""Export records: one per (tenant, source kind, exportId), so a repeated delivery of an
export is recognised long after JetStream's duplicate window has passed."""

from __future__ import annotations

from typing import ClassVar

from streamproc.events.envelope import Envelope
from streamproc.events.payloads import FeedserExport, VexerExport
from streamproc.events.payloads import payload_digest as payload_digest
from streamproc.names import RM_EXPORTS
from streamproc.projection import Projection, Rejection, Tx
from streamproc.readmodel import keys
from streamproc.readmodel.records import ExportRecord, encode
from streamproc.readmodel.schedules import physical_ms

CF = RM_EXPORTS


def export_key(tenant: str, kind: str, export_id: str) -> bytes:
    return keys.key(tenant, kind, export_id)


class Exports(Projection):
    name: ClassVar[str] = CF
    kinds: ClassVar[frozenset[str]] = frozenset({"export.feedser", "export.vexer"})
    creates: ClassVar[frozenset[str]] = kinds
    families: ClassVar[tuple[str, ...]] = (CF,)

    def fold(self, tx: Tx, event: Envelope) -> None:
        payload = event.payload
        assert isinstance(payload, FeedserExport | VexerExport)
        kind = "feedser" if event.kind == "export.feedser" else "vexer"
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
