"""Export records: one per (tenant, source kind, export ref), as of its latest revision, so
a repeated delivery of an export is recognised long after JetStream's duplicate window has
passed, and a changed body becomes the next revision.

The ref is ``<source>:<exportId>`` (:func:`~streamproc.events.payloads.export_ref`): one
source's export ids never collide with another's. Events recorded before exports were
scoped by source keep the key they had, the bare export id."""

from __future__ import annotations

from typing import ClassVar, Literal

from streamproc.events.envelope import Envelope
from streamproc.events.payloads import FeedserExport, VexerExport, export_body
from streamproc.events.payloads import payload_digest as payload_digest
from streamproc.names import RM_EXPORTS
from streamproc.projections.revision import check_revision
from streamproc.readmodel import keys
from streamproc.readmodel.records import ExportRecord, decode_export, encode
from streamproc.readmodel.schedules import physical_ms
from streamproc.runtime.fold import folds
from streamproc.runtime.projection import Projection
from streamproc.state.tx import Tx

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
    """The first revision creates the export; a later one needs it (``unknown_export``)."""
    families: ClassVar[tuple[str, ...]] = (CF,)
    version: ClassVar[int] = 2
    """2: the latest revision of each export."""

    @folds(FeedserExport, VexerExport)
    def _export(self, tx: Tx, event: Envelope, payload: FeedserExport | VexerExport) -> None:
        kind: Literal["feedser", "vexer"] = (
            "feedser" if isinstance(payload, FeedserExport) else "vexer"
        )
        table = tx.table(CF)
        k = export_key(event.tenant, kind, payload.ref)
        raw = table.get(k)
        known = decode_export(raw) if raw is not None else None
        n = payload.revision
        check_revision(kind, payload.ref, n, known.revision if known is not None else None)
        rec = ExportRecord(
            export_id=payload.export_id,
            kind=kind,
            event_id=event.id,
            seq=tx.seq,
            payload_sha256=export_digest(payload),
            recorded_ms=known.recorded_ms if known is not None else physical_ms(event),
            revision=n,
        )
        table.put(k, encode(rec))
