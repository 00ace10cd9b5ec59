"""Projections: plain objects with a pure fold per event kind, and the folder that applies a
batch of events to them.

A projection's folds are typed handlers registered per payload type
(:mod:`streamproc.runtime.fold`). A fold reads and writes only through the
:class:`~streamproc.state.tx.Tx` it is given: no clock, no randomness, no I/O, no metrics (it
tallies them in the ``Tx``; the runtime counts them once the batch commits). The runtime folds a
whole batch of events into one ``Tx`` and commits it together with the checkpoint, so replaying the
same events yields byte-identical state.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import msgspec

from streamproc.events.catalog import KINDS
from streamproc.events.envelope import Envelope, EventError, decode
from streamproc.runtime.fold import Handler, handlers_of
from streamproc.state import keys
from streamproc.state.malloc import DEFAULT_TRIM_S, Trimmer
from streamproc.state.store import Reads, Store
from streamproc.state.tx import Tally, Tx


class Rejection(Exception):
    """Raised by a fold for an event that cannot apply; recorded with its named reason.

    Writes the fold made for that event are rolled back. In-memory caches of a projection
    must only change after the fold has decided to apply the event.
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}" if detail else reason)


class Projection:
    """A named view: its column families and a typed, pure fold per payload type.

    Its handlers are methods marked with :func:`streamproc.runtime.fold.folds`; the kinds it reads
    (``kinds``) are theirs, set when the class is created. A projection that declares
    ``kinds`` and overrides :meth:`fold` instead is the *untyped adapter*: it dispatches
    itself (its kinds are still checked against the catalog); no role's projection is one,
    which ``tests/runtime/test_fold.py`` holds them to.

    Updates never create (docs/conformance.md, "Every message kind handled"). Of the kinds a
    projection folds, only those in ``creates`` may bring a new entity into the view; those
    in ``observes`` never create nor reject; every other kind updates something that must
    already be there, and for an unknown run, segment, schedule or image the fold raises
    :class:`Rejection`. ``tests/test_updates_never_create.py`` folds every such kind for an
    unknown entity into every registered projection; docs/events.md lists the
    classification."""

    name: ClassVar[str]
    kinds: ClassVar[frozenset[str]]
    version: ClassVar[int] = 1
    pauses_gc: ClassVar[bool] = False
    """True: the runtime keeps the cyclic garbage collector off while it folds a batch for
    this projection (the fold stays pure; see :meth:`Folder.apply`)."""
    trims_malloc: ClassVar[bool] = False
    """True: the runtime hands the C allocator's free memory back to the OS after a batch
    (rate-limited, :mod:`streamproc.state.malloc`): for views whose batches free tens of MB
    of chunk values and memtables into glibc's heap."""
    families: ClassVar[tuple[str, ...]] = ()
    family_reads: ClassVar[Mapping[str, Reads]] = {}
    """How the reads of some of its own families use the block cache, chosen from what those
    reads do (:class:`streamproc.state.store.Reads`): ``BULK`` for a family read only in bulk
    (loaded whole at :meth:`open`, swept by retention), so that a start or a sweep does not
    evict the blocks the point reads keep hot. Every other family: ``POINT``. Every read of
    the family through the store, a batch's :class:`~streamproc.state.tx.Table` included,
    uses them."""
    reads: ClassVar[tuple[str, ...]] = ()
    """Families of another projection of the same role that this one reads (never writes):
    as of the events before the one folded, the batch's pending writes included."""
    removes: ClassVar[tuple[str, ...]] = ()
    """Families of another projection of the same role whose keys start with this one's
    entity keys: when this one removes an entity (retention), it deletes that entity's keys
    there too, in the same batch, and writes nothing else there (a run leaving takes its
    deltas' acknowledgements with it)."""
    creates: ClassVar[frozenset[str]] = frozenset()
    """Kinds that may be the first this view sees of an entity: they need no other entity
    to exist (``run.requested`` for the read model, ``run.planned`` for the open-run list)."""
    observes: ClassVar[frozenset[str]] = frozenset()
    """Kinds read only for view-wide bookkeeping (a clock) or for a link that may well not
    exist (the exports a run claimed): they create no entity and are never rejected."""

    _folds: ClassVar[dict[str, Handler]] = {}
    """kind → handler, built from the class's handlers when it is created."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        handlers = handlers_of(cls)
        if handlers:
            if "kinds" in vars(cls) or cls.fold is not Projection.fold:
                raise TypeError(
                    f"{cls.__name__}: a projection with typed folds neither declares kinds "
                    f"(they are its handlers' kinds) nor overrides fold"
                )
            cls.kinds = frozenset(handlers)
            cls._folds = handlers
        kinds = getattr(cls, "kinds", None)
        if kinds is None:
            return
        if not handlers and cls.fold is Projection.fold:
            raise TypeError(f"{cls.__name__}: no fold for {sorted(kinds)}")
        unknown = kinds - KINDS.keys()
        if unknown:
            raise TypeError(f"{cls.__name__}: {sorted(unknown)} are not in the event catalog")
        stray = (cls.creates | cls.observes) - kinds
        if stray or cls.creates & cls.observes:
            raise TypeError(
                f"{cls.__name__}: creates/observes must be disjoint kinds it folds "
                f"(stray {sorted(stray)}, both {sorted(cls.creates & cls.observes)})"
            )

    @classmethod
    def updates(cls) -> frozenset[str]:
        """The kinds that need their entity to exist: rejected for an unknown one."""
        return cls.kinds - cls.creates - cls.observes

    def column_families(self) -> tuple[str, ...]:
        return self.families or (self.name,)

    def open(self, store: Store) -> None:
        """Load in-memory caches from committed state (called once, before the first fold)."""

    def fold(self, tx: Tx, event: Envelope) -> None:
        """Apply one event: its kind's handler, given the typed payload."""
        self._folds[event.kind](self, tx, event, event.payload)

    def flush(self, tx: Tx) -> None:
        """Write cached objects changed in this batch into ``tx`` (once, before commit)."""

    def has_deferred(self) -> bool:
        """Work a flush left for later batches (the impact index's merging): while it is
        true and no event waits, the projector flushes again without events
        (:meth:`Folder.tidy`)."""
        return False

    def discard(self) -> None:
        """The batch did not commit: drop in-memory changes made since the last commit."""


