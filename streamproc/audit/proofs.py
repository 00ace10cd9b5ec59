"""Inclusion proofs: one entry, the audit path to its batch's Merkle root, and the signed
snapshot holding that root — checkable offline with nothing but the public key.

A proof shows three things: the entry's fields hash to its payload digest and link (the
entry says what it claims), the link is leaf ``index`` of the batch tree (RFC 6962 audit
path), and the batch root is signed by a trusted auditor key (DSSE).
"""

from __future__ import annotations

import itertools
import re

import msgspec

from streamproc.audit import merkle
from streamproc.audit.chain import SNAPSHOT_PAYLOAD_TYPE, SnapshotBody, decode_snapshot_body
from streamproc.audit.dsse import DsseError, Keyring, verify
from streamproc.audit.entry import Entry, link_of, payload_digest
from streamproc.audit.layout import (
    Readable,
    find_link,
    iter_entries,
    read_head,
    snapshots,
)
from streamproc.audit.snapshots import from_wire
from streamproc.events import payloads as p

PROOF_FORMAT = "streamproc.audit.inclusion-proof/v1"
_LINK = re.compile(r"[0-9a-f]{64}")


class ProofError(LookupError):
    """No proof can be made: unknown entry (``covered`` False) or not yet snapshotted."""

    def __init__(self, message: str, *, not_yet: bool = False) -> None:
        self.not_yet = not_yet
        super().__init__(message)


class InclusionProof(msgspec.Struct, kw_only=True):
    format: str = PROOF_FORMAT
    tenant: str
    entry: Entry
    leaf: str
    """The entry's chain link: the raw 32 bytes are the Merkle leaf."""
    index: int
    """Leaf index within the batch (entry position minus the snapshot's from_position)."""
    batch_size: int
    audit_path: list[str]
    """Sibling hashes from the leaf upward (RFC 6962 PATH), lower-case hex."""
    merkle_root: str
    snapshot: p.DsseEnvelope
    """The signed snapshot; its body's merkle_root is the one that counts."""


class ProofCheck(msgspec.Struct, kw_only=True):
    ok: bool
    reason: str = ""
    key_id: str | None = None
    body: SnapshotBody | None = None


def prove(store: Readable, tenant: str, link: str) -> InclusionProof:
    """The proof for the entry with chain link ``link``, against the snapshot covering it."""
    link = link.strip().lower()
    entry = find_link(store, tenant, link) if _LINK.fullmatch(link) else None
    if entry is None:
        raise ProofError(f"tenant {tenant!r} has no audit entry with chain link {link}")
    for record in snapshots(store, tenant):
        s = record.snapshot
        if s.from_position <= entry.position <= s.to_position:
            break
    else:
        head = read_head(store, tenant)
        covered = head.snapshotted if head is not None else 0
        raise ProofError(
            f"entry {entry.position} of tenant {tenant!r} is not covered by a snapshot yet "
            f"(snapshots cover positions 0..{covered - 1}); try again after the next batch",
            not_yet=True,
        )
    batch = list(itertools.islice(iter_entries(store, tenant, s.from_position), s.entry_count))
    tree = merkle.MerkleTree([bytes.fromhex(e.chain_link) for e in batch])
    index = entry.position - s.from_position
    return InclusionProof(
        tenant=tenant,
        entry=entry,
        leaf=entry.chain_link,
        index=index,
        batch_size=len(batch),
        audit_path=[h.hex() for h in tree.inclusion_proof(index)],
        merkle_root=tree.root().hex(),
        snapshot=s.envelope,
    )


def encode_proof(proof: InclusionProof) -> bytes:
    return msgspec.json.format(msgspec.json.encode(proof), indent=2) + b"\n"


def decode_proof(data: bytes) -> InclusionProof:
    return msgspec.json.decode(data, type=InclusionProof)


def verify_proof(proof: InclusionProof, keyring: Keyring) -> ProofCheck:
    """Check a proof offline: signature, snapshot context, audit path, entry contents."""
    if proof.format != PROOF_FORMAT:
        return ProofCheck(ok=False, reason=f"unknown proof format {proof.format!r}")
    try:
        verified = verify(
            from_wire(proof.snapshot), keyring, expected_payload_type=SNAPSHOT_PAYLOAD_TYPE
        )
        body = decode_snapshot_body(verified.body)
    except (DsseError, msgspec.DecodeError) as exc:
        return ProofCheck(ok=False, reason=f"snapshot signature: {exc}")

    def fail(reason: str) -> ProofCheck:
        return ProofCheck(ok=False, reason=reason, key_id=verified.key_id, body=body)

    e = proof.entry
    if body.tenant != proof.tenant:
        return fail(f"snapshot is for tenant {body.tenant!r}, proof says {proof.tenant!r}")
    if proof.batch_size != body.entry_count:
        return fail(f"batch_size {proof.batch_size}, snapshot signs {body.entry_count} entries")
    if not 0 <= proof.index < body.entry_count:
        return fail(f"index {proof.index} outside a batch of {body.entry_count}")
    if body.from_position + proof.index != e.position:
        return fail(
            f"entry position {e.position} is not index {proof.index} of a batch starting "
            f"at {body.from_position}"
        )
    digest = payload_digest(e.t_hlc, e.job_id, e.action, e.event_id, e.kind, e.payload.encode())
    if digest != e.payload_digest:
        return fail(f"entry payload_digest {e.payload_digest}, its fields give {digest}")
    link = link_of(e.t_hlc, e.job_id, e.action, e.prev_chain_link, digest)
    if link != e.chain_link or link != proof.leaf:
        return fail(f"entry fields give chain link {link}, proof leaf is {proof.leaf}")
    if proof.index == 0 and link != body.from_chain_link:
        return fail("leaf 0 is not the snapshot's from_chain_link")
    if proof.index == body.entry_count - 1 and link != body.to_chain_link:
        return fail("the last leaf is not the snapshot's to_chain_link")
    try:
        path = [bytes.fromhex(h) for h in proof.audit_path]
        leaf = bytes.fromhex(proof.leaf)
    except ValueError as exc:
        return fail(f"audit path is not hex: {exc}")
    root = bytes.fromhex(body.merkle_root)
    if not merkle.verify_inclusion(leaf, proof.index, body.entry_count, path, root):
        return fail(f"audit path does not lead to the signed merkle_root {body.merkle_root}")
    return ProofCheck(ok=True, key_id=verified.key_id, body=body)
