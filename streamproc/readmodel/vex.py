"""VEX documents as the read model holds them: per tenant and document, the version in
force and every claim it makes, folded from the changed claims of ``export.vexer`` events.

A document's claims are what ``PUT /vex/{documentId}`` compares a new version with; claims
of an export that names no document belong to its source. Keys: ``d`` tenant, document →
:class:`VexDocumentRecord`; ``c`` tenant, document, purl, vuln, image → the claim.
"""

from __future__ import annotations

from typing import ClassVar

import msgspec

from streamproc.events.envelope import Envelope
from streamproc.events.payloads import VexerExport
from streamproc.names import RM_VEX
from streamproc.readmodel import keys
from streamproc.readmodel.queries import Page
from streamproc.readmodel.schedules import physical_ms
from streamproc.runtime.fold import folds
from streamproc.runtime.projection import Projection
from streamproc.state.store import Store
from streamproc.state.tx import Tx
from streamproc.vex.claims import Key
from streamproc.vex.model import Claim, Status

CF = RM_VEX
SEP = "\x00"


class VexDocumentRecord(msgspec.Struct, kw_only=True):
    document_id: str
    format: str
    version: str
    sha256: str
    statements: int = 0
    claims: int = 0
    export_id: str
    """The ref of the export that recorded this version."""
    event_id: str
    seq: int
    updated_ms: int


class _Held(msgspec.Struct, array_like=True):
    status: str
    justification: str | None = None


_enc = msgspec.msgpack.Encoder()
_doc = msgspec.msgpack.Decoder(VexDocumentRecord).decode
_held = msgspec.msgpack.Decoder(_Held).decode


def doc_key(tenant: str, document: str) -> bytes:
    return ("d" + tenant + SEP + document).encode()


def claims_prefix(tenant: str, document: str) -> bytes:
    return ("c" + tenant + SEP + document + SEP).encode()


class VexDocuments(Projection):
    name: ClassVar[str] = CF
    creates: ClassVar[frozenset[str]] = frozenset({"export.vexer"})
    families: ClassVar[tuple[str, ...]] = (CF,)

    @folds(VexerExport)
    def _export(self, tx: Tx, e: Envelope, x: VexerExport) -> None:
        t = tx.table(CF)
        own = x.source or "vexer"
        for c in x.changed_claims:
            k = (
                claims_prefix(e.tenant, c.document_id or own)
                + SEP.join((c.product_key, c.vuln_id, c.image_digest or "")).encode()
            )
            if c.removed:
                t.delete(k)
            else:
                t.put(k, _enc.encode(_Held(c.after, c.justification or None)))
        for d in x.documents or ():
            rec = VexDocumentRecord(
                document_id=d.document_id,
                format=d.format,
                version=d.version,
                sha256=d.sha256,
                statements=d.statements,
                claims=d.claims,
                export_id=x.ref,
                event_id=e.id,
                seq=tx.seq,
                updated_ms=physical_ms(e),
            )
            t.put(doc_key(e.tenant, d.document_id), _enc.encode(rec))


class VexReader:
    """Reads of the committed documents (the gateway)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def document(self, tenant: str, document: str) -> VexDocumentRecord | None:
        raw = self.store.get(CF, doc_key(tenant, document))
        return _doc(raw) if raw is not None else None

    def documents(
        self, tenant: str, *, limit: int, cursor: str | None = None
    ) -> Page[VexDocumentRecord]:
        """By document id, one page."""
        prefix = doc_key(tenant, "")
        out: list[VexDocumentRecord] = []
        for k, raw in self.store.scan(CF, prefix, keys.decode_cursor(prefix, cursor)):
            out.append(_doc(raw))
            if len(out) >= limit:
                return Page(out, keys.encode_cursor(prefix, k))
        return Page(out, None)

    def claims(self, tenant: str, document: str) -> dict[Key, Claim]:
        prefix = claims_prefix(tenant, document)
        out: dict[Key, Claim] = {}
        for k, raw in self.store.scan(CF, prefix):
            purl, vuln, image = k[len(prefix) :].decode().split(SEP)
            held = _held(raw)
            status: Status = held.status  # type: ignore[assignment]  # a VEX status by the event's validation
            claim = Claim(purl, vuln, status, held.justification, image or None)
            out[claim.key] = claim
        return out
