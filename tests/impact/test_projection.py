"""The impact projection folded through the real Folder: batching never changes state,
answers match a brute-force scan, refusals leave no trace, warming changes nothing, and the
planner finds it by name."""

from __future__ import annotations

import asyncio
import gc
import random
from pathlib import Path

import msgspec
import pytest

from streamproc.events.envelope import Envelope, encode, new_event
from streamproc.events.payloads import Component, ImageIndexed
from streamproc.impact import keys as K
from streamproc.impact.projection import ImpactProjection, impact_projection
from streamproc.impact.selector import Selector
from streamproc.impact.warming import start_warming
from streamproc.names import IMPACT
from streamproc.planner.role import PLANNER
from streamproc.runtime.projection import Folder
from streamproc.sbom.purls import PurlError, TooManyKeysError
from streamproc.state import keys
from streamproc.state.digest import state_digest
from streamproc.state.store import MemoryStore, RocksStore, Store
from tests.impact.helpers import Model, digest, feedser, indexed, purl, random_events, removed

CP = "S"


def fold(
    store: Store,
    events: list[Envelope],
    sizes: list[int] | None = None,
    proj: ImpactProjection | None = None,
) -> ImpactProjection:
    proj = proj or ImpactProjection(max_bytes=None, warm_on_start=False)
    folder = Folder(store, [proj], "impact")
    msgs = [(i + 1, "subject", encode(e)) for i, e in enumerate(events)]
    start, k = 0, 0
    while start < len(msgs):
        n = sizes[k % len(sizes)] if sizes else len(msgs)
        part = msgs[start : start + n]
        folder.apply(part, keys.Checkpoint(CP, "epoch", part[-1][0]))
        start, k = start + n, k + 1
    return proj


def impact_digest(store: Store) -> str:
    only = MemoryStore()
    only.ensure_families(K.FAMILIES)
    only.commit({cf: dict(store.scan(cf)) for cf in K.FAMILIES})
    return state_digest(only)


def selectors(tenant: str) -> list[Selector]:
    return [
        Selector(tenant=tenant),
        Selector(tenant=tenant, namespaces=["web"]),
        Selector(tenant=tenant, repos=["registry.example.com/lib/db"], labels=["team=a"]),
        Selector(tenant=tenant, include_tags=["prod-*"]),
        Selector(tenant=tenant, digests=[digest(i) for i in range(0, 300, 3)]),
    ]


def check_answers(proj: ImpactProjection, model: Model, seed: int) -> None:
    rnd = random.Random(seed)
    for tenant in ("t0", "t1", "t2", "nobody"):
        for sel in selectors(tenant):
            for usage in (False, True):
                keys_ = [
                    purl(rnd.randrange(40), rnd.randrange(3))[rnd.randrange(2)] for _ in range(8)
                ]
                got = proj.index.resolve_by_purls(keys_, usage, sel)
                want = model.resolve(keys_, usage, sel)
                assert set(got.digests()) == want, (tenant, sel, usage, keys_)
                assert got.count == len(want)
            vulns = [f"CVE-{rnd.randrange(22)}" for _ in range(4)]
            vkeys = sorted({k for v in vulns for k in model.vulns.get(v, ())})
            got = proj.index.resolve_by_vulns(vulns, False, sel)
            assert set(got.digests()) == (model.resolve(vkeys, False, sel) if vkeys else set())
        everyone = {d for (t, d) in model.images if t == tenant}
        assert set(proj.index.resolve_all(Selector(tenant=tenant)).digests()) == everyone


@pytest.mark.parametrize("seed", [1, 2])
def test_batch_boundaries_never_change_the_state(seed: int) -> None:
    events = random_events(seed, 700)
    one = MemoryStore()
    fold(one, events)
    many = MemoryStore()
    fold(many, events, sizes=[1, 7, 50, 3, 200])
    bounded = MemoryStore()
    fold(bounded, events, sizes=[13], proj=ImpactProjection(max_bytes=4096, warm_on_start=False))
    assert state_digest(one) == state_digest(many) == state_digest(bounded)


