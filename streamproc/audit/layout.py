"""Where the audit log lives in a state directory: column families, keys, stored records.

Defined once so the fold, the reactor, verification, proofs and the CLI read and write the
same bytes. Tenant ids are ``[a-z0-9_-]`` only, so ``tenant ‖ 0x00`` is an unambiguous prefix.

| family | key | value |
|---|---|---|
| ``audit_chain`` | tenant ‖ 0x00 ‖ position (u64 BE) | :class:`Entry` JSON array (chain order) |
| ``audit_log`` | tenant ‖ 0x00 ‖ ``Timestamp.key()`` ‖ position | empty (HLC order) |
| ``audit_heads`` | tenant | :class:`Head` JSON |
| ``audit_snapshots`` | tenant ‖ 0x00 ‖ from_position (u64 BE) | :class:`SnapshotRecord` JSON |
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final, Protocol

import msgspec

from streamproc.audit.entry import Entry, entry_decoder
from streamproc.events import payloads as p
from streamproc.hlc import KEY_WIDTH, NODE_WIDTH, Timestamp
from streamproc.names import AUDIT_CHAIN_CF, AUDIT_HEADS_CF, AUDIT_LOG_CF, AUDIT_SNAPSHOTS_CF

CHAIN_CF = AUDIT_CHAIN_CF
HEADS_CF = AUDIT_HEADS_CF
LOG_CF = AUDIT_LOG_CF
SNAPSHOTS_CF = AUDIT_SNAPSHOTS_CF

FAMILIES: Final = (CHAIN_CF, LOG_CF, HEADS_CF, SNAPSHOTS_CF)


class Readable(Protocol):
    """What the readers need from a :class:`~streamproc.state.store.Store`."""

    def get(self, cf: str, key: bytes) -> bytes | None: ...

    def scan(
        self, cf: str, prefix: bytes = b"", start: bytes = b""
    ) -> Iterator[tuple[bytes, bytes]]: ...


class Head(msgspec.Struct, kw_only=True):
    """Per-tenant chain head and how far signed snapshots cover the chain."""

    entries: int = 0
    """Chain length: the next entry's position."""
    head_chain_link: str | None = None
    head_hlc: str | None = None
    snapshotted: int = 0
    """Positions ``0 .. snapshotted-1`` are covered by recorded snapshots."""
    snapshots: int = 0
    last_snapshot_hlc: str | None = None


class SnapshotRecord(msgspec.Struct, kw_only=True):
    """A folded ``audit.snapshot`` event: its id, its HLC and its payload as published."""

    event_id: str
    event_hlc: str
    snapshot: p.AuditSnapshot


_PAD = b"\x00" * NODE_WIDTH
head_encoder = msgspec.json.Encoder()
head_decoder = msgspec.json.Decoder(Head)
snapshot_decoder = msgspec.json.Decoder(SnapshotRecord)


def tenant_prefix(tenant: str) -> bytes:
    return tenant.encode() + b"\x00"


def pos_bytes(position: int) -> bytes:
    return position.to_bytes(8, "big")


def chain_key(tenant: str, position: int) -> bytes:
    return tenant_prefix(tenant) + pos_bytes(position)


def hlc_key(t_hlc: str) -> bytes:
    """``Timestamp.key()`` of an HLC string: physical (u64 BE), logical (u32 BE), node padded
    with NULs to 32 bytes — 44 bytes whose order is the (physical, logical, node) order.

    Written out rather than calling ``Timestamp.parse(t).key()`` because it runs once per entry
    on the fold's and the verifier's hot paths; tests hold it byte-equal to ``key()``."""
    physical, logical, node = t_hlc.split(":", 2)
    n = node.encode()
    return int(physical).to_bytes(8, "big") + int(logical).to_bytes(4, "big") + n + _PAD[len(n) :]


def log_key(tenant: str, t_hlc: str, position: int) -> bytes:
    return tenant_prefix(tenant) + hlc_key(t_hlc) + pos_bytes(position)


def snapshot_key(tenant: str, from_position: int) -> bytes:
    return tenant_prefix(tenant) + pos_bytes(from_position)


# ---------------------------------------------------------------------- readers


def tenants(store: Readable) -> list[str]:
    return [k.decode() for k, _ in store.scan(HEADS_CF)]


def read_head(store: Readable, tenant: str) -> Head | None:
    raw = store.get(HEADS_CF, tenant.encode())
    return None if raw is None else head_decoder.decode(raw)


def iter_entries(store: Readable, tenant: str, start: int = 0) -> Iterator[Entry]:
    """Entries in chain order from position ``start``."""
    prefix = tenant_prefix(tenant)
    decode = entry_decoder.decode
    for _, v in store.scan(CHAIN_CF, prefix, prefix + pos_bytes(start)):
        yield decode(v)


def entry_at(store: Readable, tenant: str, position: int) -> Entry | None:
    raw = store.get(CHAIN_CF, chain_key(tenant, position))
    return None if raw is None else entry_decoder.decode(raw)


def find_link(store: Readable, tenant: str, link: str) -> Entry | None:
    """The entry whose chain link is ``link`` (a scan: proofs are rare, the fold is not)."""
    needle = f'"{link}"'.encode()
    for _, raw in store.scan(CHAIN_CF, tenant_prefix(tenant)):
        if needle in raw:
            e = entry_decoder.decode(raw)
            if e.chain_link == link:
                return e
    return None


def snapshots(store: Readable, tenant: str) -> list[SnapshotRecord]:
    """Recorded snapshots in chain order (by their first position)."""
    decode = snapshot_decoder.decode
    return [decode(v) for _, v in store.scan(SNAPSHOTS_CF, tenant_prefix(tenant))]


class LogItem(msgspec.Struct, frozen=True):
    """One row of the HLC-ordered log view: an HLC and the chain position it points at."""

    t_hlc: str
    position: int


def _log_item(prefix_len: int, key: bytes) -> LogItem:
    ts = Timestamp.from_key(key[prefix_len : prefix_len + KEY_WIDTH])
    return LogItem(str(ts), int.from_bytes(key[prefix_len + KEY_WIDTH :], "big"))


def log_view(store: Readable, tenant: str, after_physical: int | None = None) -> Iterator[LogItem]:
    """The tenant's entries in HLC order ``(physical, logical, node)``, optionally only those
    whose physical time is above ``after_physical``."""
    prefix = tenant_prefix(tenant)
    start = prefix
    if after_physical is not None:
        start = prefix + Timestamp(after_physical + 1, 0, "").key()
    n = len(prefix)
    for k, _ in store.scan(LOG_CF, prefix, start):
        yield _log_item(n, k)
