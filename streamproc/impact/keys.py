"""Storage shape of the impact index: key layout plus a bounded, write-tracking store.

Everything the index keeps lives under a stable bytes key ``prefix + name.encode()`` so
the projector can mirror it into RocksDB one key per value: ``dirty_items()`` after a
batch, ``clear_dirty()`` once written, and a ``loader`` (e.g. ``Rdict.get``) to bring
evicted values back. In memory, values sit in one ``str``-keyed dict per prefix so that
queries never build bytes keys on the hot path.

Layout (``T`` = tenant, ``\\x00`` separates the tenant from a tenant-scoped name)::

    c:p:<product key>      BitMap  images containing any version of the product
    c:e:<exact purl>       BitMap  images containing exactly this purl
    u:p:<product key>      BitMap  ... whose entrypoint uses it (subset of c:p:)
    u:e:<exact purl>       BitMap  ... (subset of c:e:)
    o:t:<T>                BitMap  the tenant's images (ANDed into every answer)
    o:n:<T>\\x00<namespace> BitMap
    o:r:<T>\\x00<repo>      BitMap  repo as given and as "registry/repo"
    o:l:<T>\\x00<k>=<v>     BitMap
    o:g:<T>\\x00<tag>       BitMap
    i:<id, 10 digits>      msgpack IndexedImage (what the image was added under)
    d:<T>\\x00<digest>      ascii image id        (resident)
    t:<T>                  msgpack [tag, ...]   (resident: glob targets)
    v:<vuln id>            msgpack [key, ...]   (resident)

Purl bitmaps are global (ids are global and the tenant bitmap is always intersected);
owner bitmaps are tenant-scoped because names like "prod" collide between tenants.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any, Protocol

from pyroaring import BitMap

CONTAINS_PRODUCT = b"c:p:"
CONTAINS_PURL = b"c:e:"
USED_PRODUCT = b"u:p:"
USED_PURL = b"u:e:"
OWNER_TENANT = b"o:t:"
OWNER_NAMESPACE = b"o:n:"
OWNER_REPO = b"o:r:"
OWNER_LABEL = b"o:l:"
OWNER_TAG = b"o:g:"
IMAGE = b"i:"
DIGEST = b"d:"
TAGS = b"t:"
VULN = b"v:"

BITMAP_PREFIXES = (
    CONTAINS_PRODUCT,
    CONTAINS_PURL,
    USED_PRODUCT,
    USED_PURL,
    OWNER_TENANT,
    OWNER_NAMESPACE,
    OWNER_REPO,
    OWNER_LABEL,
    OWNER_TAG,
)
CACHED_PREFIXES = (*BITMAP_PREFIXES, IMAGE)
"""Values that may be evicted and re-loaded through the loader."""
RESIDENT_PREFIXES = (DIGEST, TAGS, VULN)
"""Small maps kept whole in memory; load them at start with ``Store.restore``."""
ALL_PREFIXES = CACHED_PREFIXES + RESIDENT_PREFIXES
SEP = "\x00"

Loader = Callable[[bytes], Any]
"""``load(key)``: the stored bytes, or an already decoded value (e.g. a BitMap), or None."""
Codec = tuple[Callable[[Any], bytes], Callable[[bytes], Any]]


class ImageLike(Protocol):
    """The fields of an indexed image that decide which bitmaps it belongs to."""

    tenant: str
    registry: str
    repo: str
    namespace: str
    tags: list[str]
    labels: dict[str, str]
    purls: list[str]
    product_keys: list[str]
    used: list[bool]


def scoped(tenant: str, value: str) -> str:
    """Name of a tenant-scoped value; tenants never contain NUL, so this is unambiguous."""
    return tenant + SEP + value


def storage_key(prefix: bytes, name: str) -> bytes:
    return prefix + name.encode("utf-8")


def split_key(key: bytes) -> tuple[bytes, str]:
    """Inverse of :func:`storage_key`; raises KeyError for a foreign key."""
    for prefix in ALL_PREFIXES:
        if key.startswith(prefix):
            return prefix, key[len(prefix) :].decode("utf-8")
    raise KeyError(key)


def image_name(image_id: int) -> str:
    return f"{image_id:010d}"


def label_value(key: str, value: str) -> str:
    return f"{key}={value}"


def repo_names(registry: str, repo: str) -> set[str]:
    """A repo filter matches "library/nginx" as well as "docker.io/library/nginx"."""
    if not repo:
        return set()
    return {repo, f"{registry}/{repo}"} if registry else {repo}


def image_bitmap_names(rec: ImageLike) -> dict[bytes, set[str]]:
    """Every bitmap (prefix -> names) that holds this image's id."""
    t = rec.tenant
    return {
        CONTAINS_PRODUCT: set(rec.product_keys),
        CONTAINS_PURL: set(rec.purls),
        USED_PRODUCT: {k for k, u in zip(rec.product_keys, rec.used, strict=True) if u},
        USED_PURL: {p for p, u in zip(rec.purls, rec.used, strict=True) if u},
        OWNER_TENANT: {t},
        OWNER_NAMESPACE: {scoped(t, rec.namespace)} if rec.namespace else set(),
        OWNER_REPO: {scoped(t, r) for r in repo_names(rec.registry, rec.repo)},
        OWNER_LABEL: {scoped(t, label_value(k, v)) for k, v in rec.labels.items()},
        OWNER_TAG: {scoped(t, tag) for tag in rec.tags},
    }


