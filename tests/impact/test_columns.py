"""The columnar open chunk: the stored bytes it produces are exactly the format's canonical
form of the images' sets (built here from a dict of sets), for any sequence of adds,
re-indexes and removals cut into any batches; and what it holds costs what the cache
estimate charges (measured with tracemalloc, as the performance notebook did)."""

from __future__ import annotations

import gc
import random
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamproc.impact import keys as K
from streamproc.impact.columns import FLAT_ENTRY_BYTES
from streamproc.impact.index import ImpactIndex
from streamproc.impact.selector import Selector
from streamproc.state.store import MemoryStore
from tests.impact.helpers import purl

Sets = dict[tuple[str, int, int], set[int]]
"""(product key, chunk, side) -> {suffix...} is flattened as (pk + suffix, chunk, side)."""


def expected_chunks(
    images: dict[str, tuple[int, list[tuple[str, str, bool]]]], gids: dict[str, int]
) -> dict[bytes, bytes]:
    """The canonical stored chunks of these images (digest -> id, rows), from sets alone:
    small members ``[gid, id...]`` up to BIG ids, roaring bytes (never run-optimised) beyond,
    msgpack maps with sorted keys."""
    sides: dict[tuple[str, int], list[dict[str, set[int]]]] = {}
    for iid, rows in images.values():
        for p, pk, used in rows:
            got = sides.setdefault((pk, iid >> K.CHUNK_BITS), [{}, {}])
            got[0].setdefault(p[len(pk) :], set()).add(iid)
            if used:
                got[1].setdefault(p[len(pk) :], set()).add(iid)
    out = {}
    for (pk, chunk), (c, u) in sides.items():
        gid = gids[pk]
        parts: list[dict] = []
        for members in (c, u):
            small = {s: [gid, *sorted(ids)] for s, ids in members.items() if len(ids) <= K.BIG}
            big = {s: K.bitmap(ids).serialize() for s, ids in members.items() if len(ids) > K.BIG}
            parts += [small, big]
        out[K.group_key(gid, chunk)] = K.encode_chunk(*parts)
    return out


ROWS = [(*purl(int(40 ** (k / 40)) - 1, k % 3), k % 4 == 0) for k in range(60)]
"""Purls with a few popular ones (members crossing BIG) and a tail."""

steps = st.lists(
    st.tuples(
        st.sampled_from(["add", "add", "add", "remove"]),
        st.integers(0, 40),  # the image (re-indexed when already in)
        st.lists(st.integers(0, len(ROWS) - 1), max_size=12),
        st.booleans(),  # end the batch after this step
    ),
    min_size=1,
    max_size=60,
)


@pytest.mark.parametrize("bits", [16, 2])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=steps, bound=st.sampled_from([None, 1, 3000]))
def test_stored_chunks_are_the_canonical_form_of_the_sets(
    bits: int, script: list[tuple[str, int, list[int], bool]], bound: int | None
) -> None:
    saved = K.CHUNK_BITS
    K.CHUNK_BITS = bits
    try:
        kv = MemoryStore()
        kv.ensure_families(K.FAMILIES)
        ix = ImpactIndex(source=kv, max_bytes=bound)
        ix.restore()
        model: dict[str, tuple[int, list[tuple[str, str, bool]]]] = {}
        for op, n, picks, cut in script:
            digest = f"sha256:{n:064x}"
            if op == "remove":
                assert ix.remove_image("t", digest) == (digest in model)
                model.pop(digest, None)
            else:
                rows = [ROWS[k] for k in picks]  # duplicates included: a purl listed twice
                iid = ix.index_components(
                    "t", digest, [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]
                )
                model[digest] = (iid, rows)
            if cut:
                kv.commit(ix.dirty_writes())
                ix.clear_dirty()
        kv.commit(ix.dirty_writes())
        ix.clear_dirty()
        gids = {
            k[1:].decode(): int.from_bytes(v[:4], "big") for k, v in kv.scan(K.NAMES_CF, K.PRODUCT)
        }
        assert dict(kv.scan(K.GROUPS_CF)) == expected_chunks(model, gids)
        for k in {r[0] for r in ROWS} | {r[1] for r in ROWS}:  # answers, hot and cold
            want = {d for d, (_, rows) in model.items() if any(k in r[:2] for r in rows)}
            for index in (ix, _reopened(kv)):
                got = index.resolve_by_purls([k], usage_only=False, selector=_tenant())
                assert set(got.digests()) == want
    finally:
        K.CHUNK_BITS = saved


