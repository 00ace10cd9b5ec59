"""The ``audit`` projection: per tenant, an append-only hash chain of lifecycle and
control-plane events in commit order, an HLC-ordered view of it, and recorded snapshots.

The fold is pure (no clock, no keys, no I/O): the chain is a function of the event log alone,
so a replay rebuilds it byte for byte. Chain heads are cached in memory and written once per
batch in :meth:`AuditLog.flush`. Signatures are not checked here — the keyring is
configuration, not log — but a snapshot must fit the chain exactly to be recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import msgspec

from streamproc import metrics
from streamproc.audit.entry import (
    CHAINED_KINDS,
    Entry,
    entry_decoder,
    entry_encoder,
    make_entry,
)
from streamproc.audit.layout import (
    CHAIN_CF,
    FAMILIES,
    HEADS_CF,
    LOG_CF,
    SNAPSHOTS_CF,
    Head,
    SnapshotRecord,
    chain_key,
    head_decoder,
    head_encoder,
    hlc_key,
    snapshot_key,
    tenant_prefix,
)
from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope
from streamproc.names import AUDIT
from streamproc.runtime.fold import folds, payloads_of
from streamproc.runtime.projection import Projection, Rejection
from streamproc.state.store import BULK, Reads
from streamproc.state.tx import Tx

_snapshot_encoder = msgspec.json.Encoder()


class AuditLog(Projection):
    name: ClassVar[str] = AUDIT
    creates: ClassVar[frozenset[str]] = CHAINED_KINDS
    """Every chained event is a new entry of its tenant's chain (an attempt on an unknown
    run is audited too); a snapshot must fit entries that exist."""
    families: ClassVar[tuple[str, ...]] = FAMILIES
    family_reads: ClassVar[Mapping[str, Reads]] = {SNAPSHOTS_CF: BULK}
    """Snapshots are only ever listed, a tenant's all at once; the chain, the log index and
    the heads are point-read by the folds and the log view."""
    version: ClassVar[int] = 1

    def __init__(self) -> None:
        self._heads: dict[str, Head] = {}
        self._dirty: set[str] = set()
        self._new: dict[str, list[Entry]] = {}
        """Entries appended in this batch per tenant, in position order; written in flush."""

    def _head(self, tx: Tx, tenant: str) -> Head:
        head = self._heads.get(tenant)
        if head is None:
            raw = tx.table(HEADS_CF).get(tenant.encode())
            head = head_decoder.decode(raw) if raw is not None else Head()
            self._heads[tenant] = head
        return head

    @folds(*payloads_of(CHAINED_KINDS), kinds=CHAINED_KINDS)
    def _entry(self, tx: Tx, event: Envelope, _: p.Payload) -> None:
        """A chained event: the next entry of its tenant's chain (built from the envelope)."""
        tenant = event.tenant
        head = self._heads.get(tenant) or self._head(tx, tenant)
        entry = make_entry(event, head.entries, head.head_chain_link)
        new = self._new.get(tenant)
        if new is None:
            new = self._new[tenant] = []
            self._dirty.add(tenant)
        new.append(entry)
        head.entries += 1
        head.head_chain_link = entry.chain_link
        head.head_hlc = entry.t_hlc

    def _link_at(self, tx: Tx, tenant: str, position: int) -> str | None:
        """The chain link at ``position``, from this batch's new entries or the store."""
        new = self._new.get(tenant)
        if new and position >= new[0].position:
            i = position - new[0].position
            return new[i].chain_link if i < len(new) else None
        entry = tx.table(CHAIN_CF).get(chain_key(tenant, position))
        return None if entry is None else entry_decoder.decode(entry).chain_link

    @folds(p.AuditSnapshot)
    def _snapshot(self, tx: Tx, event: Envelope, s: p.AuditSnapshot) -> None:
        """Record a snapshot that covers the next unsnapshotted range exactly; refuse others
        (a duplicate or a snapshot that does not match this chain) with a named reason."""
        tenant = event.tenant
        head = self._head(tx, tenant)
        if s.from_position != head.snapshotted:
            raise Rejection(
                "snapshot_out_of_order",
                f"snapshot covers {s.from_position}..{s.to_position}, the next unsnapshotted "
                f"position is {head.snapshotted}",
            )
        if s.to_position < s.from_position or s.entry_count != s.to_position - s.from_position + 1:
            raise Rejection(
                "snapshot_inconsistent",
                f"positions {s.from_position}..{s.to_position} vs entry_count {s.entry_count}",
            )
        if s.to_position >= head.entries:
            raise Rejection(
                "snapshot_beyond_head",
                f"snapshot ends at {s.to_position}, the chain has {head.entries} entries",
            )
        for position, link in (
            (s.from_position, s.from_chain_link),
            (s.to_position, s.to_chain_link),
        ):
            if self._link_at(tx, tenant, position) != link:
                raise Rejection(
                    "snapshot_link_mismatch",
                    f"chain link {link} is not the entry at position {position}",
                )
        record = SnapshotRecord(event_id=event.id, event_hlc=event.hlc, snapshot=s)
        tx.table(SNAPSHOTS_CF).put(
            snapshot_key(tenant, s.from_position), _snapshot_encoder.encode(record)
        )
        head.snapshotted = s.to_position + 1
        head.snapshots += 1
        head.last_snapshot_hlc = s.snapshot_hlc
        self._dirty.add(tenant)

    def flush(self, tx: Tx) -> None:
        """Write this batch's entries, their rows in the HLC log view, and the changed heads.

        Straight into the batch's pending writes: nothing here can be rolled back per event.
        """
        writes = tx.writes
        chain = writes.setdefault(CHAIN_CF, {})
        log = writes.setdefault(LOG_CF, {})
        encode = entry_encoder.encode
        for tenant, new in self._new.items():
            prefix = tenant_prefix(tenant)
            for e in new:
                pos = e.position.to_bytes(8, "big")
                chain[prefix + pos] = encode(e)
                log[prefix + hlc_key(e.t_hlc) + pos] = b""
            tx.count(metrics.CHAIN_ENTRIES, tenant, n=len(new))
        self._new.clear()
        heads = tx.table(HEADS_CF)
        for tenant in self._dirty:
            heads.put(tenant.encode(), head_encoder.encode(self._heads[tenant]))
        self._dirty.clear()

    def discard(self) -> None:
        self._heads.clear()
        self._dirty.clear()
        self._new.clear()
