"""ImpactIndex against a brute-force reference, plus the edges the model cannot show."""

from __future__ import annotations

import random
from fnmatch import fnmatchcase

import msgspec
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from pyroaring import BitMap

from streamproc.impact import keys as K
from streamproc.impact.index import ImpactIndex, _union_within
from streamproc.impact.selector import Selector, SelectorError
from streamproc.impact.stats import logical_bitmaps
from streamproc.sbom.image import IndexedImage, build_image
from streamproc.sbom.purls import MAX_KEYS_PER_QUERY, PurlError, TooManyKeysError
from streamproc.sbom.purls import normalize_purl as norm
from streamproc.state.store import MemoryStore

TENANTS = ["t1", "t2", "t:3"]
DIGESTS = [f"sha256:{c * 4}" for c in "abcdef"]
NAMESPACES = ["web", "data"]
REPOS = ["app", "lib/db"]
REGISTRIES = ["", "ghcr.io"]
LABELS = {"team": ["a", "b"], "env": ["prod"]}
TAGS = ["prod-1", "prod-2", "dev", "latest"]
RAW_PURLS = [
    "pkg:deb/debian/openssl@3.0.11-1?arch=amd64",
    "pkg:deb/debian/openssl@3.0.11-1?arch=arm64",
    "pkg:deb/debian/openssl@3.0.13-1?arch=amd64",
    "pkg:pypi/Django@4.2",
    "pkg:pypi/django@5.0",
    "pkg:npm/@angular/core@16.0.0",
    "pkg:generic/busybox",
    "pkg:maven/org.example/lib@1.0#sub/dir",
]
QUERY_KEYS = [
    *RAW_PURLS,
    "pkg:deb/debian/openssl",
    "pkg:PYPI/Django",
    "pkg:pypi/django",
    "pkg:npm/%40angular/core",
    "pkg:maven/org.example/lib",
    "pkg:generic/busybox",
    "pkg:generic/absent",
    "pkg:deb/debian/zlib1g@1.2",
]


def image(
    tenant: str, digest: str, purls: list[tuple[str, bool]], known: bool = True, **kw: object
) -> IndexedImage:
    """``known``: the used flags are usage data; else the image has none (all count)."""
    used = [u for _, u in purls] if known else None
    return build_image(tenant=tenant, digest=digest, purls=[p for p, _ in purls], used=used, **kw)  # type: ignore[arg-type]


images = st.builds(
    image,
    tenant=st.sampled_from(TENANTS),
    digest=st.sampled_from(DIGESTS),
    purls=st.lists(st.tuples(st.sampled_from(RAW_PURLS), st.booleans()), max_size=5),
    known=st.booleans(),
    registry=st.sampled_from(REGISTRIES),
    repo=st.sampled_from(["", *REPOS]),
    namespace=st.sampled_from(["", *NAMESPACES]),
    tags=st.lists(st.sampled_from(TAGS), max_size=3),
    labels=st.dictionaries(st.sampled_from(list(LABELS)), st.sampled_from(["a", "b", "prod"])),
)
selectors = st.builds(
    Selector,
    tenant=st.sampled_from([*TENANTS, "nobody"]),
    namespaces=st.lists(st.sampled_from([*NAMESPACES, "nope"]), max_size=2),
    repos=st.lists(st.sampled_from([*REPOS, "ghcr.io/app", "docker.io/app"]), max_size=2),
    labels=st.lists(st.sampled_from(["team=a", "team=b", "env=prod", "env=dev"]), max_size=2),
    digests=st.lists(st.sampled_from(DIGESTS), max_size=2),
    include_tags=st.lists(st.sampled_from(["prod-*", "dev", "l?test", "[xy]*", "*"]), max_size=2),
)


