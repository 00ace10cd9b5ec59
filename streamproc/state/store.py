"""The storage contract and its backends.

A store is a set of named column families of bytes → bytes. All writes go through
:meth:`Store.commit`, which applies a whole batch atomically: projections and their
checkpoint never disagree. The in-memory backend exists for pure-fold tests and as the
reference the RocksDB backend is tested against (one contract suite, both backends).
"""

from __future__ import annotations

import bisect
import fcntl
import os
import weakref
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import cast

from rocksdict import (
    AccessType,
    BlockBasedOptions,
    Cache,
    DBCompressionType,
    Options,
    Rdict,
    ReadOptions,
    WriteBatch,
    WriteBufferManager,
)

from streamproc.state.keys import LOCK_FILE, META_CF, POINT_READ_FAMILIES

Writes = Mapping[str, Mapping[bytes, bytes | None]]
"""Per column family: key → value, or ``None`` to delete."""


@dataclass(frozen=True)
class Reads:
    """How the reads of one column family use the block cache, as its projection declares
    them (``Projection.family_reads``). ``fill_cache=False``: the blocks a read brings in are
    not kept (RocksDB's ``ReadOptions.fill_cache``), for a family read only in bulk — loaded
    whole at open, swept by retention — so a sweep or a start does not evict the blocks the
    point reads of the other families keep hot."""

    fill_cache: bool = True


POINT = Reads()
"""Every family's reads unless its projection says otherwise: blocks read are cached."""
BULK = Reads(fill_cache=False)
"""A family read only in bulk: its blocks are read past the cache."""


class StateLocked(RuntimeError):
    """Another process holds this state directory."""


class Store(ABC):
    @abstractmethod
    def families(self) -> list[str]: ...

    @abstractmethod
    def ensure_families(self, names: Iterable[str]) -> None: ...

    @abstractmethod
    def set_reads(self, reads: Mapping[str, Reads]) -> None:
        """Read these families with these options from now on (the others: :data:`POINT`)."""

    @abstractmethod
    def get(self, cf: str, key: bytes) -> bytes | None: ...

    @abstractmethod
    def get_many(self, cf: str, keys: Iterable[bytes]) -> list[bytes | None]:
        """Committed values of ``keys`` in order (``None`` where missing). On RocksDB one
        multi-get (~1-10 µs a key here, against ~8-18 µs for single gets): what a cold
        query loading thousands of values at once needs."""

    @abstractmethod
    def scan(
        self, cf: str, prefix: bytes = b"", start: bytes = b""
    ) -> Iterator[tuple[bytes, bytes]]:
        """Items of ``cf`` whose key starts with ``prefix``, from ``start`` on, in key order."""

    @abstractmethod
    def commit(self, writes: Writes) -> None:
        """Apply every write atomically (all or nothing)."""

    @abstractmethod
    def close(self) -> None: ...


class MemoryStore(Store):
    def __init__(self) -> None:
        self._data: dict[str, dict[bytes, bytes]] = {META_CF: {}}

    def families(self) -> list[str]:
        return sorted(self._data)

    def ensure_families(self, names: Iterable[str]) -> None:
        for n in names:
            self._data.setdefault(n, {})

    def set_reads(self, reads: Mapping[str, Reads]) -> None:
        """Nothing to choose: the memory store has no block cache."""

    def get(self, cf: str, key: bytes) -> bytes | None:
        return self._data[cf].get(key)

    def get_many(self, cf: str, keys: Iterable[bytes]) -> list[bytes | None]:
        return list(map(self._data[cf].get, keys))

    def scan(
        self, cf: str, prefix: bytes = b"", start: bytes = b""
    ) -> Iterator[tuple[bytes, bytes]]:
        data = self._data[cf]
        keys = sorted(data)
        i = bisect.bisect_left(keys, max(prefix, start))
        for k in keys[i:]:
            if not k.startswith(prefix):
                break
            yield k, data[k]

    def commit(self, writes: Writes) -> None:
        for cf in writes:
            if cf not in self._data:
                raise KeyError(f"unknown column family {cf!r}")
        for cf, items in writes.items():
            data = self._data[cf]
            for k, v in items.items():
                if v is None:
                    data.pop(k, None)
                else:
                    data[k] = v

    def close(self) -> None:
        pass


