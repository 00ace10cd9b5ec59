"""Turning a batch of chain entries into a signed ``audit.snapshot`` event, and back.

The event id is derived from (tenant, to_chain_link): a reactor that runs twice over the same
batch publishes the same id, and JetStream's de-duplication keeps one. Shared by the snapshot
reactor, the benchmark and the tests, so all of them sign exactly the same statement.
"""

from __future__ import annotations

from collections.abc import Sequence

from streamproc.audit import dsse
from streamproc.audit.chain import SnapshotBody, make_snapshot_body, sign_snapshot
from streamproc.audit.entry import SNAPSHOT_KIND, Entry
from streamproc.events import payloads as p
from streamproc.events.envelope import Envelope, new_event
from streamproc.hlc import Timestamp
from streamproc.ids import derive_id


def snapshot_id(tenant: str, to_chain_link: str) -> str:
    return derive_id(SNAPSHOT_KIND, tenant, to_chain_link)


def to_wire(envelope: dsse.Envelope) -> p.DsseEnvelope:
    return p.DsseEnvelope(
        payloadType=envelope.payloadType,
        payload=envelope.payload,
        signatures=[p.DsseSignature(keyid=s.keyid, sig=s.sig) for s in envelope.signatures],
    )


def from_wire(envelope: p.DsseEnvelope) -> dsse.Envelope:
    return dsse.Envelope(
        payloadType=envelope.payloadType,
        payload=envelope.payload,
        signatures=[dsse.Signature(keyid=s.keyid, sig=s.sig) for s in envelope.signatures],
    )


def body_of(snapshot: p.AuditSnapshot, tenant: str) -> SnapshotBody:
    """The body the snapshot's unsigned fields claim (to compare with the signed one)."""
    return SnapshotBody(
        tenant=tenant,
        from_chain_link=snapshot.from_chain_link,
        to_chain_link=snapshot.to_chain_link,
        from_position=snapshot.from_position,
        to_position=snapshot.to_position,
        entry_count=snapshot.entry_count,
        merkle_root=snapshot.merkle_root,
        snapshot_hlc=snapshot.snapshot_hlc,
    )


def snapshot_event(
    tenant: str, batch: Sequence[Entry], snapshot_hlc: Timestamp, signer: dsse.Signer
) -> Envelope:
    """The signed snapshot of ``batch`` (consecutive entries, in chain order)."""
    if not batch:
        raise ValueError("a snapshot needs at least one entry")
    links = [e.chain_link for e in batch]
    body = make_snapshot_body(tenant, links, batch[0].position, str(snapshot_hlc))
    payload = p.AuditSnapshot(
        from_chain_link=body.from_chain_link,
        to_chain_link=body.to_chain_link,
        from_position=body.from_position,
        to_position=body.to_position,
        entry_count=body.entry_count,
        merkle_root=body.merkle_root,
        snapshot_hlc=body.snapshot_hlc,
        envelope=to_wire(sign_snapshot(signer, body)),
    )
    return new_event(
        SNAPSHOT_KIND,
        tenant,
        payload,
        snapshot_hlc,
        event_id=snapshot_id(tenant, body.to_chain_link),
        causation_id=batch[-1].event_id,
    )


def max_hlc(batch: Sequence[Entry]) -> Timestamp:
    """The latest HLC in the batch (commit order is not HLC order)."""
    return max(Timestamp.parse(e.t_hlc) for e in batch)