def test_answers_match_a_brute_force_scan_hot_and_after_reopening() -> None:
    events = random_events(3, 900)
    model = Model()
    for e in events:
        model.apply(e)
    store = MemoryStore()
    proj = fold(store, events, sizes=[37])
    check_answers(proj, model, 3)
    cold = ImpactProjection(max_bytes=2048, warm_on_start=False)
    Folder(store, [cold], "impact")
    assert cold.index.warm_progress[0] == 0
    check_answers(cold, model, 3)
    for (tenant, d), img in list(model.images.items())[:20]:
        got = cold.index.image(tenant, d)
        assert got is not None
        assert got.purls == sorted(c.purl for c in img.components)
        assert got.used == [c.used for c in sorted(img.components, key=lambda c: c.purl)]


def test_refused_events_are_recorded_and_change_nothing() -> None:
    ok = indexed("t0", 1, [(*purl(1, 0), True), (*purl(2, 1), False)])
    bad = [
        indexed(
            "t0", 2, [(*purl(3, 0), False), ("pkg:deb/debian/%zz@1", "pkg:deb/debian/%zz", False)]
        ),
        indexed("t0", 3, [(purl(4, 0)[0], "pkg:npm/something-else", False)]),
        indexed("t0", 1, [(*purl(1, 0), True), ("pkg:1bad/x@1", "pkg:1bad/x", False)]),
        removed("t0", 99),
        feedser("big", {"CVE-1": [purl(1, 0)[1]] * 60_000, "CVE-2": [purl(2, 0)[1]] * 40_001}),
        feedser("bad", {"CVE-3": [purl(1, 0)[1]], "CVE-4": ["not a purl"]}),
    ]
    clean = MemoryStore()
    fold(clean, [ok])
    store = MemoryStore()
    fold(store, [ok, *bad], sizes=[1, 2, 4])
    assert impact_digest(store) == impact_digest(clean)
    rejected = [
        msgspec.json.decode(v, type=keys.Rejected)
        for _, v in store.scan(keys.META_CF, keys.REJECTION_PREFIX)
    ]
    assert [(r.seq, r.reason) for r in rejected] == [
        (2, "invalid_purl"),
        (3, "invalid_purl"),
        (4, "invalid_purl"),
        (5, "image_not_indexed"),
        (6, "too_many_keys"),
        (7, "invalid_purl"),
    ]
    assert "pkg:deb/debian/%zz@1" in rejected[0].detail
    assert "percent-encoding" in rejected[0].detail
    assert "productKey 'pkg:npm/something-else'" in rejected[1].detail
    assert "100001 keys" in rejected[4].detail
    assert "'not a purl'" in rejected[5].detail


def test_an_image_over_100k_components_never_reaches_the_fold() -> None:
    comps = [
        Component(purl=f"pkg:pypi/p{i}@1", product_key=f"pkg:pypi/p{i}") for i in range(100_001)
    ]
    payload = ImageIndexed(digest=digest(1), registry="r", repository="x", components=comps)
    event = new_event("image.indexed", "t0", payload, "1700000000000:0:test")
    store = MemoryStore()
    folder = Folder(store, [ImpactProjection(warm_on_start=False)], "impact")
    folder.apply([(1, "subject", encode(event))], keys.Checkpoint(CP, "e", 1))
    ((_, raw),) = store.scan(keys.META_CF, keys.QUARANTINE_PREFIX)
    q = msgspec.json.decode(raw, type=keys.Quarantined)
    assert q.reason == "invalid_payload"
    assert "100000" in q.detail
    assert not list(store.scan(K.NAMES_CF))


def test_queries_refuse_more_than_100k_keys() -> None:
    proj = fold(MemoryStore(), [indexed("t0", 1, [(*purl(1, 0), True)])])
    sel = Selector(tenant="t0")
    with pytest.raises(TooManyKeysError, match="100001 keys; at most 100000"):
        proj.index.resolve_by_purls(["pkg:pypi/x"] * 100_001, False, sel)
    with pytest.raises(TooManyKeysError):
        proj.index.resolve_by_vulns(["CVE-1"] * 100_001, False, sel)
    assert proj.index.resolve_by_purls(["pkg:pypi/x"] * 100_000, False, sel).count == 0
    with pytest.raises(PurlError):
        proj.index.resolve_by_purls(["not-a-purl"], False, sel)