def _prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key above every key starting with ``prefix`` (None: no such bound)."""
    p = prefix.rstrip(b"\xff")
    return p[:-1] + bytes([p[-1] + 1]) if p else None


DEFAULT_WRITE_BUFFER_MB = 8
DEFAULT_BLOCK_CACHE_MB = 32


@dataclass(frozen=True)
class StoreSizes:
    """What bounds a store's memory: ``write_buffer_bytes`` its memtables, all its families
    together (``projector.write_buffer_mb``: 8 MB, chosen by the soak, docs/operations.md
    "Memory"; 0: RocksDB's own defaults), ``block_cache_bytes`` the block cache it shares
    with every store of the process opened with the same size (``projector.block_cache_mb``).
    Read by :func:`streamproc.state.settings.sizes_from`."""

    write_buffer_bytes: int = DEFAULT_WRITE_BUFFER_MB << 20
    block_cache_bytes: int = DEFAULT_BLOCK_CACHE_MB << 20


_block_caches: dict[int, Cache] = {}


def block_cache(nbytes: int = DEFAULT_BLOCK_CACHE_MB << 20) -> Cache:
    """The process's one block cache (of ``nbytes``), shared by every family of every store
    it opens: what RocksDB keeps of table files in memory — data blocks, and their index and
    filter blocks too — is bounded by one setting, however many families and files there
    are. (RocksDB's own default is a cache of 8 MB per family, and index and filter blocks
    outside any cache, growing with the data.)"""
    cache = _block_caches.get(nbytes)
    if cache is None:
        cache = _block_caches[nbytes] = Cache(nbytes)
    return cache


def _options(
    cache: Cache, family: str | None = None, wbm: WriteBufferManager | None = None
) -> Options:
    """The database's options, or one column family's (tuned for point reads if listed in
    ``POINT_READ_FAMILIES``). ``cache``: the block cache; ``wbm``: the store's memtable
    bound, shared by its families."""
    o = Options(raw_mode=True)
    o.create_if_missing(True)
    o.create_missing_column_families(True)
    if wbm is not None:
        # RocksDB's default is 64 MB of memtable per family (x2 while one flushes), every
        # family on its own; one bound for them all, each memtable a quarter of it
        o.set_write_buffer_manager(wbm)
        o.set_write_buffer_size(max(wbm.get_buffer_size() // 4, 1 << 20))
    table = BlockBasedOptions()
    table.set_block_cache(cache)
    table.set_cache_index_and_filter_blocks(True)
    # the newest files' index and filter stay cached (every read of the family needs them)
    table.set_pin_l0_filter_and_index_blocks_in_cache(True)
    # ~1 % false positives, a full-file filter: most point reads are of keys that are not
    # there yet (an export, a run seen for the first time), and a filter answers those
    # without reading the file's data blocks
    table.set_bloom_filter(10, False)
    if family in POINT_READ_FAMILIES:
        o.set_compression_type(DBCompressionType.none())
    o.set_block_based_table_factory(table)
    return o


_open_stores: weakref.WeakSet[RocksStore] = weakref.WeakSet()


def open_stores() -> list[RocksStore]:
    """The RocksDB stores this process has open (for its memory figures)."""
    return [s for s in _open_stores if s._db is not None]


class RocksStore(Store):
    """RocksDB through rocksdict, raw bytes, one column family per projection.

    An advisory file lock keeps a second writer out of a directory that is in use;
    ``read_only`` opens a point-in-time view beside a running writer (CLI inspection).
    ``sizes``: its memory bounds, as configured (:func:`streamproc.state.settings.sizes_from`).
    """

    def __init__(
        self, path: Path | str, *, read_only: bool = False, sizes: StoreSizes = StoreSizes()
    ) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self.sizes = sizes
        self.block_cache = block_cache(sizes.block_cache_bytes)
        self._lock_fd = -1
        if read_only:
            if not (self.path / "CURRENT").exists():
                raise FileNotFoundError(f"{self.path} is not a state directory")
        else:
            self.path.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(self._lock_fd)
                raise StateLocked(
                    f"state directory {self.path} is in use by another streamproc process"
                ) from None
        existing = (
            Rdict.list_cf(str(self.path), _options(self.block_cache))
            if (self.path / "CURRENT").exists()
            else []
        )
        limit = 0 if read_only else sizes.write_buffer_bytes
        self._wbm = WriteBufferManager(limit, False) if limit else None
        """Bounds the memtables of all this store's families together (no stall: over the
        bound, RocksDB flushes the largest memtable)."""
        cfs = {n: _options(self.block_cache, n, self._wbm) for n in existing if n != "default"}
        if read_only:
            self._db = Rdict(
                str(self.path),
                Options(raw_mode=True),
                column_families=cfs,
                access_type=AccessType.read_only(),
            )
        else:
            cfs.setdefault(META_CF, _options(self.block_cache, META_CF, self._wbm))
            self._db = Rdict(
                str(self.path), _options(self.block_cache, None, self._wbm), column_families=cfs
            )
        self._handles = {n: self._db.get_column_family_handle(n) for n in cfs}
        self._cfs = {n: self._db.get_column_family(n) for n in cfs}
        self._no_fill: set[str] = set()
        """Families whose reads keep no block in the cache (:meth:`set_reads`)."""
        _open_stores.add(self)

    def memtable_bytes(self) -> int:
        """Memory of this store's memtables, every family together (what
        ``projector.write_buffer_mb`` bounds)."""
        if self._wbm is not None:
            return int(self._wbm.get_usage())
        return sum(
            int(cf.property_int_value("rocksdb.cur-size-all-mem-tables") or 0)
            for cf in self._cfs.values()
        )

    def families(self) -> list[str]:
        return sorted(self._cfs)

    def ensure_families(self, names: Iterable[str]) -> None:
        for n in names:
            if n not in self._cfs:
                if self.read_only:
                    raise KeyError(f"column family {n!r} does not exist in {self.path}")
                self._cfs[n] = self._db.create_column_family(
                    n, _options(self.block_cache, n, self._wbm)
                )
                self._handles[n] = self._db.get_column_family_handle(n)

    def set_reads(self, reads: Mapping[str, Reads]) -> None:
        for cf, r in reads.items():
            if r.fill_cache == (cf not in self._no_fill):
                continue
            opt = ReadOptions()
            opt.fill_cache(r.fill_cache)  # type: ignore[call-arg]  # the stub omits the flag it takes
            self._cfs[cf].set_read_options(opt)  # gets and multi-gets of this family
            (self._no_fill.discard if r.fill_cache else self._no_fill.add)(cf)

    def get(self, cf: str, key: bytes) -> bytes | None:
        return self._cfs[cf].get(key)

    def get_many(self, cf: str, keys: Iterable[bytes]) -> list[bytes | None]:
        if not isinstance(keys, list):
            keys = list(keys)
        if not keys:
            return []
        # rocksdict's stub types one key's lookup only; a list of keys gives a list back.
        return cast(list[bytes | None], self._cfs[cf].get(keys))  # type: ignore[arg-type]

    def scan(
        self, cf: str, prefix: bytes = b"", start: bytes = b""
    ) -> Iterator[tuple[bytes, bytes]]:
        # rocksdict's own item iterator runs in Rust (stepping a raw iterator from Python
        # took four calls per item); the upper bound ends a prefix scan inside RocksDB.
        opt = ReadOptions()
        if cf in self._no_fill:
            opt.fill_cache(False)  # type: ignore[call-arg]  # the stub omits the flag it takes
        end = _prefix_end(prefix)
        if end is not None:
            opt.set_iterate_upper_bound(end)
        yield from self._cfs[cf].items(from_key=max(prefix, start), read_opt=opt)

    def commit(self, writes: Writes) -> None:
        if self.read_only:
            raise PermissionError(f"{self.path} is open read-only")
        wb = WriteBatch(raw_mode=True)
        put, delete = wb.put, wb.delete
        for cf, items in writes.items():
            h = self._handles[cf]
            if None not in items.values():  # the common case: puts only, driven from C
                deque(map(put, items.keys(), items.values(), repeat(h)), maxlen=0)
                continue
            for k, v in items.items():
                if v is None:
                    delete(k, h)
                else:
                    put(k, v, h)
        self._db.write(wb)

    def close(self) -> None:
        if self._db is None:
            return
        _open_stores.discard(self)
        self._cfs.clear()
        self._handles.clear()
        self._db.close()
        self._db = None  # type: ignore[assignment]  # a closed store holds no database; every use after close is a bug
        if self._lock_fd >= 0:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
