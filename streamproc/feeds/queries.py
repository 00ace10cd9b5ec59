"""Reading the ``feeds`` role's ledger (:mod:`streamproc.feeds.ledger`) from its store."""

from __future__ import annotations

from streamproc.names import FEEDS_ADVISORIES_CF, FEEDS_EXPORTS_CF
from streamproc.readmodel import keys
from streamproc.readmodel.exports import export_key
from streamproc.readmodel.records import ExportRecord, decode_export
from streamproc.state.store import Store


class LedgerQueries:
    """What the role recorded, as its store holds it (as of its last committed batch)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def export(self, tenant: str, kind: str, key: str) -> ExportRecord | None:
        """The export ``key`` (its ref) of ``tenant``, as the recording path looks it up."""
        raw = self.store.get(FEEDS_EXPORTS_CF, export_key(tenant, kind, key))
        return decode_export(raw) if raw is not None else None

    def sent(self, tenant: str) -> dict[str, str]:
        """vulnId → the digest of the advisory as last exported for ``tenant``."""
        prefix = keys.tenant_prefix(tenant)
        return {
            k[len(prefix) :].decode(): v.decode()
            for k, v in self.store.scan(FEEDS_ADVISORIES_CF, prefix)
        }
