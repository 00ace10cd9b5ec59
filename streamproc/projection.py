"""Projections: plain objects with a pure fold per event kind, and the batch they write into.

A fold reads and writes only through the :class:`Tx` it is given: no clock, no randomness,
no I/O. The runtime folds a whole batch of events into one ``Tx`` and commits it together
with the checkpoint, so replaying the same events yields byte-identical state.
"""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, ClassVar

import msgspec

from streamproc import metrics
from streamproc.events.catalog import KINDS
from streamproc.events.envelope import Envelope, EventError, decode
from streamproc.state import keys
from streamproc.state.store import Store

_MISSING = object()


class Rejection(Exception):
    """Raised by a fold for an event that cannot apply; recorded with its named reason.

    Writes the fold made for that event are rolled back. In-memory caches of a projection
    must only change after the fold has decided to apply the event.
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}" if detail else reason)


class Table:
    """One column family as seen by a batch: reads see the batch's own pending writes."""

    __slots__ = ("_cf", "_pending", "_store", "_tx")

    def __init__(self, tx: Tx, store: Store, cf: str, pending: dict[bytes, bytes | None]) -> None:
        self._tx = tx
        self._store = store
        self._cf = cf
        self._pending = pending

    def get(self, key: bytes) -> bytes | None:
        v = self._pending.get(key, _MISSING)
        if v is _MISSING:
            return self._store.get(self._cf, key)
        return v  # type: ignore[return-value]

    def put(self, key: bytes, value: bytes) -> None:
        self._tx.undo.append((self._pending, key, self._pending.get(key, _MISSING)))
        self._pending[key] = value

    def delete(self, key: bytes) -> None:
        self._tx.undo.append((self._pending, key, self._pending.get(key, _MISSING)))
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
        self.undo: list[tuple[dict[bytes, bytes | None], bytes, object]] = []
        self._tables: dict[str, Table] = {}
        self.seq = 0

    def table(self, cf: str) -> Table:
        t = self._tables.get(cf)
        if t is None:
            t = Table(self, self.store, cf, self.writes.setdefault(cf, {}))
            self._tables[cf] = t
        return t

    def begin(self, seq: int) -> None:
        self.seq = seq
        self.undo.clear()

    def rollback_event(self) -> None:
        for pending, key, prev in reversed(self.undo):
            if prev is _MISSING:
                pending.pop(key, None)
            else:
                pending[key] = prev  # type: ignore[assignment]
        self.undo.clear()


class Projection(ABC):
    """A named view: the kinds it reads, its column families, and a pure fold."""

    name: ClassVar[str]
    kinds: ClassVar[frozenset[str]]
    version: ClassVar[int] = 1
    families: ClassVar[tuple[str, ...]] = ()

    def column_families(self) -> tuple[str, ...]:
        return self.families or (self.name,)

    def open(self, store: Store) -> None:  # noqa: B027 - optional hook
        """Load in-memory caches from committed state (called once, before the first fold)."""

    @abstractmethod
    def fold(self, tx: Tx, event: Envelope) -> None: ...

    def flush(self, tx: Tx) -> None:  # noqa: B027 - optional hook
        """Write cached objects changed in this batch into ``tx`` (once, before commit)."""

    def discard(self) -> None:  # noqa: B027 - optional hook
        """The batch did not commit: drop in-memory changes made since the last commit."""


class StateFormatError(RuntimeError):
    """The directory was written by another state format; it must be rebuilt by replay."""


class _Format(msgspec.Struct, frozen=True):
    runtime: int
    projections: dict[str, int]


def _check_subject(prefix: str, subject: str | bytes, event: Envelope) -> None:
    s = subject.decode(errors="replace") if isinstance(subject, bytes) else subject
    head = f"{prefix}{event.tenant}.{KINDS[event.kind].aggregate}."
    if not s.startswith(head) or "." in s[len(head) :]:
        raise EventError(
            "wrong_subject", f"a {event.kind} event of tenant {event.tenant} on subject {s}"
        )


