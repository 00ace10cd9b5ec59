"""What the ``feeds`` role has recorded, folded from the log: its exports by ref (what a
repeat or the next revision is told by, as the read model's ``rm_exports`` does for the
webhooks) and, per tenant, each advisory's digest as last exported (what a poll compares the
directory with). Kept in the log, not in a local file: a replacement instance elsewhere, or a
replay, rebuilds it.

Only exports of the role's own source (:data:`SOURCE`) are folded; a webhook's are the read
model's business."""

from __future__ import annotations

import hashlib
from typing import ClassVar, Final

import msgspec

from streamproc.events.envelope import Envelope
from streamproc.events.payloads import AdvisoryChange, FeedserExport
from streamproc.names import FEEDS, FEEDS_ADVISORIES_CF, FEEDS_EXPORTS_CF, FEEDS_SOURCE
from streamproc.projections.revision import check_revision
from streamproc.readmodel import keys
from streamproc.readmodel.exports import export_digest, export_key
from streamproc.readmodel.records import ExportRecord, decode_export, encode
from streamproc.readmodel.schedules import physical_ms
from streamproc.runtime.fold import folds
from streamproc.runtime.projection import Projection
from streamproc.state.tx import Tx

SOURCE: Final = FEEDS_SOURCE
"""The source the role records its exports as (their ref: ``feeds:<exportId>``)."""

_encode = msgspec.json.Encoder().encode


def entry_digest(change: AdvisoryChange) -> str:
    """An advisory as an export lists it, hashed: what the role compares to decide that an
    advisory changed (its product keys, severity, KEV mark or EPSS)."""
    return hashlib.sha256(_encode(change)).hexdigest()


def advisory_key(tenant: str, vuln_id: str) -> bytes:
    return keys.key(tenant, vuln_id)


class Ledger(Projection):
    name: ClassVar[str] = FEEDS
    creates: ClassVar[frozenset[str]] = frozenset({"export.feedser"})
    """An export's first revision brings it in; a later one needs it (``unknown_export``)."""
    families: ClassVar[tuple[str, ...]] = (FEEDS_EXPORTS_CF, FEEDS_ADVISORIES_CF)
    version: ClassVar[int] = 1

    @folds(FeedserExport)
    def _export(self, tx: Tx, event: Envelope, payload: FeedserExport) -> None:
        if payload.source != SOURCE:
            return
        exports = tx.table(FEEDS_EXPORTS_CF)
        k = export_key(event.tenant, "feedser", payload.ref)
        raw = exports.get(k)
        known = decode_export(raw) if raw is not None else None
        latest = known.revision if known is not None else None
        check_revision("feedser", payload.ref, payload.revision, latest)
        rec = ExportRecord(
            export_id=payload.export_id,
            kind="feedser",
            event_id=event.id,
            seq=tx.seq,
            payload_sha256=export_digest(payload),
            recorded_ms=known.recorded_ms if known is not None else physical_ms(event),
            revision=payload.revision,
        )
        exports.put(k, encode(rec))
        advisories = tx.table(FEEDS_ADVISORIES_CF)
        for change in payload.advisories:
            key = advisory_key(event.tenant, change.vuln_id)
            advisories.put(key, entry_digest(change).encode())
