"""A size-bounded LRU of cache entries with a cheap "recently used" mark.

Queries look bitmaps up with one C-level ``map(dict.get, keys)``; moving 10,000 entries to
the end of an ordered dict per query would cost more than the union itself. Instead a
query drops its keys into ``recent`` (one ``set.update``) and eviction gives marked entries
a second chance (CLOCK-style). Sizes are estimates of resident bytes, so the bound tracks
RSS rather than the much smaller serialized size.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterator
from itertools import repeat

__all__ = ["Lru"]


class Lru:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.total = 0
        self.pinned = 0
        """Bytes held outside the entries (the fold's open chunks): counted in ``total``,
        never a victim, so the entries give way to them."""
        self._sizes: OrderedDict[Hashable, int] = OrderedDict()
        self.recent: set[Hashable] = set()

    def __len__(self) -> int:
        return len(self._sizes)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._sizes

    def set(self, key: Hashable, size: int) -> None:
        """Insert or resize ``key`` as most recently used."""
        old = self._sizes.pop(key, 0)
        self._sizes[key] = size
        self.total += size - old

    def set_many(self, keys: list[Hashable], sizes: list[int]) -> None:
        """``set`` for many keys (the last size wins for a repeated key), in C-level bulk:
        a batch resizes ~100,000 groups."""
        d = self._sizes
        new = dict(zip(keys, sizes, strict=True))
        old = sum(map(d.pop, new, repeat(0)))
        d.update(new)
        self.total += sum(new.values()) - old

    def resize(self, key: Hashable, size: int) -> None:
        """A new size for a key already here, keeping its place."""
        d = self._sizes
        self.total += size - d[key]
        d[key] = size

    def resize_many(self, keys: list[Hashable], sizes: list[int]) -> None:
        """New sizes for keys already here, each keeping its place (closing a chunk does not
        make a group recently used)."""
        d = self._sizes
        new = {k: s for k, s in zip(keys, sizes, strict=True) if k in d}
        old = sum(map(d.__getitem__, new))
        d.update(new)  # an ordered dict keeps an updated key where it was
        self.total += sum(new.values()) - old

    def pin(self, size: int) -> None:
        """Set the bytes held outside the entries."""
        self.total += size - self.pinned
        self.pinned = size

    def drop(self, key: Hashable) -> None:
        size = self._sizes.pop(key, None)
        if size is not None:
            self.total -= size

    def full(self) -> bool:
        return self.total >= self.max_bytes

    def victims(self) -> Iterator[Hashable]:
        """Yield least recently used keys (already forgotten here) until under the bound."""
        sizes, recent = self._sizes, self.recent
        while self.total > self.max_bytes and sizes:
            key, size = sizes.popitem(last=False)
            if key in recent:  # second chance: each key is spared at most once per sweep
                recent.discard(key)
                sizes[key] = size
                continue
            self.total -= size
            yield key
        recent.clear()