# -- brute-force reference -------------------------------------------------------------------
def in_scope(rec: IndexedImage, sel: Selector) -> bool:
    repo_names = {rec.repo, f"{rec.registry}/{rec.repo}"} if rec.registry else {rec.repo}
    labels = {f"{k}={v}" for k, v in rec.labels.items()}
    checks = [
        not sel.namespaces or rec.namespace in sel.namespaces,
        not sel.repos or bool(rec.repo and repo_names & set(sel.repos)),
        not sel.labels or bool(labels & set(sel.labels)),
        not sel.digests or rec.digest in sel.digests,
        not sel.include_tags or any(fnmatchcase(t, g) for t in rec.tags for g in sel.include_tags),
    ]
    return rec.tenant == sel.tenant and all(checks)


def matches(rec: IndexedImage, key: str, usage_only: bool) -> bool:
    n = norm(key)
    field = rec.product_keys if n.purl == n.product_key else rec.purls
    target = n.product_key if n.purl == n.product_key else n.purl
    narrow = usage_only and rec.usage_known  # usage unknown: every component counts
    return any(f == target and (u or not narrow) for f, u in zip(field, rec.used, strict=True))


def expected_bitmaps(model: dict[tuple[str, str], IndexedImage], ix: ImpactIndex) -> dict:
    out: dict[bytes, set[str]] = {}
    for rec in model.values():
        for prefix, names in K.image_bitmap_names(rec).items():
            for name in names:
                out.setdefault(K.storage_key(prefix, name), set()).add(scoped_id(rec))
    return out


def scoped_id(rec: IndexedImage) -> str:
    return f"{rec.tenant}/{rec.digest}"


