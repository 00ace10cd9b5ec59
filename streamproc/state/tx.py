"""The batch a fold writes into: per column family, the pending writes that reads see, with a
per-event undo log, and the metric tallies counted once the batch commits.

It sits beside the store (:mod:`streamproc.state.store`), below the folds
(:mod:`streamproc.runtime.projection`): a fold reads and writes only through the :class:`Tx` it is
given, and the runtime commits the ``Tx``'s writes together with the checkpoint.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from streamproc.state.store import Store

if TYPE_CHECKING:
    from prometheus_client import Counter

_MISSING = object()
Tally = tuple["Counter", tuple[str, ...]]
"""A counter and its label values, as a fold tallies it (:meth:`Tx.count`)."""


class Table:
    """One column family as seen by a batch: reads see the batch's own pending writes, and
    read the store with the options the family's projection declared (its ``family_reads``:
    a ``BULK`` family's scans keep no block in the cache).

    It holds the batch's undo log, not the batch: a reference back to the ``Tx`` would make
    a cycle, and a batch's writes (tens of MB) would then wait for a full collection of the
    cyclic GC, which a large index (and the GC pause around each batch) makes rare."""

    __slots__ = ("_cf", "_pending", "_store", "_undo")

    def __init__(
        self,
        undo: list[tuple[dict[Any, Any], Any, object]],
        store: Store,
        cf: str,
        pending: dict[bytes, bytes | None],
    ) -> None:
        self._undo = undo
        self._store = store
        self._cf = cf
        self._pending = pending

    def get(self, key: bytes) -> bytes | None:
        v = self._pending.get(key, _MISSING)
        if v is _MISSING:
            return self._store.get(self._cf, key)
        return v  # type: ignore[return-value]  # a pending value is bytes or None (a delete), _MISSING excluded above

    def put(self, key: bytes, value: bytes) -> None:
        self._undo.append((self._pending, key, self._pending.get(key, _MISSING)))
        self._pending[key] = value

    def delete(self, key: bytes) -> None:
        self._undo.append((self._pending, key, self._pending.get(key, _MISSING)))
        self._pending[key] = None

    def scan(self, prefix: bytes = b"", start: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """Committed and pending items under ``prefix`` in key order, pending ones winning."""
        lo = max(prefix, start)
        pending = sorted(
            (k, v) for k, v in self._pending.items() if k.startswith(prefix) and k >= lo
        )
        stored = (
            (k, v) for k, v in self._store.scan(self._cf, prefix, start) if k not in self._pending
        )
        for k, v in heapq.merge(pending, stored, key=lambda kv: kv[0]):
            if v is not None:
                yield k, v


class Tx:
    """The pending writes of one batch, per column family, with a per-event undo log."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.writes: dict[str, dict[bytes, bytes | None]] = {}
        self.counts: dict[Tally, int] = {}
        """Metric increments of this batch, counted by the runtime after it commits."""
        self.undo: list[tuple[dict[Any, Any], Any, object]] = []
        self._tables: dict[str, Table] = {}
        self.seq = 0

    def table(self, cf: str) -> Table:
        t = self._tables.get(cf)
        if t is None:
            t = Table(self.undo, self.store, cf, self.writes.setdefault(cf, {}))
            self._tables[cf] = t
        return t

    def count(self, counter: Counter, *labels: str, n: int = 1) -> None:
        """Tally ``n`` for ``counter``: counted once this batch commits, never by a fold that
        is rolled back or a batch that fails (so a retried batch does not count twice)."""
        k = (counter, labels)
        self.undo.append((self.counts, k, self.counts.get(k, _MISSING)))
        self.counts[k] = self.counts.get(k, 0) + n

    def put_flushed(self, cf: str, items: Mapping[bytes, bytes | None]) -> None:
        """A projection's bulk writes from :meth:`Projection.flush`, after the batch's last
        fold: nothing is left to roll back there, so no per-event undo is kept."""
        self.table(cf)
        self.writes[cf].update(items)

    def begin(self, seq: int) -> None:
        self.seq = seq
        self.undo.clear()

    def rollback_event(self) -> None:
        for pending, key, prev in reversed(self.undo):
            if prev is _MISSING:
                pending.pop(key, None)
            else:
                pending[key] = prev
        self.undo.clear()
