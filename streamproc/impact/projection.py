"""The ``impact`` projection: folds images and advisories into the ImpactIndex and persists
it in the batch's WriteBatch.

Folds are pure: they change the in-memory index only, and ``flush`` writes what changed
into the batch's ``Tx`` (so bitmaps and the checkpoint commit together). A refused event
(an unparseable purl, too many keys, removing an image that is not indexed) raises
:class:`Rejection` before touching anything. Warming reads committed bytes only, one slice
at a time (:meth:`ImpactProjection.warm_slice`); it never changes state. The background
task that runs the slices between batches is :mod:`streamproc.impact.warming`'s, so this
module stays a fold.

The projection only folds: the engine is :class:`~streamproc.impact.index.ImpactIndex`
(``index``), which also answers the queries. The planner's reactors and its NATS service
reach this object in their own process with :func:`impact_projection`, and read ``index``
and ``warm`` from it; other roles ask the planner's NATS service
(:mod:`streamproc.planner.service`).
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import ClassVar

from prometheus_client import Gauge

from streamproc.events.envelope import Envelope
from streamproc.events.payloads import Component, FeedserExport, ImageIndexed, ImageRemoved
from streamproc.impact import keys as K
from streamproc.impact.index import ImpactIndex
from streamproc.impact.ingest import canonical_key
from streamproc.names import IMPACT
from streamproc.runtime.fold import folds
from streamproc.runtime.projection import Projection, Rejection, hosted
from streamproc.sbom.purls import MAX_KEYS_PER_QUERY, PurlError, TooManyKeysError
from streamproc.state.store import Store
from streamproc.state.tx import Tx

log = logging.getLogger(__name__)

DEFAULT_CACHE_MB = 640
"""Estimated resident bytes of cached groups and owner bitmaps. The 50,000-image /
1,000,000-purl benchmark catalog needs ~300 MB of it fully warm (~660 MB RSS in all)."""

WARM = Gauge("streamproc_impact_warm", "1 once the impact index has finished warming")
PENDING_IMAGES = Gauge(
    "streamproc_impact_pending_images",
    "Images whose ids are folded but not yet merged into the stored chunks",
)
CACHED_BYTES = Gauge(
    "streamproc_impact_cached_bytes", "Estimated bytes of impact bitmaps held in memory"
)


_PURL = attrgetter("purl")
_USED = attrgetter("used")


class _ProductKeys(Sequence[str]):
    """The components' product keys, read only for purls new to the index (most images
    have none): building the list for every image would cost more than the lookups."""

    __slots__ = ("_comps",)

    def __init__(self, comps: list[Component]) -> None:
        self._comps = comps

    def __len__(self) -> int:
        return len(self._comps)

    def __getitem__(self, i: int) -> str:  # type: ignore[override]  # a read-only Sequence[str] view; the slice overload is not needed
        return self._comps[i].product_key


def _settle_gc() -> None:
    """Move everything alive now (the index just restored or warmed: hundreds of thousands
    of long-lived containers) out of the cyclic collector's way. Otherwise the first full
    collection after it, typically inside the first query, walks all of it (~100 ms)."""
    gc.freeze()


class ImpactProjection(Projection):
    name: ClassVar[str] = IMPACT
    creates: ClassVar[frozenset[str]] = frozenset({"image.indexed", "export.feedser"})
    """An export's advisories add vuln keys; removing an image needs it indexed."""
    families: ClassVar[tuple[str, ...]] = K.FAMILIES
    pauses_gc: ClassVar[bool] = True
    """A batch allocates ~10^5 containers that all outlive it; letting the cyclic GC walk the
    whole index for them doubled the fold time."""
    trims_malloc: ClassVar[bool] = True
    """A batch frees its writes (tens of MB of chunk values) and RocksDB its flushed
    memtables into glibc's heap, whose holes stay in the RSS until trimmed."""
    version: ClassVar[int] = 4
    """4: image records say whether usage is known, with a usage-known owner bitmap per
    tenant (3: small members as lists, big ones as roaring, never run-optimised; 2:
    65,536-id chunks, 8-id lists; 1: 8,192-id chunks); older state directories must be
    replayed."""

    def __init__(
        self,
        *,
        max_bytes: int | None = DEFAULT_CACHE_MB << 20,
        warm_on_start: bool = True,
        merge_budget_s: float | None = None,
    ) -> None:
        """``max_bytes``: the cache bound (``impact.cache_mb``, default 640 MB; None or 0:
        unbounded). ``warm_on_start``: load the hot groups in the background once opened
        (``impact.warm_on_start``). ``merge_budget_s``: how long a batch merges pending
        ids into the stored chunks, the rest waiting for later batches
        (:mod:`streamproc.impact.pending`); None: each batch merges all of its own. A role
        passes what is configured (:func:`streamproc.impact.settings.configured_projection`)."""
        self.max_bytes = max_bytes or None
        self.warm_on_start = warm_on_start
        self.merge_budget_s = merge_budget_s
        self.index = ImpactIndex()
        self._warm = True

    # -- lifecycle -------------------------------------------------------------------------
    def open(self, store: Store) -> None:
        self.index = ImpactIndex(
            source=store, max_bytes=self.max_bytes, defer=self.merge_budget_s is not None
        )
        self.index.restore()
        _settle_gc()
        self._warm = not self.warm_on_start or not self.index.product_count()
        WARM.set(int(self._warm))

    @property
    def warm(self) -> bool:
        """True once warming finished (or was not asked for): the planner may resolve every
        change key. While False, answers are still exact, only slower (loaded on demand)."""
        return self._warm

    @property
    def warm_progress(self) -> tuple[int, int]:
        """(product groups in memory, product groups in the index)."""
        return self.index.warm_progress

    def warm_slice(self, slice_groups: int) -> bool:
        """Load the next ``slice_groups`` hot groups from committed state; True once
        warming is finished (then the index is marked warm). One slice of the background
        warming (:func:`streamproc.impact.warming.warm_up`), which yields between them."""
        if not self.index.warm_step(slice_groups):
            CACHED_BYTES.set(self.index.cached_bytes)
            return False
        self._warm = True
        _settle_gc()
        WARM.set(1)
        CACHED_BYTES.set(self.index.cached_bytes)
        resident, known = self.index.warm_progress
        log.info("impact index warm: %d of %d product groups in memory", resident, known)
        return True

    def warm_now(self) -> None:
        """Warm synchronously (tools, tests, benchmarks)."""
        while not self.index.warm_step(10_000):
            pass
        self._warm = True
        _settle_gc()

    # -- folding ---------------------------------------------------------------------------
    @folds(ImageIndexed)
    def _indexed(self, tx: Tx, e: Envelope, p: ImageIndexed) -> None:
        comps = p.components
        try:
            self.index.index_components(
                e.tenant,
                p.digest,
                list(map(_PURL, comps)),
                _ProductKeys(comps),
                list(map(_USED, comps)),
                registry=p.registry,
                repo=p.repository,
                namespace=p.namespace or "",
                tags=p.tags,
                labels=p.labels,
                usage_known=p.usage_known,
            )
        except PurlError as exc:
            raise Rejection("invalid_purl", f"{exc.purl!r}: {exc.reason}") from None
        except TooManyKeysError as exc:
            raise Rejection("too_many_keys", str(exc)) from None

    @folds(ImageRemoved)
    def _removed(self, tx: Tx, e: Envelope, p: ImageRemoved) -> None:
        if not self.index.remove_image(e.tenant, p.digest):
            raise Rejection(
                "image_not_indexed", f"image {p.digest} of tenant {e.tenant} is not in the index"
            )

    @folds(FeedserExport)
    def _advisories(self, tx: Tx, e: Envelope, p: FeedserExport) -> None:
        total = sum(len(a.product_keys) for a in p.advisories)
        if total > MAX_KEYS_PER_QUERY:
            raise Rejection("too_many_keys", str(TooManyKeysError(total)))
        try:
            rows = [(a.vuln_id, [canonical_key(k) for k in a.product_keys]) for a in p.advisories]
        except PurlError as exc:
            raise Rejection("invalid_purl", f"{exc.purl!r}: {exc.reason}") from None
        for vuln, keys in rows:  # all checked above: nothing applies unless everything can
            self.index.add_vuln_keys(vuln, keys)

    def flush(self, tx: Tx) -> None:
        """Hand the batch's changes to ``tx`` in bulk (~100,000 values a batch; the per-event
        undo log of ``Table.put`` is of no use after the last fold)."""
        for cf, items in self.index.dirty_writes(self.merge_budget_s).items():
            tx.put_flushed(cf, items)
        self.index.clear_dirty()
        CACHED_BYTES.set(self.index.cached_bytes)
        PENDING_IMAGES.set(self.index.pending_images)

    def has_deferred(self) -> bool:
        """Ids folded and not merged yet: the projector flushes again while idle."""
        return self.index.has_pending()

    def discard(self) -> None:
        """The batch did not commit: forget everything, reload the resident maps (and the
        stored pending ids)."""
        self.index.restore()


def impact_projection(shared: Mapping[str, object]) -> ImpactProjection:
    """The ``impact`` projection among a role's projections (``RoleContext.shared``, by
    name): what the planner's reactors and NATS service read the index from in their own
    process. Raises LookupError when the process hosts none, TypeError when the name holds
    something else."""
    return hosted(shared, ImpactProjection, needs="the role needs the planner's projections")
