"""Export records: one per (tenant, source kind, export ref), so a repeated delivery of an
export is recognised long after JetStream's duplicate window has passed.

The ref is ``<source>:<exportId>`` (:func:`~streamproc.events.payloads.export_ref`): one
source's export ids never collide with another's. Events recorded before exports were
scoped by source keep the key they had, the bare export id."""

from __future__ import annotations

from typing import ClassVar, Literal

from streamproc.events.envelope import Envelope
from streamproc.events.payloads import FeedserExport, VexerExport, export_body
from streamproc.events.payloads import payload_digest as payload_digest
from streamproc.fold import folds
from streamproc.names import RM_EXPORTS
from streamproc.projection import Projection, Rejection, Tx
from streamproc.readmodel import keys
from streamproc.readmodel.records import ExportRecord, encode
from streamproc.readmodel.schedules import physical_ms

CF = RM_EXPORTS


def export_digest(payload: FeedserExport | VexerExport) -> str:
    """:func:`payload_digest` of the export as its sender posted it (without the source,
    which is in the key): the same for events of either schema."""
    return payload_digest(export_body(payload))


def export_key(tenant: str, kind: str, ref: str) -> bytes:
    return keys.key(tenant, kind, ref)


class Exports(Projection):
    name: ClassVar[str] = CF
    creates: ClassVar[frozenset[str]] = frozenset({"export.feedser", "export.vexer"})
    families: ClassVar[tuple[str, ...]] = (CF,)

    @folds(FeedserExport, VexerExport)
    def _export(self, tx: Tx, event: Envelope, payload: FeedserExport | VexerExport) -> None:
        kind: Literal["feedser", "vexer"] = (
            "feedser" if isinstance(payload, FeedserExport) else "vexer"
        )
        table = tx.table(CF)
        k = export_key(event.tenant, kind, payload.ref)
        if table.get(k) is not None:
            raise Rejection("duplicate_export", f"{kind} export {payload.ref} is recorded")
        rec = ExportRecord(
            export_id=payload.export_id,
            kind=kind,
            event_id=event.id,
            seq=tx.seq,
            payload_sha256=export_digest(payload),
            recorded_ms=physical_ms(event),
        )
        table.put(k, encode(rec))