class IndexMachine(RuleBasedStateMachine):
    """Interleaved index / re-index / remove / restart against a dict of records."""

    def __init__(self) -> None:
        super().__init__()
        self.model: dict[tuple[str, str], IndexedImage] = {}
        self.ids: dict[tuple[str, str], int] = {}
        self.vulns: dict[str, set[str]] = {}
        self.kv = MemoryStore()
        self.kv.ensure_families(K.FAMILIES)
        self.ix = ImpactIndex()

    @initialize(bound=st.sampled_from([None, 1, 300, 4000]))
    def start(self, bound: int | None) -> None:
        if bound is not None:
            self.ix = ImpactIndex(source=self.kv, max_bytes=bound)
            self.ix.restore()

    def flush(self) -> None:
        writes: dict[str, dict[bytes, bytes | None]] = {}
        for cf, key, value in self.ix.dirty_items():
            writes.setdefault(cf, {})[key] = value
        self.kv.commit(writes)
        self.ix.clear_dirty()

    @rule(rec=images)
    def index(self, rec: IndexedImage) -> None:
        key = (rec.tenant, rec.digest)
        if key not in self.ids:
            used = set(self.ids.values())
            expected = min(set(range(len(used) + 1)) - used)  # lowest free id
        else:
            expected = self.ids[key]  # re-index keeps the id
        assert self.ix.index_image(rec) == expected
        self.model[key] = rec
        self.ids[key] = expected
        self.flush()

    @rule(recs=st.lists(images, min_size=2, max_size=8))
    def index_batch(self, recs: list[IndexedImage]) -> None:
        for rec in recs:
            self.index(rec)

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def remove_existing(self, data: st.DataObject) -> None:
        self.remove(*data.draw(st.sampled_from(sorted(self.model))))

    @rule(tenant=st.sampled_from(TENANTS), digest=st.sampled_from(DIGESTS))
    def remove(self, tenant: str, digest: str) -> None:
        assert self.ix.remove_image(tenant, digest) == ((tenant, digest) in self.model)
        self.model.pop((tenant, digest), None)
        self.ids.pop((tenant, digest), None)
        self.flush()

    @rule(vuln=st.sampled_from(["CVE-1", "CVE-2"]), keys=st.lists(st.sampled_from(QUERY_KEYS)))
    def add_vuln(self, vuln: str, keys: list[str]) -> None:
        self.ix.add_vuln_keys(vuln, keys)
        self.vulns.setdefault(vuln, set()).update(keys)
        self.flush()

    @rule(bound=st.sampled_from([None, 1, 2000]), warm=st.booleans())
    def restart(self, bound: int | None, warm: bool) -> None:
        """Come back from storage alone: resident maps restored, the rest loaded lazily
        (or warmed in small slices)."""
        self.ix = ImpactIndex(source=self.kv, max_bytes=bound)
        self.ix.restore()
        while warm and not self.ix.warm_step(2):
            pass

    @precondition(lambda self: self.ix.source is None)
    @invariant()
    def memory_matches_model(self) -> None:
        got = {k: {self.who(i) for i in bm} for k, bm in self.ix.iter_bitmaps()}
        assert got == expected_bitmaps(self.model, self.ix)

    @invariant()
    def storage_matches_model(self) -> None:
        assert not self.ix.dirty_keys()
        stored = {k: {self.who(i) for i in bm} for k, bm in logical_bitmaps(self.kv).items()}
        assert stored == expected_bitmaps(self.model, self.ix)
        assert {k for k, _ in self.kv.scan(K.NAMES_CF, K.DIGEST)} == {
            K.DIGEST + K.scoped(t, d).encode() for t, d in self.model
        }
        assert len(self.ix) == len(self.model)
        if self.ix.max_bytes is not None:
            assert self.ix.cached_bytes <= self.ix.max_bytes

    def who(self, iid: int) -> str:
        (key,) = [k for k, v in self.ids.items() if v == iid]
        return "/".join(key)

    @rule(
        sel=selectors, keys=st.lists(st.sampled_from(QUERY_KEYS), max_size=6), usage=st.booleans()
    )
    def query_purls(self, sel: Selector, keys: list[str], usage: bool) -> None:
        got = self.ix.resolve_by_purls(keys, usage_only=usage, selector=sel)
        hits = {r.digest for r in self.model.values() if in_scope(r, sel) and any(
            matches(r, k, usage) for k in keys)}  # fmt: skip
        assert set(got.digests()) == hits
        assert got.count == len(hits)
        unknown = {d for (t, d), r in self.model.items() if t == sel.tenant and not r.usage_known}
        assert got.usage_unknown == len(hits & unknown)
        mine = [r for r in self.model.values() if r.tenant == sel.tenant]
        unmatched = [k for k in keys if not any(matches(r, k, usage) for r in mine)]
        assert got.unmatched == list(dict.fromkeys(unmatched))
        in_id_order = sorted(hits, key=lambda d: self.ids[(sel.tenant, d)])
        assert got.sample(2) == in_id_order[:2]

    @rule(sel=selectors)
    def query_all(self, sel: Selector) -> None:
        got = self.ix.resolve_all(sel)
        assert set(got.digests()) == {r.digest for r in self.model.values() if in_scope(r, sel)}

    @rule(
        sel=selectors,
        vulns=st.lists(st.sampled_from(["CVE-1", "CVE-2", "CVE-9"])),
        usage=st.booleans(),
    )
    def query_vulns(self, sel: Selector, vulns: list[str], usage: bool) -> None:
        got = self.ix.resolve_by_vulns(vulns, usage_only=usage, selector=sel)
        keys = {k for v in vulns for k in self.vulns.get(v, ())}
        hits = {r.digest for r in self.model.values() if in_scope(r, sel) and any(
            matches(r, k, usage) for k in keys)}  # fmt: skip
        assert set(got.digests()) == hits
        mine = [r for r in self.model.values() if r.tenant == sel.tenant]
        unmatched = [
            v for v in vulns
            if not any(matches(r, k, usage) for r in mine for k in self.vulns.get(v, ()))
        ]  # fmt: skip
        assert got.unmatched == list(dict.fromkeys(unmatched))


