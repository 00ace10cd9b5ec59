"""A 10-purl change on a 50,000-image catalog (stored in RocksDB, re-indexed and pruned
along the way; some images without usage data) returns exactly the images a brute-force
scan of the catalog finds."""

from __future__ import annotations

import random
from pathlib import Path

from streamproc.impact import keys as K
from streamproc.impact.index import ImpactIndex
from streamproc.impact.selector import Selector
from streamproc.state.store import RocksStore
from tests.impact.helpers import digest, purl

IMAGES = 50_000
PRODUCTS = 3_000
TENANTS = ("acme", "globex")


def _flush(ix: ImpactIndex, store: RocksStore) -> None:
    writes: dict[str, dict[bytes, bytes | None]] = {}
    for cf, key, value in ix.dirty_items():
        writes.setdefault(cf, {})[key] = value
    store.commit(writes)
    ix.clear_dirty()


def _image(rnd: random.Random) -> list[tuple[str, str, bool]]:
    comps: dict[str, tuple[str, str, bool]] = {}
    for _ in range(8):
        p, pk = purl(int(PRODUCTS ** rnd.random()) - 1, rnd.randrange(4))
        comps[p] = (p, pk, rnd.random() < 0.25)
    return sorted(comps.values())


def test_ten_purl_change_on_50k_images_equals_brute_force(tmp_path: Path) -> None:
    rnd = random.Random(50_000)
    catalog: dict[int, tuple[str, str, list[tuple[str, str, bool]]]] = {}
    store = RocksStore(tmp_path / "impact")
    store.ensure_families(K.FAMILIES)
    ix = ImpactIndex(source=store, max_bytes=8 * 1024 * 1024)
    ix.restore()
    for i in range(IMAGES + 3_000):
        n = i if i < IMAGES else rnd.randrange(IMAGES)  # then re-index 3,000 of them
        comps = _image(rnd)
        tenant, ns = TENANTS[n % 2], f"ns{n % 7}"
        catalog[n] = (tenant, ns, comps)
        ix.index_components(
            tenant,
            digest(n),
            [c[0] for c in comps],
            [c[1] for c in comps],
            [c[2] for c in comps],
            namespace=ns,
            usage_known=False if n % 11 == 0 else None,  # None: known if any is used
        )
        if i % 5_000 == 4_999:
            _flush(ix, store)
    for n in rnd.sample(range(IMAGES), 1_000):
        ix.remove_image(catalog[n][0], digest(n))
        del catalog[n]
    _flush(ix, store)
    assert len(ix) == len(catalog)

    def known(n: int) -> bool:
        return n % 11 != 0 and any(c[2] for c in catalog[n][2])

    def brute(keys: list[str], usage: bool, tenant: str, ns: list[str]) -> set[int]:
        out = set()
        for n, (t, namespace, comps) in catalog.items():
            if t == tenant and (not ns or namespace in ns):
                for p, pk, u in comps:  # usage unknown: every component counts
                    if (p in keys or pk in keys) and (u or not usage or not known(n)):
                        out.add(n)
                        break
        return out

    queries = []
    for q in range(6):
        keys = [purl(rnd.randrange(PRODUCTS), rnd.randrange(4))[q % 2] for _ in range(9)]
        keys.append("pkg:pypi/never-indexed@1.0")
        queries.append((keys, q % 3 == 0, TENANTS[q % 2], ["ns1", "ns3"] if q % 2 else []))
    for ix_ in (ix, None):
        if ix_ is None:  # the same answers from a cold index over the same RocksDB
            ix_ = ImpactIndex(source=store, max_bytes=1024 * 1024)
            ix_.restore()
        for keys, usage, tenant, ns in queries:
            got = ix_.resolve_by_purls(keys, usage, Selector(tenant=tenant, namespaces=ns))
            want = brute(keys, usage, tenant, ns)
            assert set(got.digests()) == {digest(n) for n in want}
            assert got.count == len(want) > 0
            assert got.usage_unknown == sum(not known(n) for n in want) > 0
            assert "pkg:pypi/never-indexed@1.0" in got.unmatched
    store.close()
