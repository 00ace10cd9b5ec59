"""Per-tenant audit hash chain and signed Merkle snapshots of its batches.

Each entry's link commits to its fields and to the previous link, so editing, dropping or
reordering any entry breaks every later link; a signed snapshot then pins a batch (its Merkle
root and end links) so a verifier holding only the public key can detect a rewritten history.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Sequence

import msgspec

from streamproc.audit import merkle
from streamproc.audit.dsse import DsseError, Envelope, Keyring, Signer, verify

__all__ = [
    "GENESIS",
    "SNAPSHOT_PAYLOAD_TYPE",
    "ChainEntry",
    "Row",
    "SnapshotBody",
    "SnapshotVerification",
    "VerifyResult",
    "batch_merkle_root",
    "chain_link",
    "decode_snapshot_body",
    "encode_snapshot_body",
    "make_snapshot_body",
    "next_entry",
    "sign_snapshot",
    "verify_entries",
    "verify_rows",
    "verify_snapshot",
    "verify_snapshot_raw",
]

GENESIS = "genesis"
"""Stands in for the previous link of a tenant's first entry."""
SNAPSHOT_PAYLOAD_TYPE = "application/vnd.streamproc.audit.snapshot+json"

_LINK = re.compile(r"[0-9a-f]{64}")


def chain_link(
    t_hlc: str, job_id: str, action: str, prev_link: str | None, payload_digest: str
) -> str:
    """Lowercase hex SHA-256 of t_hlc ‖ job_id ‖ action ‖ (prev_link or "genesis") ‖ digest.

    Plain concatenation without separators is the published format and must not change.
    """
    data = t_hlc + job_id + action + (prev_link or GENESIS) + payload_digest
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


class ChainEntry(msgspec.Struct, frozen=True, gc=False):
    """One stored chain entry (gc=False: millions are held at once and hold no cycles)."""

    position: int
    t_hlc: str
    job_id: str
    action: str
    payload_digest: str
    prev_chain_link: str | None
    chain_link: str


Row = tuple[int, str, str, str, str, str | None, str]
"""A ChainEntry as a plain tuple in field order, for callers reading columns from storage."""


def next_entry(
    prev: ChainEntry | None, t_hlc: str, job_id: str, action: str, payload_digest: str
) -> ChainEntry:
    """The entry that follows `prev` (None: the tenant's genesis entry)."""
    prev_link = prev.chain_link if prev is not None else None
    return ChainEntry(
        position=prev.position + 1 if prev is not None else 0,
        t_hlc=t_hlc,
        job_id=job_id,
        action=action,
        payload_digest=payload_digest,
        prev_chain_link=prev_link,
        chain_link=chain_link(t_hlc, job_id, action, prev_link, payload_digest),
    )


class VerifyResult(msgspec.Struct, frozen=True):
    """Outcome of a chain check; on failure, the first broken position and what differs.

    `field` is "position", "prev_chain_link", "chain_link" or "head". For "head" the
    broken position is the one after the last entry checked (where the chain should go on).
    """

    ok: bool
    checked: int
    head: str | None
    broken_position: int | None = None
    field: str | None = None
    expected: str | None = None
    found: str | None = None
    reason: str = ""


def _broken(
    start: int, head: str | None, position: int, field: str, expected: object, found: object
) -> VerifyResult:
    """Failure result; only built once, so its cost stays out of the hot loop."""
    what = {
        "position": "entry out of sequence (missing, duplicated or reordered entry)",
        "prev_chain_link": "prev_chain_link is not the previous entry's chain_link",
        "chain_link": "chain_link does not match the hash of the entry's fields",
        "head": "chain does not end at the expected head (entries missing or added at the end)",
    }[field]
    exp = None if expected is None else str(expected)
    fnd = None if found is None else str(found)
    return VerifyResult(
        ok=False,
        checked=position - start,
        head=head,
        broken_position=position,
        field=field,
        expected=exp,
        found=fnd,
        reason=f"position {position}: {what}; expected {field} {exp}, found {fnd}",
    )