IndexMachine.TestCase.settings = settings(
    max_examples=120,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TestIndexModel = IndexMachine.TestCase


class SmallChunkMachine(IndexMachine):
    """The same model with 4-id chunks: images land in chunks that finish (no new id goes
    there) and whose open state is dropped, while removals free their ids and re-indexing
    touches them again."""

    def __init__(self) -> None:
        super().__init__()
        self._saved = K.CHUNK_BITS
        K.CHUNK_BITS = 2

    def teardown(self) -> None:
        K.CHUNK_BITS = self._saved


SmallChunkMachine.TestCase.settings = IndexMachine.TestCase.settings
TestIndexModelSmallChunks = SmallChunkMachine.TestCase


# -- hand-written edges --------------------------------------------------------------------
def sel(tenant: str = "t1", **kw: list[str]) -> Selector:
    return Selector(tenant=tenant, **kw)


def test_ids_are_lowest_free_and_reused_only_after_removal() -> None:
    ix = ImpactIndex()
    assert [ix.index_image(image("t1", d, [])) for d in DIGESTS[:3]] == [0, 1, 2]
    assert ix.index_image(image("t1", DIGESTS[1], [])) == 1  # re-index keeps its id
    assert ix.index_image(image("t2", DIGESTS[1], [])) == 3  # same digest, other tenant
    assert ix.remove_image("t1", DIGESTS[1])
    assert not ix.remove_image("t1", DIGESTS[1])
    assert ix.index_image(image("t1", DIGESTS[4], [])) == 1
    ix.remove_image("t1", DIGESTS[0])
    ix.remove_image("t1", DIGESTS[2])
    assert [ix.index_image(image("t1", d, [])) for d in ("x", "y", "z")] == [0, 2, 4]


def test_reindex_leaves_nothing_stale() -> None:
    ix = ImpactIndex()
    a = image("t1", "d", [(RAW_PURLS[0], True), (RAW_PURLS[3], False)], tags=["dev"])
    b = image("t1", "d", [(RAW_PURLS[3], True)], tags=["prod-1"], labels={"team": "a"})
    ix.index_image(a)
    ix.index_image(b)
    assert {k for k, _ in ix.iter_bitmaps()} == {
        b"c:p:pkg:pypi/django",
        b"c:e:pkg:pypi/django@4.2",
        b"u:p:pkg:pypi/django",
        b"u:e:pkg:pypi/django@4.2",
        b"o:t:t1",
        b"o:g:t1\x00prod-1",
        b"o:l:t1\x00team=a",
        b"o:u:t1",
    }
    ix.index_image(image("t1", "d", [(RAW_PURLS[3], True)], known=False, tags=["prod-1"]))
    assert {k for k, _ in ix.iter_bitmaps()} == {
        b"c:p:pkg:pypi/django",
        b"c:e:pkg:pypi/django@4.2",
        b"o:t:t1",
        b"o:g:t1\x00prod-1",
    }
    assert ix.resolve_all(sel(include_tags=["dev"])).count == 0
    assert ix.remove_image("t1", "d")
    assert list(ix.iter_bitmaps()) == []


def test_selector_and_or_semantics_and_repo_spellings() -> None:
    ix = ImpactIndex()
    ix.index_image(image("t1", "a", [], namespace="web", registry="ghcr.io", repo="app"))
    ix.index_image(image("t1", "b", [], namespace="data", repo="app", labels={"env": "prod"}))
    ix.index_image(image("t1", "c", [], namespace="web", tags=["prod-7"]))
    digests = lambda s: sorted(ix.resolve_all(s).digests())  # noqa: E731
    assert digests(sel(namespaces=["web", "data"])) == ["a", "b", "c"]
    assert digests(sel(namespaces=["web"], repos=["app"])) == ["a"]
    assert digests(sel(repos=["ghcr.io/app"])) == ["a"]
    assert digests(sel(labels=["env=prod"], repos=["app", "x"])) == ["b"]
    assert digests(sel(include_tags=["prod-*"])) == ["c"]
    assert digests(sel(include_tags=["nomatch-*"])) == []
    assert digests(sel(digests=["c", "zzz"])) == ["c"]


def test_tenant_isolation_including_unmatched() -> None:
    ix = ImpactIndex()
    ix.index_image(image("t1", "shared", [(RAW_PURLS[0], True)], namespace="web"))
    ix.index_image(image("t2", "other", [(RAW_PURLS[3], True)], namespace="web"))
    r = ix.resolve_by_purls(
        ["pkg:deb/debian/openssl", "pkg:pypi/django"],
        usage_only=False,
        selector=sel("t2", digests=["shared"]),
    )
    assert r.count == 0
    r = ix.resolve_by_purls(
        ["pkg:deb/debian/openssl", "pkg:pypi/django"], usage_only=False, selector=sel("t2")
    )
    assert r.digests() == ["other"]
    assert r.unmatched == ["pkg:deb/debian/openssl"]  # t1's package is not revealed to t2
    assert ix.resolve_all(sel("t3")).count == 0


def test_keys_exact_vs_product_and_usage() -> None:
    ix = ImpactIndex()
    ix.index_image(image("t1", "a", [(RAW_PURLS[0], True), (RAW_PURLS[3], False)]))
    ix.index_image(image("t1", "b", [(RAW_PURLS[1], False)]))
    q = lambda keys, u=False: ix.resolve_by_purls(keys, usage_only=u, selector=sel())  # noqa: E731
    assert sorted(q(["pkg:deb/debian/openssl"]).digests()) == ["a", "b"]
    assert q(["pkg:deb/debian/openssl"], True).digests() == ["a"]
    assert q(["pkg:deb/debian/openssl@3.0.11-1?arch=arm64"]).digests() == ["b"]
    assert q(["pkg:deb/debian/openssl@3.0.11-1"]).unmatched == ["pkg:deb/debian/openssl@3.0.11-1"]
    assert q(["pkg:pypi/Django"], True).unmatched == ["pkg:pypi/Django"]
    assert q(["pkg:PYPI/Django@4.2"]).digests() == ["a"]  # non-canonical spelling
    with pytest.raises(PurlError):
        q(["openssl"])


def test_query_limits() -> None:
    ix = ImpactIndex()
    with pytest.raises(TooManyKeysError):
        ix.resolve_by_purls(
            ["pkg:pypi/x"] * (MAX_KEYS_PER_QUERY + 1), usage_only=False, selector=sel()
        )
    with pytest.raises(TooManyKeysError):
        ix.resolve_by_vulns(["CVE"] * (MAX_KEYS_PER_QUERY + 1), usage_only=False, selector=sel())
    with pytest.raises(TypeError):
        ix.resolve_by_purls("pkg:pypi/x", usage_only=False, selector=sel())


def test_vuln_map_folding() -> None:
    ix = ImpactIndex()
    ix.index_image(image("t1", "a", [(RAW_PURLS[0], False)]))
    ix.add_vuln_keys("CVE-1", ["pkg:DEB/debian/openssl"])
    ix.add_vuln_keys("CVE-1", ["pkg:pypi/django"])
    assert ix.vuln_keys("CVE-1") == {"pkg:deb/debian/openssl", "pkg:pypi/django"}
    r = ix.resolve_by_vulns(["CVE-1", "CVE-404"], usage_only=False, selector=sel())
    assert (r.digests(), r.unmatched) == (["a"], ["CVE-404"])
    ix.set_vuln_keys("CVE-1", [])
    assert ix.resolve_by_vulns(["CVE-1"], usage_only=False, selector=sel()).unmatched == ["CVE-1"]
    assert (K.NAMES_CF, K.VULN + b"CVE-1") in ix.dirty_keys()


def test_selectors_on_the_wire() -> None:
    s = msgspec.json.decode(b'{"tenant":"t","includeTags":["prod-*"]}', type=Selector)
    assert s.include_tags == ["prod-*"]
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(b'{"tenant":"t","include_tags":["x"]}', type=Selector)
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(b'{"namespaces":[]}', type=Selector)
    with pytest.raises(SelectorError):
        Selector(tenant="t", labels=["novalue"])
    with pytest.raises(SelectorError):
        Selector(tenant="")


class CountingStore(MemoryStore):
    """A store that counts reads: to see what a bounded index loads back."""

    def __init__(self) -> None:
        super().__init__()
        self.ensure_families(K.FAMILIES)
        self.reads = 0

    def get(self, cf: str, key: bytes) -> bytes | None:
        self.reads += 1
        return super().get(cf, key)

    def scan(self, cf: str, prefix: bytes = b"", start: bytes = b""):  # type: ignore[no-untyped-def]
        self.reads += 1
        return super().scan(cf, prefix, start)


def flush_into(ix: ImpactIndex, store: MemoryStore) -> None:
    writes: dict[str, dict[bytes, bytes | None]] = {}
    for cf, key, value in ix.dirty_items():
        writes.setdefault(cf, {})[key] = value
    store.commit(writes)
    ix.clear_dirty()


def test_bounded_store_evicts_and_reloads() -> None:
    kv = CountingStore()
    ix = ImpactIndex(source=kv, max_bytes=3000)
    for i, d in enumerate(DIGESTS):
        ix.index_image(image("t1", d, [(RAW_PURLS[i], i % 2 == 0)], tags=[f"prod-{i}"]))
        flush_into(ix, kv)
        assert ix.cached_bytes <= 3000
    assert ix.warm_progress[0] < ix.product_count()
    reads = kv.reads
    r = ix.resolve_by_purls(
        ["pkg:deb/debian/openssl"], usage_only=False, selector=sel(include_tags=["prod-*"])
    )
    assert sorted(r.digests()) == sorted(DIGESTS[:3])
    assert kv.reads > reads
    with pytest.raises(ValueError, match="source"):
        ImpactIndex(max_bytes=10)


def test_finished_chunks_are_closed_and_reopened_when_touched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Once no new id goes to a chunk, its open state (checked purls) is dropped after the
    batch; an id freed there (a removal) or an image of it re-indexed builds it again, and
    every answer stays what a fresh index of the same images gives."""
    monkeypatch.setattr(K, "CHUNK_BITS", 1)  # two ids a chunk
    kv = MemoryStore()
    kv.ensure_families(K.FAMILIES)
    ix = ImpactIndex(source=kv)
    ix.restore()
    recs = [image("t1", d, [(p, True) for p in RAW_PURLS[: 3 + i]]) for i, d in enumerate(DIGESTS)]
    for rec in recs[:5]:
        ix.index_image(rec)
        flush_into(ix, kv)
    assert set(ix._open) == {2}  # ids 4, 5 (chunk 2) take the next images
    assert ix.remove_image("t1", DIGESTS[3])  # frees id 3 (chunk 1)
    flush_into(ix, kv)
    assert not ix._open  # the lowest free id is in chunk 1 now: chunk 2's state dropped
    ix.index_image(recs[5])  # takes id 3, in chunk 1 again
    ix.index_image(image("t1", DIGESTS[1], [(RAW_PURLS[7], False)]))  # re-index, chunk 0
    assert set(ix._open) == {0, 1}
    flush_into(ix, kv)
    assert not ix._open  # the next id (6) is in chunk 3
    model = {r.digest: r for r in recs if r.digest != DIGESTS[3]}
    model[DIGESTS[1]] = image("t1", DIGESTS[1], [(RAW_PURLS[7], False)])
    fresh = ImpactIndex()
    for r in model.values():
        fresh.index_image(r)
    for ix2 in (ix, restored(kv)):
        for key in QUERY_KEYS:
            got = ix2.resolve_by_purls([key], usage_only=True, selector=sel())
            want = fresh.resolve_by_purls([key], usage_only=True, selector=sel())
            assert sorted(got.digests()) == sorted(want.digests()), key
    by_digest = lambda x: {k: set(map(x._digest_of, bm)) for k, bm in x.iter_bitmaps()}  # noqa: E731
    assert by_digest(ix) == by_digest(fresh)


def restored(kv: MemoryStore) -> ImpactIndex:
    ix = ImpactIndex(source=kv)
    ix.restore()
    return ix


def test_restart_answers_from_the_store_then_warms() -> None:
    kv = CountingStore()
    ix = ImpactIndex(source=kv)
    ix.index_image(image("t1", "a", [(RAW_PURLS[0], True), (RAW_PURLS[3], False)]))
    ix.index_image(image("t1", "b", [(RAW_PURLS[1], False)], namespace="web"))
    flush_into(ix, kv)
    cold = ImpactIndex(source=kv)
    cold.restore()
    assert cold.warm_progress == (0, 2)
    r = cold.resolve_by_purls(["pkg:deb/debian/openssl"], usage_only=True, selector=sel())
    assert r.digests() == ["a"]
    assert cold.resolve_all(sel(namespaces=["web"])).digests() == ["b"]
    while not cold.warm_step(1):
        pass
    assert cold.warm_progress == (2, 2)
    assert cold.image("t1", "a") == ix.image("t1", "a")


@pytest.mark.parametrize("n", [0, 1, 255, 256, 257, 800, 3000])
def test_union_within_equals_plain_union(n: int) -> None:
    rnd = random.Random(n)
    bms = [BitMap(rnd.sample(range(600), rnd.choice([1, 3, 40]))) for _ in range(n)]
    everything = BitMap.union(*bms) if n > 1 else BitMap(bms[0] if bms else [])
    for mask in (BitMap(), BitMap(range(600)), BitMap(range(0, 600, 7)), BitMap([599, 10_000])):
        assert _union_within(bms, mask.copy()) == everything & mask


def test_usage_unknown_is_not_unused() -> None:
    """Usage narrows only images that have usage data; the others count as using every
    component, also for ``unmatched`` and the vuln path, and are counted."""
    ix = ImpactIndex()
    openssl, django = RAW_PURLS[0], RAW_PURLS[3]
    ix.index_image(image("t1", "known", [(openssl, True), (django, False)]))
    ix.index_image(image("t1", "unknown", [(openssl, False), (django, False)], known=False))
    ix.index_image(image("t1", "uses-nothing", [(django, False)]))  # known: nothing used
    ix.index_image(image("t2", "other", [(django, False)], known=False))
    ix.add_vuln_keys("CVE-D", ["pkg:pypi/django"])

    r = ix.resolve_by_purls(["pkg:pypi/django", "pkg:npm/none"], usage_only=True, selector=sel())
    assert r.digests() == ["unknown"] and r.usage_unknown == 1
    assert r.unmatched == ["pkg:npm/none"]
    r = ix.resolve_by_purls(["pkg:deb/debian/openssl"], usage_only=True, selector=sel())
    assert sorted(r.digests()) == ["known", "unknown"] and r.usage_unknown == 1
    r = ix.resolve_by_purls(["pkg:pypi/django"], usage_only=False, selector=sel())
    assert r.count == 3 and r.usage_unknown == 1
    assert ix.resolve_by_vulns(["CVE-D"], usage_only=True, selector=sel()).digests() == ["unknown"]
    assert ix.resolve_all(sel()).usage_unknown == 1

    # a tenant with no usage data at all: usage_only changes nothing
    t2 = Selector(tenant="t2")
    r = ix.resolve_by_purls(["pkg:pypi/django"], usage_only=True, selector=t2)
    assert r.digests() == ["other"] and r.usage_unknown == 1 and r.unmatched == []
    # the tenant's only unknown image gets usage data: it is narrowed like the others
    ix.index_image(image("t1", "unknown", [(openssl, False), (django, False)]))
    r = ix.resolve_by_purls(["pkg:pypi/django"], usage_only=True, selector=sel())
    assert r.count == 0 and r.unmatched == ["pkg:pypi/django"] and r.usage_unknown == 0