def _encode_bitmap(bm: BitMap) -> bytes:
    bm.run_optimize()
    return bm.serialize()


BITMAP_CODEC: Codec = (_encode_bitmap, BitMap.deserialize)


class Store:
    """Values by (prefix, name), with dirty tracking and an LRU bound on clean entries.

    Dirty entries are pinned until ``clear_dirty`` (they exist nowhere else yet); a name
    deleted but not yet flushed is known as deleted and never re-read from the loader.
    Sizes are serialized sizes, measured when an entry becomes clean.
    """

    def __init__(
        self,
        codecs: Mapping[bytes, Codec],
        loader: Loader | None = None,
        max_bytes: int | None = None,
    ) -> None:
        if max_bytes is not None and loader is None:
            raise ValueError("a memory bound needs a loader to bring evicted values back")
        self.codecs: dict[bytes, Codec] = {p: BITMAP_CODEC for p in BITMAP_PREFIXES}
        self.codecs.update(codecs)
        self.maps: dict[bytes, dict[str, Any]] = {p: {} for p in ALL_PREFIXES}
        self.loader = loader
        self.max_bytes = max_bytes
        self._dirty: dict[bytes, set[str]] = {p: set() for p in ALL_PREFIXES}
        self._lru: OrderedDict[tuple[bytes, str], int] = OrderedDict()
        self._sizes: dict[tuple[bytes, str], int] = {}
        self.cached_bytes = 0

    # -- reads -------------------------------------------------------------------------
    def get(self, prefix: bytes, name: str) -> Any:
        """The value or None; consults the loader for a cached kind not in memory."""
        v = self.maps[prefix].get(name)
        if v is not None:
            if self.max_bytes is not None and (prefix, name) in self._lru:
                self._lru.move_to_end((prefix, name))
            return v
        if self.loader is None or prefix in RESIDENT_PREFIXES or name in self._dirty[prefix]:
            return None
        raw = self.loader(storage_key(prefix, name))
        if raw is None:
            return None
        if isinstance(raw, bytes | bytearray | memoryview):
            v, size = self.codecs[prefix][1](raw), len(raw)
        else:
            v, size = raw, len(self.codecs[prefix][0](raw))
        self.maps[prefix][name] = v
        self._remember(prefix, name, size)
        self._evict()
        return v

    def touch(self, prefix: bytes, names: Iterable[str]) -> None:
        """Mark names as recently used (queries read the maps directly for speed)."""
        if self.max_bytes is None:
            return
        lru = self._lru
        for name in names:
            if (prefix, name) in lru:
                lru.move_to_end((prefix, name))

    # -- writes ------------------------------------------------------------------------
    def put(self, prefix: bytes, name: str, value: Any) -> None:
        self.maps[prefix][name] = value
        self.mark_dirty(prefix, name)

    def delete(self, prefix: bytes, name: str) -> None:
        self.maps[prefix].pop(name, None)
        self.mark_dirty(prefix, name)

    def add_id(self, prefix: bytes, names: Collection[str], iid: int) -> list[str]:
        """Add ``iid`` to each named bitmap, creating missing ones; returns those created."""
        m, created = self.maps[prefix], []
        if self.max_bytes is None and self.loader is None:  # hot path: plain dicts
            for name in names:
                bm = m.get(name)
                if bm is None:
                    bm = m[name] = BitMap()
                    created.append(name)
                bm.add(iid)
            self._dirty[prefix].update(names)
            return created
        for name in names:  # pin each one before the next load can evict it
            bm = self.get(prefix, name)
            if bm is None:
                bm = BitMap()
                created.append(name)
            bm.add(iid)
            self.put(prefix, name, bm)
        return created

    def discard_id(self, prefix: bytes, names: Collection[str], iid: int) -> list[str]:
        """Remove ``iid`` from each named bitmap, deleting emptied ones; returns those."""
        m, deleted = self.maps[prefix], []
        if self.max_bytes is None and self.loader is None:  # hot path: plain dicts
            for name in names:
                bm = m.get(name)
                if bm is not None:
                    bm.discard(iid)
                    if not bm:
                        del m[name]
                        deleted.append(name)
            self._dirty[prefix].update(names)
            return deleted
        for name in names:
            bm = self.get(prefix, name)
            if bm is None:
                continue
            bm.discard(iid)
            if bm:
                self.put(prefix, name, bm)
            else:
                self.delete(prefix, name)
                deleted.append(name)
        return deleted

    def mark_dirty(self, prefix: bytes, name: str) -> None:
        self._dirty[prefix].add(name)
        if self.max_bytes is not None:
            size = self._lru.pop((prefix, name), None)
            if size is not None:
                self.cached_bytes -= size

    # -- persistence -------------------------------------------------------------------
    def dirty_keys(self) -> set[bytes]:
        return {storage_key(p, n) for p, names in self._dirty.items() for n in names}

    def export(self, prefix: bytes, name: str) -> bytes | None:
        """Serialized current value, or None when the name was deleted."""
        v = self.maps[prefix].get(name)
        if v is None:
            return None
        raw = self.codecs[prefix][0](v)
        self._sizes[(prefix, name)] = len(raw)
        return raw

    def dirty_items(self) -> Iterator[tuple[bytes, bytes | None]]:
        """(key, value or None for delete) for everything changed since clear_dirty."""
        for prefix, names in self._dirty.items():
            for name in sorted(names):
                yield storage_key(prefix, name), self.export(prefix, name)

    def clear_dirty(self) -> None:
        """Declare all dirty values durable; they become evictable."""
        for prefix, names in self._dirty.items():
            if prefix in RESIDENT_PREFIXES or self.max_bytes is None:
                continue
            for name in names:
                if name in self.maps[prefix]:
                    size = self._sizes.pop((prefix, name), None)
                    if size is None:
                        size = len(self.codecs[prefix][0](self.maps[prefix][name]))
                    self._remember(prefix, name, size)
        for names in self._dirty.values():
            names.clear()
        self._sizes.clear()
        self._evict()

    def restore(self, items: Iterable[tuple[bytes, bytes]]) -> None:
        """Load stored (key, value) pairs as clean entries, e.g. a prefix scan at start."""
        for key, raw in items:
            prefix, name = split_key(key)
            self.maps[prefix][name] = self.codecs[prefix][1](raw)
            if prefix not in RESIDENT_PREFIXES and self.max_bytes is not None:
                self._remember(prefix, name, len(raw))
        self._evict()

    # -- eviction ----------------------------------------------------------------------
    def _remember(self, prefix: bytes, name: str, size: int) -> None:
        if self.max_bytes is None:
            return
        old = self._lru.pop((prefix, name), 0)
        self._lru[(prefix, name)] = size
        self.cached_bytes += size - old

    def _evict(self) -> None:
        if self.max_bytes is None:
            return
        while self.cached_bytes > self.max_bytes and self._lru:
            (prefix, name), size = self._lru.popitem(last=False)
            self.cached_bytes -= size
            del self.maps[prefix][name]