class FlakyStore(MemoryStore):
    """Fails the next commit once: the projection must forget the uncommitted batch."""

    fail = False

    def commit(self, writes):  # type: ignore[no-untyped-def]
        if self.fail:
            self.fail = False
            raise OSError("disk on fire")
        super().commit(writes)


def test_a_batch_that_does_not_commit_is_forgotten() -> None:
    events = random_events(5, 300)
    clean = MemoryStore()
    fold(clean, events, sizes=[40])
    store = FlakyStore()
    proj = ImpactProjection(max_bytes=None, warm_on_start=False)
    folder = Folder(store, [proj], "impact")
    msgs = [(i + 1, "s", encode(e)) for i, e in enumerate(events)]
    for start in range(0, len(msgs), 40):
        part = msgs[start : start + 40]
        if start == 120:
            store.fail = True
            with pytest.raises(OSError):
                folder.apply(part, keys.Checkpoint(CP, "epoch", part[-1][0]))
            assert gc.isenabled()
        folder.apply(part, keys.Checkpoint(CP, "epoch", part[-1][0]))
    assert state_digest(store) == state_digest(clean)


async def test_warming_runs_in_slices_and_changes_nothing(tmp_path: Path) -> None:
    events = random_events(6, 800, products=300)
    model = Model()
    for e in events:
        model.apply(e)
    store = RocksStore(tmp_path / "impact")
    fold(store, events, sizes=[100])
    before = state_digest(store)
    store.close()
    store = RocksStore(tmp_path / "impact")
    proj = ImpactProjection(max_bytes=None, warm_on_start=True)
    Folder(store, [proj], "impact")
    assert not proj.warm
    task = start_warming(proj)
    assert task is not None
    check_answers(proj, model, 6)  # answers while cold, loading lazily
    proj.index.restore()  # forget what the queries loaded: warm from scratch
    slices = 0
    while not task.done():
        slices += 1
        await asyncio.sleep(0)
    assert proj.warm and slices > 1
    resident, known = proj.warm_progress
    assert resident == known > 0
    check_answers(proj, model, 6)
    assert state_digest(store) == before
    store.close()


def _reopened(tmp_path: Path, warm_on_start: bool) -> tuple[RocksStore, ImpactProjection]:
    store = RocksStore(tmp_path / "impact")
    fold(store, random_events(3, 200, products=100), sizes=[50])
    store.close()
    store = RocksStore(tmp_path / "impact")
    proj = ImpactProjection(max_bytes=None, warm_on_start=warm_on_start)
    Folder(store, [proj], "impact")
    return store, proj


async def test_the_planner_role_warms_the_index_once_open(tmp_path: Path) -> None:
    store, proj = _reopened(tmp_path, warm_on_start=True)
    assert not proj.warm
    assert PLANNER.on_open is not None
    PLANNER.on_open({IMPACT: proj, "other": object()})  # type: ignore[dict-item]  # found by name
    for _ in range(10_000):
        if proj.warm:
            break
        await asyncio.sleep(0)
    assert proj.warm and proj.warm_progress[0] == proj.warm_progress[1] > 0
    store.close()


def test_warming_is_started_only_when_there_is_something_to_warm_and_a_loop(
    tmp_path: Path,
) -> None:
    store, proj = _reopened(tmp_path, warm_on_start=False)
    assert proj.warm and start_warming(proj) is None
    store.close()
    store, proj = _reopened(tmp_path / "again", warm_on_start=True)
    assert start_warming(proj) is None and not proj.warm  # no running loop: warm explicitly
    proj.warm_now()
    assert proj.warm
    store.close()


def test_the_planner_reads_the_projection_by_name_and_type() -> None:
    proj = ImpactProjection(max_bytes=None, warm_on_start=False)
    assert impact_projection({IMPACT: proj, "other": object()}) is proj
    with pytest.raises(LookupError, match="no 'impact' projection in this process"):
        impact_projection({"other": proj})
    with pytest.raises(TypeError, match="is a MemoryStore, not ImpactProjection"):
        impact_projection({IMPACT: MemoryStore()})
