"""The impact index: images <-> purls as roaring bitmaps over dense, reusable image ids.

Every answer is bitmap algebra: a multi-way union of the bitmaps named by the query, ANDed
with the selector's mask (which always starts from the tenant's own bitmap). Images are
never scanned. Per image the index keeps what it was added under, so re-indexing or
removal touches exactly the bitmaps it was added to and leaves nothing stale behind.

Without a ``source`` everything lives in memory (tests, tools). With one (a
:class:`~streamproc.state.store.Store` holding committed state), product groups and owner
bitmaps are loaded on demand, evicted least-recently-used beyond ``max_bytes``, and the
projection writes ``dirty_items()`` into each batch. The parts: :mod:`.state` (shared
state), :mod:`.ingest` (changes), :mod:`.query` (answers), :mod:`.persist` (batches,
warming, diagnostics); the storage layout is in :mod:`.keys`. Ingest, queries and
persistence are mixins over :class:`~.state.IndexState` rather than plain functions: each
works on the same private state and cold-load paths, which the type checker then sees in
its module, while each concern keeps a module of its own; this class is the only one made
of them.
"""

from __future__ import annotations

from streamproc.impact.ingest import Ingest
from streamproc.impact.persist import Persistence
from streamproc.impact.query import Queries
from streamproc.impact.results import ImpactSet, union_within

__all__ = ["ImpactIndex", "ImpactSet"]

_union_within = union_within  # the name the tests have always used


class ImpactIndex(Ingest, Queries, Persistence):
    """Images, their purls and owners as roaring bitmaps; see the module docstring."""