P = TypeVar("P", bound=Projection)


def hosted(shared: Mapping[str, object], cls: type[P], needs: str = "") -> P:
    """The ``cls`` projection among a process's projections (``RoleContext.shared``), found
    by its name and checked by its type: how a role's reactors and services read a
    projection it folds. Raises LookupError when the process hosts none (``needs`` says
    what would), TypeError when the name holds something else."""
    found = shared.get(cls.name)
    if found is None:
        raise LookupError(f"no {cls.name!r} projection in this process" + (needs and f": {needs}"))
    if not isinstance(found, cls):
        raise TypeError(
            f"the {cls.name!r} projection is a {type(found).__name__}, not {cls.__name__}"
        )
    return found


def folded_kinds(projections: Iterable[Projection]) -> frozenset[str]:
    """Every kind some of ``projections`` folds (their handlers' kinds): what a projector
    hosting them needs from the log (:func:`streamproc.events.filters.filter_subjects`)."""
    return frozenset(k for p in projections for k in p.kinds)


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


@dataclass
class Folded:
    """What one committed batch did: the runtime counts, logs and reports from this, never
    from inside a fold."""

    messages: int = 0
    applied: int = 0
    """Events that decoded and that no projection rejected."""
    rejected: list[keys.Rejected] = field(default_factory=list)
    """One record per (event, projection) that refused it, in sequence order."""
    quarantined: list[keys.Quarantined] = field(default_factory=list)
    counts: dict[Tally, int] = field(default_factory=dict)
    """What the folds tallied (:meth:`Tx.count`): for the runtime to add to its counters."""

    def rejected_events(self) -> dict[int, list[keys.Rejected]]:
        """The rejections grouped by event (stream sequence)."""
        out: dict[int, list[keys.Rejected]] = {}
        for r in self.rejected:
            out.setdefault(r.seq, []).append(r)
        return out