def verify_rows(
    rows: Iterable[Row],
    expected_head: str | None,
    *,
    start_position: int = 0,
    start_prev_link: str | None = None,
) -> VerifyResult:
    """verify_entries over plain tuples in ChainEntry field order (no per-entry objects)."""
    sha = hashlib.sha256
    start = pos = start_position
    prev = start_prev_link
    for position, t_hlc, job_id, action, digest, prev_link, link in rows:
        if position != pos:
            return _broken(start, prev, pos, "position", pos, position)
        if prev_link != prev:
            return _broken(start, prev, pos, "prev_chain_link", prev, prev_link)
        actual = sha((t_hlc + job_id + action + (prev or GENESIS) + digest).encode()).hexdigest()
        if actual != link:
            return _broken(start, prev, pos, "chain_link", actual, link)
        prev = actual
        pos += 1
    if prev != expected_head:
        return _broken(start, prev, pos, "head", expected_head, prev)
    return VerifyResult(ok=True, checked=pos - start, head=prev)


def verify_entries(
    entries: Iterable[ChainEntry],
    expected_head: str | None,
    *,
    start_position: int = 0,
    start_prev_link: str | None = None,
) -> VerifyResult:
    """Recompute every link in order and report the first break, if any.

    Checks, per entry: position is the next one, prev_chain_link equals the previous link
    (None for genesis), chain_link equals the recomputed hash; finally the last link must be
    `expected_head` (None means the chain is expected to be empty). To check a segment, pass
    the position and link it continues from as start_position / start_prev_link.
    """
    sha = hashlib.sha256
    start = pos = start_position
    prev = start_prev_link
    for e in entries:
        if e.position != pos:
            return _broken(start, prev, pos, "position", pos, e.position)
        if e.prev_chain_link != prev:
            return _broken(start, prev, pos, "prev_chain_link", prev, e.prev_chain_link)
        data = e.t_hlc + e.job_id + e.action + (prev or GENESIS) + e.payload_digest
        actual = sha(data.encode()).hexdigest()
        if actual != e.chain_link:
            return _broken(start, prev, pos, "chain_link", actual, e.chain_link)
        prev = actual
        pos += 1
    if prev != expected_head:
        return _broken(start, prev, pos, "head", expected_head, prev)
    return VerifyResult(ok=True, checked=pos - start, head=prev)


# --- batch snapshots -------------------------------------------------------------------------


class SnapshotBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Signed statement pinning positions from..to of a tenant's chain to a Merkle root."""

    tenant: str
    from_chain_link: str
    to_chain_link: str
    from_position: int
    to_position: int
    entry_count: int
    merkle_root: str
    snapshot_hlc: str


class SnapshotVerification(msgspec.Struct, frozen=True):
    """Outcome of verify_snapshot; body and key_id are set once the signature checked out."""

    ok: bool
    reason: str = ""
    body: SnapshotBody | None = None
    key_id: str | None = None


def _link_bytes(links: Sequence[str]) -> list[bytes]:
    """Raw 32-byte links; ValueError naming the first link that is not 64 lowercase hex."""
    try:
        raw = list(map(bytes.fromhex, links))
        if all(len(r) == 32 for r in raw) and list(map(bytes.hex, raw)) == list(links):
            return raw  # fast path: the hex round-trip proves every link is canonical
    except (TypeError, ValueError):
        pass
    for i, link in enumerate(links):
        if not isinstance(link, str) or not _LINK.fullmatch(link):
            raise ValueError(f"link {i} of the batch is not 64 lowercase hex digits: {link!r}")
    raise ValueError("batch links are not canonical lowercase hex")  # not reached


def batch_merkle_root(links: Sequence[str]) -> str:
    """Hex RFC 6962 root whose leaves are the raw 32-byte chain links of the batch."""
    return merkle.root(_link_bytes(links)).hex()


def make_snapshot_body(
    tenant: str, links: Sequence[str], from_position: int, snapshot_hlc: str
) -> SnapshotBody:
    """Snapshot of the non-empty batch whose first link sits at `from_position`."""
    if not links:
        raise ValueError("a snapshot needs at least one chain link")
    if from_position < 0:
        raise ValueError(f"from_position must be >= 0, got {from_position}")
    return SnapshotBody(
        tenant=tenant,
        from_chain_link=links[0],
        to_chain_link=links[-1],
        from_position=from_position,
        to_position=from_position + len(links) - 1,
        entry_count=len(links),
        merkle_root=batch_merkle_root(links),
        snapshot_hlc=snapshot_hlc,
    )


