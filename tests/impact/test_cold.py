"""The cold query path on real RocksDB: a query keeps the chunks it reads without building
groups; everything after it (the next query, unmatched, the fold, eviction, warming)
behaves as if the groups had been built."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pyroaring import BitMap

from streamproc.impact import keys as K
from streamproc.impact.groups import bitmap_bytes, stored_sizes
from streamproc.impact.index import ImpactIndex
from streamproc.impact.projection import ImpactProjection
from streamproc.impact.selector import Selector
from streamproc.runtime.projection import Folder
from streamproc.state.store import RocksStore
from tests.impact.helpers import Model, purl, random_events
from tests.impact.test_projection import fold, impact_digest

PRODUCTS = 60
KEYS = sorted({purl(p, 0)[1] for p in range(PRODUCTS)} | {"pkg:npm/absent"})


class CountingRocks(RocksStore):
    """Real RocksDB that counts the chunks read from ``impact_groups``."""

    chunk_reads = 0

    def get(self, cf: str, key: bytes) -> bytes | None:
        if cf == K.GROUPS_CF:
            self.chunk_reads += 1
        return super().get(cf, key)

    def get_many(self, cf: str, keys: Iterable[bytes]) -> list[bytes | None]:
        keys = list(keys)
        if cf == K.GROUPS_CF:
            self.chunk_reads += len(keys)
        return super().get_many(cf, keys)


def folded(tmp_path: Path, n: int = 600) -> tuple[Path, Model]:
    events = random_events(5, n, products=PRODUCTS)
    model = Model()
    for e in events:
        model.apply(e)
    store = RocksStore(tmp_path / "state")
    fold(store, events, sizes=[97])
    store.close()
    return tmp_path / "state", model


def reopened(state: Path, max_bytes: int | None = 64 << 20) -> tuple[CountingRocks, ImpactIndex]:
    store = CountingRocks(state)
    proj = ImpactProjection(max_bytes=max_bytes, warm_on_start=False)
    Folder(store, [proj], "impact")
    return store, proj.index


def answers(ix: ImpactIndex, model: Model) -> None:
    for tenant in ("t0", "t1", "t2"):
        for usage in (False, True):
            got = ix.resolve_by_purls(KEYS, usage, Selector(tenant=tenant))
            assert set(got.digests()) == model.resolve(KEYS, usage, Selector(tenant=tenant))


def test_a_cold_query_keeps_chunks_and_the_next_one_builds_groups_without_reads(
    tmp_path: Path,
) -> None:
    state, model = folded(tmp_path)
    store, ix = reopened(state)
    try:
        sel = Selector(tenant="t1")
        want = model.resolve(KEYS, False, sel)
        first = ix.resolve_by_purls(KEYS, False, sel)
        assert set(first.digests()) == want
        known = ix.product_count()
        assert not ix._groups and len(ix._stored) == known > 40
        assert store.chunk_reads == known  # one multi-get, each chunk once
        assert ix.warm_progress == (known, known)
        assert ix._lru is not None
        total = ix._lru.total
        assert total == ix.cached_bytes > sum(stored_sizes(list(ix._stored.values())))

        second = ix.resolve_by_purls(KEYS, False, sel)  # as after a cold query before:
        assert set(second.digests()) == want  # every key's bitmap built from its group
        assert store.chunk_reads == known  # ... with no read
        assert not ix._stored and len(ix._groups) == known
        built = sum(
            bitmap_bytes(bm) for g in ix._groups.values() for bm in (g.cp, g.up) if bm is not None
        )
        assert built > 0  # a built group is charged what its chunk was, and its bitmaps
        assert ix._lru.total == total + built
        found, _ = ix._lookup(sorted(ix._gids), False)
        assert None not in found  # the next query is hot
        assert (
            first.unmatched
            == second.unmatched
            == [k for k in KEYS if not model.resolve([k], False, sel)]
        )
        answers(ix, model)
        assert store.chunk_reads == known
    finally:
        store.close()


def test_unmatched_right_after_a_cold_query_builds_groups_from_the_kept_chunks(
    tmp_path: Path,
) -> None:
    state, model = folded(tmp_path)
    store, ix = reopened(state)
    try:
        sel = Selector(tenant="t2")
        r = ix.resolve_by_purls(KEYS, True, sel)
        reads = store.chunk_reads
        assert r.unmatched == [k for k in KEYS if not model.resolve([k], True, sel)]
        assert store.chunk_reads == reads and not ix._stored
        assert set(r.digests()) == model.resolve(KEYS, True, sel)
    finally:
        store.close()


def test_folding_into_products_a_query_kept_as_chunks_writes_the_same_state(
    tmp_path: Path,
) -> None:
    events = random_events(8, 900, products=PRODUCTS)
    head, tail = events[:600], events[600:]
    model = Model()
    for e in events:
        model.apply(e)
    store = RocksStore(tmp_path / "state")
    fold(store, head, sizes=[97])
    store.close()
    store = RocksStore(tmp_path / "state")
    proj = ImpactProjection(max_bytes=64 << 20, warm_on_start=False)
    folder_proj = fold(store, [], proj=proj)
    folder_proj.index.resolve_by_purls(KEYS, False, Selector(tenant="t0"))
    assert proj.index._stored
    fold(store, tail, sizes=[50], proj=proj)  # a second Folder on the same projection
    assert len(proj.index._stored) < proj.index.product_count()
    answers(proj.index, model)
    try:
        reference = RocksStore(tmp_path / "reference")
        fold(reference, events, sizes=[97])
        assert impact_digest(store) == impact_digest(reference)
        reference.close()
    finally:
        store.close()


def test_kept_chunks_are_evicted_under_the_bound_and_read_again(tmp_path: Path) -> None:
    state, model = folded(tmp_path)
    store, ix = reopened(state, max_bytes=6000)
    try:
        for tenant in ("t0", "t1"):
            sel = Selector(tenant=tenant)
            r = ix.resolve_by_purls(KEYS, False, sel)
            assert set(r.digests()) == model.resolve(KEYS, False, sel)
            assert ix._lru is not None and ix._lru.total <= 6000
            assert ix.cached_bytes == ix._lru.total
            assert len(ix._stored) + len(ix._groups) < ix.product_count()
        before = store.chunk_reads
        answers(ix, model)
        assert store.chunk_reads > before  # what was evicted is read back
    finally:
        store.close()


def test_warming_builds_the_kept_chunks_into_groups_with_their_bitmaps(tmp_path: Path) -> None:
    state, model = folded(tmp_path)
    store, ix = reopened(state)
    try:
        ix.resolve_by_purls(KEYS[::2], False, Selector(tenant="t0"))
        kept = len(ix._stored)
        assert kept > 1 and ix.warm_progress == (kept, ix.product_count())
        while not ix.warm_step(7):
            assert ix.warm_progress[0] >= kept
        assert not ix._stored and ix.warm_progress == (ix.product_count(),) * 2
        found, _ = ix._lookup(sorted(ix._gids), False)
        assert None not in found
        answers(ix, model)
    finally:
        store.close()


def test_products_over_several_chunks_beside_kept_ones(tmp_path: Path) -> None:
    """Ids beyond the first 65,536-id chunk (a state written by hand: a catalog that large
    takes minutes to fold): a cold query keeps one-chunk products as chunks, builds the
    groups of the others, and unions both."""
    hi = K.CHUNK_IDS
    ids = {  # product -> chunk -> (exact-purl suffix -> contains ids, used ids)
        "pkg:npm/a": {0: {"@1": ([1, 2], [2])}},
        "pkg:npm/b": {
            0: {"@1": ([3], [])},
            1: {"@2": ([hi + 1, *range(hi + 10, hi + 40)], [hi + 1])},
        },
        "pkg:npm/c": {1: {"@1": ([hi + 2], [])}},
        "pkg:npm/d": {0: {"@1": ([4], [])}, 1: {"@1": ([hi + 3], [hi + 3])}},
    }
    live = sorted({i for p in ids.values() for c in p.values() for m in c.values() for i in m[0]})
    store = CountingRocks(tmp_path / "state")
    store.ensure_families(K.FAMILIES)
    names: dict[bytes, bytes | None] = {}
    groups: dict[bytes, bytes | None] = {}
    for gid, (pk, chunks) in enumerate(ids.items()):
        names[K.PRODUCT + pk.encode()] = K.u32(gid) + K.pack_chunks(chunks)
        for chunk, members in chunks.items():
            cs: dict[str, list[int]] = {}
            cb: dict[str, bytes] = {}
            us: dict[str, list[int]] = {}
            for s, (c, u) in members.items():
                if len(c) > K.BIG:
                    cb[s] = K.bitmap(c).serialize()
                else:
                    cs[s] = [gid, *c]
                if u:
                    us[s] = [gid, *u]
            groups[K.group_key(gid, chunk)] = K.encode_chunk(cs, cb, us, {})
    for i in live:
        names[K.DIGEST + K.scoped("t", f"d{i}").encode()] = K.u32(i)
    every = K.bitmap(live).serialize()  # the tenant's images, all with usage data
    owners: dict[bytes, bytes | None] = {K.OWNER_TENANT + b"t": every, K.OWNER_USAGE + b"t": every}
    store.commit({K.NAMES_CF: names, K.GROUPS_CF: groups, K.OWNERS_CF: owners})
    try:
        ix = ImpactIndex(source=store, max_bytes=1 << 20)
        ix.restore()
        sel = Selector(tenant="t")
        keys = list(ids)
        r = ix.resolve_by_purls(keys, False, sel)
        assert r.bitmap == BitMap(live)
        assert sorted(ix._stored) == ["pkg:npm/a", "pkg:npm/c"]
        assert sorted(ix._groups) == ["pkg:npm/b", "pkg:npm/d"]
        assert store.chunk_reads == 6
        assert ix._lru is not None and ix._lru.total == ix.cached_bytes
        used = ix.resolve_by_purls(keys, True, sel)
        assert used.bitmap == BitMap([2, hi + 1, hi + 3])
        assert not ix._stored and store.chunk_reads == 6
        exact = ix.resolve_by_purls(["pkg:npm/b@2", "pkg:npm/d@1"], False, sel)
        assert exact.bitmap == BitMap([hi + 1, *range(hi + 10, hi + 40), 4, hi + 3])
    finally:
        store.close()