RejectionCounts = dict[str, dict[str, int]]
"""projection → reason → rejected events (committed; kept in ``__meta__``)."""
_counts_codec = msgspec.json.Decoder(RejectionCounts)


def describe_rejections(counts: RejectionCounts | None) -> str:
    """``rm_runs: unknown_run 2, run_finished 1; runner: unknown_run 2`` (empty for none)."""
    return "; ".join(
        f"{proj}: " + ", ".join(f"{reason} {n}" for reason, n in sorted(per.items()))
        for proj, per in sorted((counts or {}).items())
        if per
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
        trim_interval_s: float = DEFAULT_TRIM_S,
    ) -> None:
        """``subjects``: the event log's subject prefix (``<prefix>.events.``). Given, an
        event that is not on its own tenant's and aggregate's subject is quarantined
        (``wrong_subject``): NATS permissions authorize subjects, so this is what confines a
        producer allowed on one tenant's subjects to that tenant's events.
        ``trim_interval_s``: how often, at most, memory is handed back after a batch of
        projections that ask for it (``projector.malloc_trim_s``; 0: never)."""
        self.store = store
        self.role = role
        self.subjects = subjects
        self.projections = list(projections)
        names = [p.name for p in self.projections]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate projection names in {names}")
        self._pauses_gc = any(p.pauses_gc for p in self.projections)
        self._trimmer = (
            Trimmer(trim_interval_s) if any(p.trims_malloc for p in self.projections) else None
        )
        self._dispatch: dict[str, list[Projection]] = {}
        for p in self.projections:
            for k in p.kinds:
                self._dispatch.setdefault(k, []).append(p)
        store.ensure_families(
            [
                keys.META_CF,
                *(
                    cf
                    for p in self.projections
                    for cf in (*p.column_families(), *p.reads, *p.removes)
                ),
            ]
        )
        for p in self.projections:
            foreign = set(p.family_reads) - set(p.column_families())
            if foreign:
                raise ValueError(f"{p.name}: read options for families it does not own {foreign}")
            store.set_reads(p.family_reads)
        self._check_format()
        for p in self.projections:
            p.open(store)
        self.quarantined = 0
        self.rejected = 0
        """Messages quarantined and (event, projection) rejections since this object opened."""
        self.rejections: RejectionCounts = self._load_counts()
        """Every rejection the committed state records, per projection and reason."""

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

    def _load_counts(self) -> RejectionCounts:
        raw = self.store.get(keys.META_CF, keys.REJECTION_COUNTS_KEY)
        if raw is not None:
            return _counts_codec.decode(raw)
        counts: RejectionCounts = {}  # state written before the counts were kept
        for _, v in self.store.scan(keys.META_CF, keys.REJECTION_PREFIX):
            r = msgspec.json.decode(v, type=keys.Rejected)
            per = counts.setdefault(r.projection, {})
            per[r.reason] = per.get(r.reason, 0) + 1
        return counts

    def checkpoint(self) -> keys.Checkpoint | None:
        raw = self.store.get(keys.META_CF, keys.CHECKPOINT_KEY)
        return None if raw is None else msgspec.json.decode(raw, type=keys.Checkpoint)

    def advance(self, checkpoint: keys.Checkpoint) -> None:
        """Move the checkpoint over events none of these projections folds (a filtered
        consumer passed them): the state itself does not change."""
        self.store.commit({keys.META_CF: {keys.CHECKPOINT_KEY: msgspec.json.encode(checkpoint)}})

    def apply(self, messages: Iterable[Sequence[Any]], checkpoint: keys.Checkpoint) -> Folded:
        """Fold ``(seq, subject, data, ...)`` messages and commit them with ``checkpoint``.

        ``subject`` may be bytes (straight off the wire) or str; it is read to check it (with
        ``subjects``) and to record a quarantined message. Rejections and quarantined
        messages are recorded in the same batch; what happened is returned, for the caller
        to count and log once the batch is committed."""
        with self._batch():
            return self._apply(messages, checkpoint)

    @contextlib.contextmanager
    def _batch(self) -> Iterator[None]:
        """Around a batch or a flush without events: a projection whose batches allocate
        long-lived containers by the hundred thousand asks for the cyclic GC to stay off
        until the batch is committed (or dropped); a batch that fails is dropped by every
        projection; memory is trimmed after it."""
        paused = self._pauses_gc and gc.isenabled()
        if paused:
            gc.disable()
        try:
            yield
        except BaseException:
            # Nothing of this batch is committed: in-memory caches must forget it too.
            for proj in self.projections:
                proj.discard()
            raise
        finally:
            if paused:
                gc.enable()
            if self._trimmer is not None:  # the batch's writes are freed by now
                self._trimmer.after_batch()

    def _apply(self, messages: Iterable[Sequence[Any]], checkpoint: keys.Checkpoint) -> Folded:
        tx = Tx(self.store)
        meta = tx.table(keys.META_CF)
        dispatch = self._dispatch
        subjects = self.subjects
        out = Folded()
        for m in messages:
            seq, data = m[0], m[2]
            out.messages += 1
            try:
                event = decode(data)
                if subjects is not None:
                    _check_subject(subjects, m[1], event)
            except EventError as exc:
                subject = m[1].decode(errors="replace") if isinstance(m[1], bytes) else m[1]
                q = keys.Quarantined(seq, subject, exc.reason, exc.detail[:2000], data[:65536])
                meta.put(keys.seq_key(keys.QUARANTINE_PREFIX, seq), msgspec.json.encode(q))
                out.quarantined.append(q)
                continue
            refused = False
            for proj in dispatch.get(event.kind, ()):
                tx.begin(seq)
                try:
                    proj.fold(tx, event)
                except Rejection as r:
                    tx.rollback_event()
                    refused = True
                    rec = keys.Rejected(
                        seq, proj.name, event.id, event.kind, r.reason, r.detail[:2000]
                    )
                    meta.put(
                        keys.seq_key(keys.REJECTION_PREFIX, seq) + proj.name.encode(),
                        msgspec.json.encode(rec),
                    )
                    out.rejected.append(rec)
            if not refused:
                out.applied += 1
        for proj in self.projections:
            proj.flush(tx)
        counts = self._counted(out.rejected)
        if out.rejected:
            meta.put(keys.REJECTION_COUNTS_KEY, msgspec.json.encode(counts))
        meta.put(keys.CHECKPOINT_KEY, msgspec.json.encode(checkpoint))
        self.store.commit(tx.writes)
        out.counts = tx.counts
        self.rejections = counts
        self.rejected += len(out.rejected)
        self.quarantined += len(out.quarantined)
        return out

    def has_deferred(self) -> bool:
        """Whether a projection has deferred work (:meth:`Projection.has_deferred`)."""
        return any(p.has_deferred() for p in self.projections)

    def tidy(self) -> None:
        """One flush without events of the projections with deferred work, committed on its
        own (the checkpoint does not move: the state's content does not change)."""
        with self._batch():
            tx = Tx(self.store)
            for proj in self.projections:
                if proj.has_deferred():
                    proj.flush(tx)
            self.store.commit(tx.writes)

    def finish(self) -> None:
        """Do all deferred work (a clean stop, the end of a replay): afterwards the state
        depends only on the events folded."""
        while self.has_deferred():
            self.tidy()

    def _counted(self, rejected: list[keys.Rejected]) -> RejectionCounts:
        if not rejected:
            return self.rejections
        counts = {p: dict(per) for p, per in self.rejections.items()}
        for r in rejected:
            per = counts.setdefault(r.projection, {})
            per[r.reason] = per.get(r.reason, 0) + 1
        return counts
