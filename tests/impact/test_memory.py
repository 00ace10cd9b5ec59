"""Memory under the cache bound: folding many more images than fit must leave the index's
containers and Python's allocated blocks bounded. A batch's writes (every touched chunk,
tens of MB on a large catalog) must be freed when the batch is committed, not left for a
full collection of the cyclic GC: with a large index and the GC paused around each batch,
that collection comes only every few dozen batches, and the process grew by a batch's
writes per batch until then."""

from __future__ import annotations

import gc
import random
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from streamproc.events.envelope import Envelope, encode
from streamproc.impact.columns import FLAT_ENTRY_BYTES
from streamproc.impact.projection import ImpactProjection
from streamproc.runtime.projection import Folder
from streamproc.state import keys
from streamproc.state.store import RocksStore
from tests.impact.helpers import indexed, purl

BATCH = 40
BATCHES = 16
PRODUCTS = 3000


@contextmanager
def gc_off() -> Iterator[None]:
    """No cyclic GC for the whole fold: what a large index sees between full collections."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def images(n: int) -> Iterator[Envelope]:
    rnd = random.Random(7)
    for i in range(n):
        # a sweep over all products (each image new ones) plus a few popular ones
        comps = {purl((i * 20 + k) % PRODUCTS, rnd.randrange(3)) for k in range(20)}
        comps |= {purl(int(PRODUCTS ** rnd.random()) - 1, 0) for _ in range(20)}
        rows = [(p, pk, (i + k) % 3 == 0) for k, (p, pk) in enumerate(sorted(comps))]
        yield indexed(f"t{i % 3}", i, rows, repo=f"app-{i % 17}", tags=[f"v{i % 5}"])


def test_folding_beyond_the_bound_keeps_containers_and_blocks_bounded(tmp_path: Path) -> None:
    store = RocksStore(tmp_path / "state")
    proj = ImpactProjection(max_bytes=256 * 1024, warm_on_start=False)
    folder = Folder(store, [proj], "impact")
    idx = proj.index
    events = [encode(e) for e in images(BATCH * BATCHES)]
    blocks: list[int] = []
    open_members: list[int] = []
    with gc_off():
        for b in range(BATCHES):
            lo = b * BATCH
            msgs = [(lo + k + 1, "s", data) for k, data in enumerate(events[lo : lo + BATCH])]
            folder.apply(msgs, keys.Checkpoint("S", "e", lo + BATCH))
            del msgs
            blocks.append(sys.getallocatedblocks())
            open_members.append(sum(len(oc.flat) for oc in idx._open.values()))
            assert not any(oc.pending() for oc in idx._open.values())
            assert not idx._has_dirty()
            assert idx.cached_bytes <= 256 * 1024
        garbage = gc.collect()
    assert len(idx._groups) < idx.product_count() / 2  # it did evict, all along
    # the open chunk's checked purls give way before they take half the bound
    assert max(open_members) * FLAT_ENTRY_BYTES <= 128 * 1024
    # the fold made no cyclic garbage (a batch's writes held in a cycle)
    assert garbage == 0
    # allocated blocks: only what stays resident per image (its digest) may grow
    grown = blocks[-1] - blocks[BATCHES // 4]
    assert grown < 20 * BATCH * (BATCHES - BATCHES // 4 - 1), (blocks[BATCHES // 4], blocks)
    store.close()