class Folder:
    """Folds batches of raw stream messages into a store through a set of projections.

    Shared by the live projector, replay and the pure in-memory tests, so all three apply
    events identically: decode (quarantine on failure), dispatch by kind, flush, commit.
    """

    def __init__(
        self,
        store: Store,
        projections: Iterable[Projection],
        role: str = "",
        subjects: str | None = None,
    ) -> None:
        """``subjects``: the event log's subject prefix (``<prefix>.events.``). Given, an
        event that is not on its own tenant's and aggregate's subject is quarantined
        (``wrong_subject``): NATS permissions authorize subjects, so this is what confines a
        producer allowed on one tenant's subjects to that tenant's events."""
        self.store = store
        self.role = role
        self.subjects = subjects
        self.projections = list(projections)
        names = [p.name for p in self.projections]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate projection names in {names}")
        self._dispatch: dict[str, list[Projection]] = {}
        for p in self.projections:
            for k in p.kinds:
                self._dispatch.setdefault(k, []).append(p)
        store.ensure_families(
            [keys.META_CF, *(cf for p in self.projections for cf in p.column_families())]
        )
        self._check_format()
        for p in self.projections:
            p.open(store)
        self.quarantined = 0
        self.rejected = 0

    def _check_format(self) -> None:
        want = _Format(keys.STATE_FORMAT_VERSION, {p.name: p.version for p in self.projections})
        raw = self.store.get(keys.META_CF, keys.FORMAT_KEY)
        if raw is None:
            if self.checkpoint() is not None:
                raise StateFormatError("state directory has a checkpoint but no format record")
            self.store.commit({keys.META_CF: {keys.FORMAT_KEY: msgspec.json.encode(want)}})
            return
        have = msgspec.json.decode(raw, type=_Format)
        if have != want:
            raise StateFormatError(
                f"state format {msgspec.json.encode(have).decode()} differs from this build's "
                f"{msgspec.json.encode(want).decode()}; rebuild it with `streamproc replay`"
            )

    def checkpoint(self) -> keys.Checkpoint | None:
        raw = self.store.get(keys.META_CF, keys.CHECKPOINT_KEY)
        return None if raw is None else msgspec.json.decode(raw, type=keys.Checkpoint)

    def apply(self, messages: Iterable[Sequence[Any]], checkpoint: keys.Checkpoint) -> int:
        """Fold ``(seq, subject, data, ...)`` messages and commit them with ``checkpoint``.

        ``subject`` may be bytes (straight off the wire) or str; it is read to check it (with
        ``subjects``) and to record a quarantined message."""
        tx = Tx(self.store)
        meta = tx.table(keys.META_CF)
        dispatch = self._dispatch
        subjects = self.subjects
        n = 0
        try:
            for m in messages:
                seq, data = m[0], m[2]
                n += 1
                try:
                    event = decode(data)
                    if subjects is not None:
                        _check_subject(subjects, m[1], event)
                except EventError as exc:
                    subject = m[1].decode(errors="replace") if isinstance(m[1], bytes) else m[1]
                    self._quarantine(meta, seq, subject, exc.reason, exc.detail, data)
                    continue
                for proj in dispatch.get(event.kind, ()):
                    tx.begin(seq)
                    try:
                        proj.fold(tx, event)
                    except Rejection as r:
                        tx.rollback_event()
                        self.rejected += 1
                        meta.put(
                            keys.seq_key(keys.REJECTION_PREFIX, seq) + proj.name.encode(),
                            msgspec.json.encode(
                                keys.Rejected(
                                    seq, proj.name, event.id, event.kind, r.reason, r.detail
                                )
                            ),
                        )
            for proj in self.projections:
                proj.flush(tx)
            meta.put(keys.CHECKPOINT_KEY, msgspec.json.encode(checkpoint))
            self.store.commit(tx.writes)
        except BaseException:
            # Nothing of this batch is committed: in-memory caches must forget it too.
            for proj in self.projections:
                proj.discard()
            raise
        return n

    def _quarantine(
        self, meta: Table, seq: int, subject: str, reason: str, detail: str, data: bytes
    ) -> None:
        self.quarantined += 1
        metrics.QUARANTINED.labels(self.role, reason).inc()
        meta.put(
            keys.seq_key(keys.QUARANTINE_PREFIX, seq),
            msgspec.json.encode(
                keys.Quarantined(seq, subject, reason, detail[:2000], data[:65536])
            ),
        )