def encode_snapshot_body(body: SnapshotBody) -> bytes:
    """Compact JSON in field-declaration order (deterministic for a given body)."""
    return msgspec.json.encode(body)


def decode_snapshot_body(data: bytes) -> SnapshotBody:
    """Strict parse: unknown fields or wrong types raise msgspec.ValidationError."""
    return msgspec.json.decode(data, type=SnapshotBody)


def sign_snapshot(signer: Signer, body: SnapshotBody) -> Envelope:
    """DSSE envelope over the snapshot JSON with the snapshot payload type."""
    return signer.sign(SNAPSHOT_PAYLOAD_TYPE, encode_snapshot_body(body))


def verify_snapshot(
    envelope: Envelope,
    keyring: Keyring,
    links_of_batch: Sequence[str],
    *,
    expected_tenant: str | None = None,
    expected_from_position: int | None = None,
) -> SnapshotVerification:
    """Check the signature, then that the signed body describes exactly `links_of_batch`."""

    def root() -> str:
        return batch_merkle_root(links_of_batch)

    first = links_of_batch[0] if links_of_batch else None
    last = links_of_batch[-1] if links_of_batch else None
    return _verify_snapshot(
        envelope, keyring, len(links_of_batch), first, last, root, expected_tenant,
        expected_from_position,
    )  # fmt: skip


def verify_snapshot_raw(
    envelope: Envelope,
    keyring: Keyring,
    raw_links: Sequence[bytes],
    *,
    expected_tenant: str | None = None,
    expected_from_position: int | None = None,
) -> SnapshotVerification:
    """verify_snapshot over the raw 32-byte links (the Merkle leaves), for verifiers that
    already hold them as bytes and need not convert a million hex strings back."""

    def root() -> str:
        return merkle.root(raw_links).hex()

    first = raw_links[0].hex() if raw_links else None
    last = raw_links[-1].hex() if raw_links else None
    return _verify_snapshot(
        envelope, keyring, len(raw_links), first, last, root, expected_tenant,
        expected_from_position,
    )  # fmt: skip


def _verify_snapshot(
    envelope: Envelope,
    keyring: Keyring,
    count: int,
    first: str | None,
    last: str | None,
    root: Callable[[], str],
    expected_tenant: str | None,
    expected_from_position: int | None,
) -> SnapshotVerification:
    try:
        verified = verify(envelope, keyring, expected_payload_type=SNAPSHOT_PAYLOAD_TYPE)
    except DsseError as exc:
        return SnapshotVerification(ok=False, reason=f"signature: {exc}")
    try:
        body = decode_snapshot_body(verified.body)
    except msgspec.DecodeError as exc:
        return SnapshotVerification(ok=False, reason=f"signed body is not a snapshot: {exc}")

    def fail(reason: str) -> SnapshotVerification:
        return SnapshotVerification(ok=False, reason=reason, body=body, key_id=verified.key_id)

    if expected_tenant is not None and body.tenant != expected_tenant:
        return fail(f"tenant is {body.tenant!r}, expected {expected_tenant!r}")
    if expected_from_position is not None and body.from_position != expected_from_position:
        return fail(f"from_position is {body.from_position}, expected {expected_from_position}")
    span = body.to_position - body.from_position + 1
    if body.from_position < 0 or body.entry_count < 1 or span != body.entry_count:
        return fail(
            f"inconsistent counts: positions {body.from_position}..{body.to_position} "
            f"vs entry_count {body.entry_count}"
        )
    if body.entry_count != count:
        return fail(f"entry_count is {body.entry_count}, batch has {count} links")
    if first != body.from_chain_link:
        return fail(f"from_chain_link {body.from_chain_link}, batch starts {first}")
    if last != body.to_chain_link:
        return fail(f"to_chain_link {body.to_chain_link}, batch ends {last}")
    try:
        computed = root()
    except ValueError as exc:
        return fail(str(exc))
    if computed != body.merkle_root:
        return fail(f"merkle_root signed {body.merkle_root}, batch computes {computed}")
    return SnapshotVerification(ok=True, body=body, key_id=verified.key_id)
