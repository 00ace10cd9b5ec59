"""Checking one stretch of a tenant's chain: the hot loop of verification.

Every entry: key and stored position, ``prev_chain_link``, action against kind, the payload
digest and link recomputed from the stored fields; every snapshot that lies inside the
stretch: signature, signed body and Merkle root. A stretch starts from the stored link
before it, which the stretch before proves, so stretches can be checked in any process.
"""

from __future__ import annotations

import hashlib
import struct
import threading

import msgspec

from streamproc.audit.chain import GENESIS, verify_snapshot_raw
from streamproc.audit.dsse import Keyring
from streamproc.audit.entry import (
    CONTROL_PLANE,
    FAIL,
    LIFECYCLE,
    PAYLOAD_DIGEST_DOMAIN,
    Entry,
    entry_decoder,
)
from streamproc.audit.layout import (
    CHAIN_CF,
    Readable,
    SnapshotRecord,
    hlc_key,
    pos_bytes,
    tenant_prefix,
)
from streamproc.audit.snapshots import body_of, from_wire

MASK = (1 << 64) - 1
_LENGTHS = struct.Struct(">6I").pack
"""The payload digest, inlined in the hot loop (``entry.payload_digest`` is the reference;
the tests hold the two equal)."""
_ALLOWED: dict[str, frozenset[str]] = {k: frozenset({k}) for k in CONTROL_PLANE}
_ALLOWED.update({k: frozenset({a, FAIL}) for k, a in LIFECYCLE.items()})
_NONE: frozenset[str] = frozenset()


class Cancelled(Exception):
    """The verification was asked to stop (the auditor is shutting down)."""


class Broken(msgspec.Struct, frozen=True):
    position: int
    field: str
    expected: str | None
    found: str | None
    why: str


class BrokenAt(Exception):
    """Raised at the first problem; carries the :class:`Broken` finding."""

    def __init__(self, position: int, field: str, expected: object, found: object, why: str):
        self.broken = Broken(
            position,
            field,
            None if expected is None else str(expected),
            None if found is None else str(found),
            why,
        )
        super().__init__(why)


class SegmentResult(msgspec.Struct, kw_only=True):
    """What one segment's check found; ``log_acc`` is its share of the log-view multiset."""

    last_link: str | None
    last_hlc: str | None
    snapshots: int
    log_acc: int
    broken: Broken | None = None


def _check_snapshot(
    tenant: str, record: SnapshotRecord, links: list[bytes], keyring: Keyring
) -> None:
    s = record.snapshot
    result = verify_snapshot_raw(
        from_wire(s.envelope),
        keyring,
        links,
        expected_tenant=tenant,
        expected_from_position=s.from_position,
    )
    where = f"snapshot {s.from_position}..{s.to_position} (event {record.event_id})"
    if not result.ok:
        raise BrokenAt(s.from_position, "snapshot", None, None, f"{where}: {result.reason}")
    claimed = body_of(s, tenant)
    if result.body != claimed:
        raise BrokenAt(
            s.from_position,
            "snapshot",
            msgspec.json.encode(result.body).decode(),
            msgspec.json.encode(claimed).decode(),
            f"{where}: its recorded fields differ from the signed body",
        )


def verify_segment(
    store: Readable,
    tenant: str,
    start: int,
    end: int,
    start_prev: str | None,
    snaps: list[SnapshotRecord],
    keyring: Keyring,
    stop: threading.Event | None = None,
    log_view: bool = True,
) -> SegmentResult:
    """Check positions ``start .. end-1``, continuing from ``start_prev``; only the snapshots
    that lie inside the segment are checked."""
    mine = [r for r in snaps if start <= r.snapshot.from_position and r.snapshot.to_position < end]
    done = {"snapshots": 0}
    try:
        last_link, last_hlc, acc = _scan(
            store, tenant, start, end, start_prev, mine, keyring, stop, done, log_view
        )
    except BrokenAt as b:
        return SegmentResult(
            last_link=None, last_hlc=None, snapshots=done["snapshots"], log_acc=0, broken=b.broken
        )
    return SegmentResult(
        last_link=last_link, last_hlc=last_hlc, snapshots=done["snapshots"], log_acc=acc
    )