def _reopened(kv: MemoryStore) -> ImpactIndex:
    ix = ImpactIndex(source=kv)
    ix.restore()
    return ix


def _tenant() -> Selector:
    return Selector(tenant="t")


def _catalog_purl(r: int, products: int) -> tuple[str, str]:
    """``bench/impact.py``'s purl shapes (their string sizes are what the estimate is for)."""
    j, v = r % products, r // products
    kind = j % 10
    if kind < 4:
        pk = f"pkg:deb/debian/lib{j}"
        return f"{pk}@{v}.{j % 7}.{j % 13}-1?arch=amd64", pk
    if kind < 6:
        pk = f"pkg:npm/node-{j}"
        return f"{pk}@{v}.0.{j % 9}", pk
    if kind < 8:
        pk = f"pkg:pypi/py-{j}"
        return f"{pk}@{v}.{j % 5}.0", pk
    if kind < 9:
        pk = f"pkg:maven/org.example{j % 100}/artifact-{j}"
        return f"{pk}@{v}.{j % 4}", pk
    pk = f"pkg:golang/github.com/org{j % 50}/mod-{j}"
    return f"{pk}@v{v}.{j % 3}.0", pk


def test_what_the_fold_holds_costs_what_the_estimate_charges() -> None:
    """1,000 images of 100 purls (Zipf-like, the benchmark's shapes, fresh strings per image
    as a decoded event has) folded and flushed every 250: the open chunk (checked purls)
    frees at most ``FLAT_ENTRY_BYTES`` an entry and under 100 B per member of the chunk
    (contains and used: ~315 B as decoded lists in suffix maps), and dropping everything the
    bound covers frees at most what ``cached_bytes`` charges, and not less than 70 % of it
    (the lists-in-dicts representation freed 1.2x its charge)."""
    rnd = random.Random(1)
    purls, n = 20_000, 1_000
    kv = MemoryStore()
    kv.ensure_families(K.FAMILIES)
    ix = ImpactIndex(source=kv, max_bytes=1 << 40)
    ix.restore()
    gc.collect()
    tracemalloc.start()
    try:
        for i in range(n):
            ranks = sorted({int(purls ** rnd.random()) - 1 for _ in range(100)})
            rows = [_catalog_purl(r, purls // 4) for r in ranks]
            ix.index_components(
                f"t{i % 8}",
                f"sha256:{i:064x}",
                [p for p, _ in rows],
                [pk for _, pk in rows],
                [(r + i) % 4 == 0 for r in ranks],
            )
            if i % 250 == 249:
                kv.commit(ix.dirty_writes())
                ix.clear_dirty()
        gc.collect()
        entries = sum(len(oc.flat) for oc in ix._open.values())
        members = sum(sum(map(len, K.chunk_members(raw))) for _, raw in kv.scan(K.GROUPS_CF))
        charged = ix.cached_bytes
        before = tracemalloc.get_traced_memory()[0]
        ix._open = {}
        gc.collect()
        open_freed = before - tracemalloc.get_traced_memory()[0]
        ix._lru = None
        ix._groups, ix._cp, ix._up, ix._owners, ix._stored = {}, {}, {}, {}, {}
        gc.collect()
        freed = before - tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert entries > 10_000 and members > entries
    assert open_freed <= FLAT_ENTRY_BYTES * entries, open_freed / entries
    assert open_freed < 100 * members, open_freed / members
    assert 0.7 * charged <= freed <= charged, (freed, charged)
