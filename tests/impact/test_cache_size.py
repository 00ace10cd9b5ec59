"""The cache bound is only as good as its size estimate: what the cached groups of an
ingest really hold (tracemalloc) must stay within what they are estimated at."""

from __future__ import annotations

import gc
import random
import tracemalloc
from pathlib import Path

from streamproc.events.envelope import Envelope
from streamproc.impact.groups import Group
from streamproc.state.store import RocksStore
from tests.impact.helpers import indexed
from tests.impact.test_projection import fold

PRODUCTS = 1500


def _purl(rank: int) -> tuple[str, str, bool]:
    """Purls shaped like a distro's (a popular version per product, rarer ones)."""
    j, v = rank % PRODUCTS, rank // PRODUCTS
    pk = f"pkg:deb/debian/lib{j}" if j % 2 else f"pkg:npm/%40scope/node-{j}"
    return f"{pk}@{v}.{j % 7}.{j % 13}-1", pk, rank % 4 == 0


def _events(images: int, per_image: int) -> list[Envelope]:
    rnd = random.Random(11)
    out = []
    for i in range(images):
        ranks = {int((8 * PRODUCTS) ** rnd.random()) - 1 for _ in range(per_image)}
        out.append(indexed(f"t{i % 3}", i, [_purl(r) for r in sorted(ranks)]))
    return out


def test_the_estimate_covers_what_an_ingests_groups_hold(tmp_path: Path) -> None:
    events = _events(600, 120)
    store = RocksStore(tmp_path / "state")
    tracemalloc.start()
    try:
        proj = fold(store, events, sizes=[200])
        ix = proj.index
        groups = list(ix._groups.values())
        assert sum(g.open_members for g in groups) > 10_000
        estimate = sum(map(Group.size, groups))
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for g in groups:
            ix._drop_group(g)
        ix._flat_c.clear()
        ix._flat_u.clear()
        del groups, g
        gc.collect()
        held = before - tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
        store.close()
    # Traced bytes are a floor of the RSS (allocator slack and roaring's own memory come on
    # top, ~1.4x at the benchmark's scale): the estimate must cover them, and not by so much
    # that the bound evicts what would fit. (Estimating an open member at 200 B and nothing
    # for an open chunk, as before, put the estimate at 0.93x of what is traced here.)
    assert held <= estimate <= 2 * held, (held, estimate)
