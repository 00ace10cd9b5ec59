"""Members crossing the list/roaring threshold (``BIG`` ids): promoted and demoted as they
grow and shrink, stored canonically (the bytes depend only on the ids, never on batch cuts
or on the order of adds and removals), and answered exactly, cold or warm."""

from __future__ import annotations

import random

from pyroaring import BitMap

from streamproc.impact import keys as K
from streamproc.impact.columns import merge_chunk, strip_chunk
from streamproc.impact.groups import Group, bulk_union
from streamproc.impact.projection import ImpactProjection
from streamproc.impact.selector import Selector
from streamproc.impact.stats import logical_bitmaps
from streamproc.runtime.projection import Folder
from streamproc.state.store import MemoryStore
from tests.impact.helpers import Model, indexed, removed
from tests.impact.test_projection import fold, impact_digest

COMMON = ("pkg:deb/debian/libc6@2.36-9?arch=amd64", "pkg:deb/debian/libc6")
RARE = ("pkg:deb/debian/libc6@2.31-13?arch=amd64", "pkg:deb/debian/libc6")
N = 3 * K.BIG


def _events() -> list:
    """Images that all hold COMMON (its member grows past BIG), some RARE, then removals
    that shrink COMMON back under BIG and re-indexes that move images between purls."""
    rnd = random.Random(7)
    out = []
    for i in range(N):
        comps = [(*COMMON, i % 3 == 0)]
        if i % 5 == 0:
            comps.append((*RARE, i % 2 == 0))
        out.append(indexed(f"t{i % 2}", i, comps, namespace="web" if i % 4 else None))
    gone = rnd.sample(range(N), N - K.BIG // 2)
    out.extend(removed(f"t{i % 2}", i) for i in gone)
    for i in gone[: K.BIG]:  # back again, now with RARE only (a re-used id)
        out.append(indexed(f"t{i % 2}", i, [(*RARE, True)]))
    return out


def _expected(events: list) -> tuple[Model, dict[bytes, set[str]]]:
    model = Model()
    for e in events:
        model.apply(e)
    want: dict[bytes, set[str]] = {}
    for (tenant, d), img in model.images.items():
        for c in img.components:
            names = [K.CONTAINS_PRODUCT + c.product_key.encode(), K.CONTAINS_PURL + c.purl.encode()]
            if c.used:
                names += [K.USED_PRODUCT + c.product_key.encode(), K.USED_PURL + c.purl.encode()]
            for name in names:
                want.setdefault(name, set()).add(f"{tenant}/{d}")
    return model, want


def test_threshold_crossings_store_the_same_bytes_for_any_batching() -> None:
    events = _events()
    digests = set()
    for sizes in ([len(events)], [1], [K.BIG - 1, 3, 50], [7]):
        store = MemoryStore()
        proj = fold(store, events, sizes)
        digests.add(impact_digest(store))
        model, want = _expected(events)
        who = {proj.index.image_id(t, d): f"{t}/{d}" for t, d in model.images}
        got = {
            name: {who[i] for i in bm}
            for name, bm in logical_bitmaps(store).items()
            if not name.startswith(K.LOGICAL_OWNER)
        }
        assert got == want
    assert len(digests) == 1


def test_cold_and_warm_answers_match_a_scan() -> None:
    events = _events()
    store = MemoryStore()
    fold(store, events, [40])
    model, _ = _expected(events)
    keys = [COMMON[1], COMMON[0], RARE[0], "pkg:deb/debian/absent", "pkg:npm/left-pad"]
    for usage in (False, True):
        for tenant in ("t0", "t1", "t9"):
            for sel in (Selector(tenant=tenant), Selector(tenant=tenant, namespaces=["web"])):
                cold = ImpactProjection(max_bytes=None, warm_on_start=False)
                Folder(store, [cold], "impact")  # a restart: nothing but names in memory
                got = cold.index.resolve_by_purls(keys, usage, sel)
                assert set(got.digests()) == model.resolve(keys, usage, sel)
                mine = [img for (t, _), img in model.images.items() if t == tenant]
                unmatched = [
                    k
                    for k in keys
                    if not any(
                        (c.product_key == k or c.purl == k) and Model.counts(img, c, usage)
                        for img in mine
                        for c in img.components
                    )
                ]
                assert got.unmatched == unmatched
                cold.warm_now()
                again = cold.index.resolve_by_purls(keys, usage, sel)
                assert set(again.digests()) == set(got.digests())
                assert again.unmatched == unmatched


def test_member_bytes_do_not_depend_on_history() -> None:
    """A big member reached by adds only, or by adds and removals, or promoted and demoted
    on the way, encodes exactly like one built from its final ids."""
    rnd = random.Random(3)  # a dense run of ids (a run container would be smaller) + spread
    final = sorted(set(range(200, 200 + 2 * K.BIG)) | set(rnd.sample(range(1000), K.BIG)))
    extra = [i for i in range(1000, 1000 + 2 * K.BIG)]
    raw = None
    for part in (final[: K.BIG], extra, final[K.BIG :]):  # one merge a batch
        raw = merge_chunk(raw, 5, {"@1": list(reversed(part))}, {})
    for i in extra:
        assert raw is not None
        raw, changed, emptied = strip_chunk(raw, 5, i)
        assert changed and not emptied
    assert raw is not None
    (cs, cb, us, ub) = K.decode_chunk(raw)
    assert cs == {} and us == {} and ub == {}
    assert cb == {"@1": K.bitmap(final).serialize()}
    assert BitMap.deserialize(cb["@1"]).get_statistics()["n_run_containers"] == 0
    assert len(final) > K.BIG
    for i in final[K.BIG // 2 :]:  # shrink to BIG // 2 ids: back to a plain list
        raw, _, _ = strip_chunk(raw, 5, i)  # type: ignore[arg-type]
    cs, cb, _, _ = K.decode_chunk(raw)  # type: ignore[arg-type]
    assert cb == {} and cs == {"@1": [5, *final[: K.BIG // 2]]}
    for i in final[: K.BIG // 2]:
        raw, _, emptied = strip_chunk(raw, 5, i)  # type: ignore[arg-type]
    assert raw is None and emptied == ["@1"]


def test_bulk_union_of_stored_chunks_is_the_union_of_their_products() -> None:
    """The cold path's bulk union (no per-product bitmap) answers as building every product
    bitmap one by one: small and big members, both sides, several chunks each."""
    rnd = random.Random(11)
    raws: dict[int, dict[int, bytes]] = {}
    for gid in range(40):
        for chunk in sorted(rnd.sample(range(3), rnd.randint(1, 3))):
            base = chunk * K.CHUNK_IDS
            cs: dict[str, list[int]] = {}
            cb: dict[str, bytes] = {}
            us: dict[str, list[int]] = {}
            ub: dict[str, bytes] = {}
            for v in range(rnd.randint(1, 4)):
                ids = sorted(rnd.sample(range(base, base + 500), rnd.choice([1, 5, K.BIG, 60])))
                used = ids[: len(ids) // 2]
                if len(ids) <= K.BIG:
                    cs[f"@{v}"] = [gid, *ids]
                else:
                    cb[f"@{v}"] = K.bitmap(ids).serialize()
                if used and len(used) <= K.BIG:
                    us[f"@{v}"] = [gid, *used]
                elif used:
                    ub[f"@{v}"] = K.bitmap(used).serialize()
            raws.setdefault(gid, {})[chunk] = K.encode_chunk(cs, cb, us, ub)
    for side in (0, 1):
        groups = [Group.load(gid, f"pkg:npm/p{gid}", items.items()) for gid, items in raws.items()]
        want = BitMap.union(BitMap(), *(g.product(side) for g in groups))
        fresh = [Group.load(gid, f"pkg:npm/p{gid}", items.items()) for gid, items in raws.items()]
        got = bulk_union(fresh, side)
        assert got == want
        assert len(got) > 100


def test_the_open_chunk_holds_checked_purls_and_nothing_per_member_after_a_flush() -> None:
    """The fold's open chunk is columnar (the ~10^6 open members of a large catalog were
    most of an ingest's memory): per checked purl one dict slot whose value is the group's
    own id object, the batch's ids in a list per purl, emptied by the flush; members exist only
    as stored bytes."""
    a = ("pkg:npm/left-pad@1.3.0", "pkg:npm/left-pad", True)
    b = ("pkg:npm/right-pad@1.3.0", "pkg:npm/right-pad", True)
    proj = fold(MemoryStore(), [indexed("t", i, [a, b]) for i in range(3)], sizes=[1])
    ix = proj.index
    (oc,) = ix._open.values()
    assert oc.flat == {a[0]: ix._gids[a[1]], b[0]: ix._gids[b[1]]}
    assert oc.flat[a[0]] is ix._gids[a[1]]  # no int object per purl
    assert not oc.pending() and not oc.c and not oc.u
    ga = ix._groups[a[1]]
    assert K.decode_chunk(ga.chunks[0]) == (
        {"@1.3.0": [ga.gid, 0, 1, 2]},
        {},
        {"@1.3.0": [ga.gid, 0, 1, 2]},
        {},
    )
