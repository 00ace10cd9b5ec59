"""Read-only views of a stored impact index: its size (``streamproc index stats``) and its
bitmaps by logical name (tests compare them with a brute-force model).

Both read committed state only, so they work on a read-only RocksDB view beside a running
role, and neither needs the index in memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyroaring import BitMap

from streamproc.impact import keys as K
from streamproc.state.store import Store

__all__ = ["IndexStats", "index_stats", "logical_bitmaps"]


@dataclass
class IndexStats:
    images: int = 0
    usage_known: int = 0
    """Images whose usage is known (usage narrows only these)."""
    tenants: int = 0
    product_keys: int = 0
    purls: int = 0
    vulns: int = 0
    owner_bitmaps: int = 0
    pending_images: int = 0
    """Images whose ids are not all merged into the stored chunks yet (``purls`` and the
    bitmap bytes count merged ids only)."""
    group_values: int = 0
    group_bytes: int = 0
    owner_bytes: int = 0
    record_bytes: int = 0

    @property
    def bitmap_bytes(self) -> int:
        return self.group_bytes + self.owner_bytes


def _products(store: Store) -> dict[int, str]:
    return {
        int.from_bytes(v[:4], "big"): k[1:].decode() for k, v in store.scan(K.NAMES_CF, K.PRODUCT)
    }


def index_stats(store: Store) -> IndexStats:
    """Counts and sizes, one pass over each column family."""
    s = IndexStats()
    for key, _ in store.scan(K.NAMES_CF):
        kind = key[:1]
        if kind == K.DIGEST:
            s.images += 1
        elif kind == K.PRODUCT:
            s.product_keys += 1
        elif kind == K.VULN:
            s.vulns += 1
        elif kind == K.PENDING:
            s.pending_images += 1
    last_gid = -1
    suffixes: set[str] = set()
    for key, raw in store.scan(K.GROUPS_CF):
        gid = int.from_bytes(key[:4], "big")
        if gid != last_gid:
            s.purls += len(suffixes)
            suffixes = set()
            last_gid = gid
        suffixes.update(K.chunk_members(raw)[0])
        s.group_values += 1
        s.group_bytes += len(raw)
    s.purls += len(suffixes)
    for key, raw in store.scan(K.OWNERS_CF):
        s.owner_bitmaps += 1
        s.owner_bytes += len(raw)
        s.tenants += key[:1] == K.OWNER_TENANT
        if key[:1] == K.OWNER_USAGE:
            s.usage_known += len(BitMap.deserialize(raw))
    for _, raw in store.scan(K.IMAGES_CF):
        s.record_bytes += len(raw)
    return s


def logical_bitmaps(store: Store) -> dict[bytes, BitMap]:
    """Every stored bitmap by logical name: ``c:p:<product>``, ``c:e:<purl>``, ``u:p:``,
    ``u:e:`` and ``o:<kind>:<tenant>[\\0<value>]``, decoded from the physical layout."""
    out: dict[bytes, BitMap] = {}

    def add(name: bytes, bm: BitMap) -> None:
        cur = out.get(name)
        out[name] = bm if cur is None else cur | bm

    pks = _products(store)
    for key, raw in store.scan(K.GROUPS_CF):
        pk = pks[int.from_bytes(key[:4], "big")]
        for prefix, members in zip(
            ((K.CONTAINS_PRODUCT, K.CONTAINS_PURL), (K.USED_PRODUCT, K.USED_PURL)),
            K.chunk_members(raw),
            strict=True,
        ):
            for suffix, ids in members.items():
                bm = K.stored_ids(ids)
                add(K.storage_key(prefix[0], pk), bm)
                add(K.storage_key(prefix[1], pk + suffix), bm)
    for key, raw in store.scan(K.OWNERS_CF):
        out[K.LOGICAL_OWNER + key[:1] + b":" + key[1:]] = BitMap.deserialize(raw)
    return out