def _scan(
    store: Readable,
    tenant: str,
    start: int,
    end: int,
    prev: str | None,
    snaps: list[SnapshotRecord],
    keyring: Keyring,
    stop: threading.Event | None,
    done: dict[str, int],
    log_view: bool,
) -> tuple[str | None, str | None, int]:
    prefix = tenant_prefix(tenant)
    plen = len(prefix)
    decode = entry_decoder.decode
    allowed = _ALLOWED
    none = _NONE
    sha = hashlib.sha256
    blake = hashlib.blake2b
    lengths = _LENGTHS
    domain = PAYLOAD_DIGEST_DOMAIN
    key_of = hlc_key
    si = 0
    to_position = snaps[0].snapshot.to_position if snaps else -1
    batch: list[bytes] = []
    acc = 0
    last_hlc: str | None = None
    pos = start
    for key, raw in store.scan(CHAIN_CF, prefix, prefix + pos_bytes(start)):
        if pos >= end:
            break  # the next segment's, or appended after the head was read
        if not pos & 0xFFF and stop is not None and stop.is_set():
            raise Cancelled()
        e = decode(raw)
        t, j, a, k = e.t_hlc, e.job_id, e.action, e.kind
        tb, jb, ab, ib, kb, pb = (
            t.encode(),
            j.encode(),
            a.encode(),
            e.event_id.encode(),
            k.encode(),
            e.payload.encode(),
        )
        head_bytes = lengths(len(tb), len(jb), len(ab), len(ib), len(kb), len(pb))
        digest = sha(b"".join((domain, head_bytes, tb, jb, ab, ib, kb, pb))).hexdigest()
        raw_link = sha((t + j + a + (prev or GENESIS) + digest).encode()).digest()
        link = raw_link.hex()
        if (
            e.position != pos
            or e.prev_chain_link != prev
            or digest != e.payload_digest
            or link != e.chain_link
            or a not in allowed.get(k, none)
            or int.from_bytes(key[plen:], "big") != pos
        ):
            _diagnose(key[plen:], e, pos, prev, digest, link)
        if log_view:
            row = key_of(t) + key[plen:]
            acc += int.from_bytes(blake(row, digest_size=8).digest(), "big")
        if pos <= to_position:
            batch.append(raw_link)
            if pos == to_position:
                _check_snapshot(tenant, snaps[si], batch, keyring)
                done["snapshots"] += 1
                batch = []
                si += 1
                to_position = snaps[si].snapshot.to_position if si < len(snaps) else -1
        prev = link
        last_hlc = t
        pos += 1
    if pos < end:
        raise BrokenAt(pos, "position", pos, "end of chain", f"the chain should reach {end}")
    return prev, last_hlc, acc & MASK


def _diagnose(
    key_suffix: bytes, e: Entry, pos: int, prev: str | None, digest: str, link: str
) -> None:
    """Name the first thing wrong with an entry that failed the combined fast check."""
    key_pos = int.from_bytes(key_suffix, "big")
    if key_pos != pos:
        raise BrokenAt(pos, "position", pos, key_pos, "entry missing or out of sequence")
    if e.position != pos:
        raise BrokenAt(pos, "position", pos, e.position, "stored position differs from its key")
    if e.prev_chain_link != prev:
        raise BrokenAt(
            pos,
            "prev_chain_link",
            prev,
            e.prev_chain_link,
            "prev_chain_link is not the previous entry's chain_link",
        )
    kinds = _ALLOWED.get(e.kind)
    if kinds is None or e.action not in kinds:
        raise BrokenAt(
            pos,
            "action",
            sorted(kinds) if kinds else "a chained kind",
            f"{e.kind}/{e.action}",
            "action does not fit the event kind",
        )
    if digest != e.payload_digest:
        raise BrokenAt(
            pos,
            "payload_digest",
            digest,
            e.payload_digest,
            "payload_digest does not match the entry's fields and payload",
        )
    raise BrokenAt(pos, "chain_link", link, e.chain_link, "chain_link does not match the entry")
