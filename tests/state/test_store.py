"""One contract suite for both store backends, plus what only RocksDB has to do."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

from streamproc.config import ConfigError, Configuration
from streamproc.configfile.loader import environ
from streamproc.state import store as store_module
from streamproc.state.digest import state_digest
from streamproc.state.keys import META_CF, POINT_READ_FAMILIES
from streamproc.state.settings import sizes_from
from streamproc.state.store import MemoryStore, RocksStore, StateLocked, Store

KEYS = [b"a", b"a\x00", b"a/1", b"a/2", b"a/10", b"ab", b"b", b"b/1", b"\xff", b"\xff\xff"]


@pytest.fixture(params=["memory", "rocks"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s: Store = MemoryStore() if request.param == "memory" else RocksStore(tmp_path / "state")
    s.ensure_families(["t", "u"])
    yield s
    s.close()


def fill(s: Store, cf: str = "t") -> None:
    s.commit({cf: {k: b"v:" + k for k in KEYS}})


# ---------------------------------------------------------------- contract (both backends)


def test_meta_family_always_exists(store):
    assert META_CF in store.families()
    assert store.families() == sorted(store.families())
    assert {"t", "u"} <= set(store.families())


def test_get_commit_delete(store):
    assert store.get("t", b"k") is None
    store.commit({"t": {b"k": b"v1"}})
    assert store.get("t", b"k") == b"v1"
    store.commit({"t": {b"k": b"v2"}})
    assert store.get("t", b"k") == b"v2"
    store.commit({"t": {b"k": None}})
    assert store.get("t", b"k") is None
    store.commit({"t": {b"never-there": None}})  # deleting a missing key is fine
    assert list(store.scan("t")) == []


def test_empty_value_is_not_a_missing_value(store):
    store.commit({"t": {b"empty": b""}})
    assert store.get("t", b"empty") == b""
    assert list(store.scan("t")) == [(b"empty", b"")]


def test_binary_keys_and_values(store):
    items = {bytes([i, 0, 255 - i]): bytes(range(i)) for i in range(0, 256, 17)}
    store.commit({"t": items})
    for k, v in items.items():
        assert store.get("t", k) == v
    assert list(store.scan("t")) == sorted(items.items())


def test_families_are_separate(store):
    store.commit({"t": {b"k": b"in-t"}, "u": {b"k": b"in-u"}})
    assert store.get("t", b"k") == b"in-t"
    assert store.get("u", b"k") == b"in-u"
    assert store.get(META_CF, b"k") is None


def test_get_many_in_order_with_missing_and_empty(store):
    fill(store)
    store.commit({"t": {b"empty": b""}, "u": {b"a": b"in-u"}})
    want = [b"\xff", b"nope", b"a", b"empty", b"a", b"b/1"]
    assert store.get_many("t", want) == [store.get("t", k) for k in want]
    assert store.get_many("t", want) == [b"v:\xff", None, b"v:a", b"", b"v:a", b"v:b/1"]
    assert store.get_many("t", []) == []
    assert store.get_many("t", (k for k in [b"a"])) == [b"v:a"]  # any iterable of keys
    assert store.get_many("u", [b"a", b"b"]) == [b"in-u", None]  # families stay separate
    store.commit({"t": {b"a": None}})
    assert store.get_many("t", [b"a", b"ab"]) == [None, b"v:ab"]  # sees deletes


def test_commit_mixing_puts_and_deletes(store):
    fill(store)
    store.commit({"t": {b"a": None, b"new": b"1", b"b": None}, "u": {b"x": b"2"}})
    assert store.get_many("t", [b"a", b"new", b"b", b"ab"]) == [None, b"1", None, b"v:ab"]
    assert store.get("u", b"x") == b"2"


def test_scan_all_in_key_order(store):
    fill(store)
    assert [k for k, _ in store.scan("t")] == sorted(KEYS)
    assert all(v == b"v:" + k for k, v in store.scan("t"))


@pytest.mark.parametrize(
    ("prefix", "start", "want"),
    [
        (b"a/", b"", [b"a/1", b"a/10", b"a/2"]),
        (b"a", b"", [b"a", b"a\x00", b"a/1", b"a/10", b"a/2", b"ab"]),
        (b"b", b"", [b"b", b"b/1"]),
        (b"c", b"", []),
        (b"\xff", b"", [b"\xff", b"\xff\xff"]),
        (b"", b"b", [b"b", b"b/1", b"\xff", b"\xff\xff"]),
        (b"", b"a/2", [b"a/2", b"ab", b"b", b"b/1", b"\xff", b"\xff\xff"]),
        (b"a/", b"a/10", [b"a/10", b"a/2"]),
        (b"a/", b"a/11", [b"a/2"]),
        (b"a/", b"a", [b"a/1", b"a/10", b"a/2"]),  # start before the prefix: from the prefix
        (b"a/", b"b", []),  # start after the prefix range
        (b"", b"\xff\xff\xff", []),
    ],
)
def test_scan_prefix_and_start(store, prefix, start, want):
    fill(store)
    fill(store, "u")  # another family must not leak in
    store.commit({"u": {b"a/0": b"x"}})
    got = list(store.scan("t", prefix, start))
    assert [k for k, _ in got] == want
    assert all(v == b"v:" + k for k, v in got)


def test_scan_empty_family(store):
    assert list(store.scan("u")) == []
    assert list(store.scan("u", b"a")) == []


def test_multi_family_commit_applies_together(store):
    store.commit({"t": {b"x": b"1"}, "u": {b"y": b"2"}, META_CF: {b"checkpoint": b"7"}})
    assert store.get("t", b"x") == b"1"
    assert store.get("u", b"y") == b"2"
    assert store.get(META_CF, b"checkpoint") == b"7"
    store.commit({"t": {b"x": None, b"z": b"3"}, "u": {b"y": b"4"}})
    assert store.get("t", b"x") is None
    assert store.get("t", b"z") == b"3"
    assert store.get("u", b"y") == b"4"


def test_unknown_family_refused_and_nothing_written(store):
    store.commit({"t": {b"keep": b"old"}})
    with pytest.raises(KeyError):
        store.commit({"t": {b"keep": b"new", b"add": b"x"}, "nope": {b"k": b"v"}})
    assert store.get("t", b"keep") == b"old"
    assert store.get("t", b"add") is None
    assert "nope" not in store.families()
    with pytest.raises(KeyError):
        store.get("nope", b"k")
    with pytest.raises(KeyError):
        list(store.scan("nope"))


def test_ensure_families_idempotent(store):
    store.commit({"t": {b"k": b"v"}})
    before = store.families()
    store.ensure_families(["t", "u", META_CF])
    store.ensure_families(["t"])
    assert store.families() == before
    assert store.get("t", b"k") == b"v"
    store.ensure_families(["v", "v", "w"])
    assert store.families() == sorted({*before, "v", "w"})
    store.commit({"v": {b"k": b"new"}})
    assert store.get("v", b"k") == b"new"


def test_digest_reflects_content(store):
    empty = state_digest(store)
    fill(store)
    filled = state_digest(store)
    assert filled != empty
    assert state_digest(store) == filled  # stable
    store.commit({"t": {b"a": b"changed"}})
    assert state_digest(store) != filled
    store.commit({"t": {b"a": b"v:a"}})
    assert state_digest(store) == filled


# ---------------------------------------------------------------- RocksStore only


def test_rocks_data_and_families_survive_reopen(tmp_path):
    path = tmp_path / "state"
    s = RocksStore(path)
    s.ensure_families(["t", "u"])
    fill(s)
    s.commit({"u": {b"x": b"y"}, META_CF: {b"checkpoint": b"c"}})
    digest = state_digest(s)
    s.close()
    s.close()  # closing twice is harmless

    again = RocksStore(path)
    try:
        assert set(again.families()) == {META_CF, "t", "u"}
        assert [k for k, _ in again.scan("t")] == sorted(KEYS)
        assert again.get("u", b"x") == b"y"
        assert again.get(META_CF, b"checkpoint") == b"c"
        assert state_digest(again) == digest
    finally:
        again.close()


def test_rocks_second_open_is_locked(tmp_path):
    path = tmp_path / "state"
    first = RocksStore(path)
    try:
        with pytest.raises(StateLocked, match="in use"):
            RocksStore(path)
        first.commit({META_CF: {b"k": b"v"}})  # the first store still works
        assert first.get(META_CF, b"k") == b"v"
    finally:
        first.close()
    # released on close
    second = RocksStore(path)
    try:
        assert second.get(META_CF, b"k") == b"v"
    finally:
        second.close()


POINT = sorted(POINT_READ_FAMILIES)[0]
VALUES = {b"k%05d" % i: b"abc" * 50 for i in range(2000)}  # compressible on purpose


def _tables(s: RocksStore, cf: str) -> dict[str, int]:
    """Sizes from RocksDB's aggregated table properties of one family's files."""
    raw = s._cfs[cf].property_value("rocksdb.aggregated-table-properties")
    pairs = (item.split("=", 1) for item in raw.split("; ") if "=" in item)
    return {k: int(v) for k, v in pairs if v.isdigit()}


def test_rocks_point_read_families_are_uncompressed_and_every_family_has_bloom_filters(tmp_path):
    path = tmp_path / "state"
    s = RocksStore(path)
    s.ensure_families([POINT, "t"])
    s.commit({POINT: VALUES, "t": VALUES})
    s.close()
    s = RocksStore(path)  # reopening writes the recovered log into table files
    try:
        point, other = _tables(s, POINT), _tables(s, "t")
        assert point["# entries"] == other["# entries"] == len(VALUES)
        assert point["data block size"] >= 300_000  # 2,000 values of 150 bytes, as they are
        assert other["data block size"] < 100_000  # the default family options compress
        assert point["filter block size"] > 0
        assert other["filter block size"] > 0  # a miss reads no data block of the file
        assert s.get_many(POINT, list(VALUES)) == list(VALUES.values())
    finally:
        s.close()


def test_rocks_opens_a_point_read_family_written_with_the_default_options(tmp_path):
    """A state directory from before the point-read options (compressed blocks, no filters)
    opens and reads as it did; new table files get the new options."""
    path = tmp_path / "state"
    plain = Options(raw_mode=True)
    plain.create_if_missing(True)
    plain.create_missing_column_families(True)
    families = {META_CF: Options(raw_mode=True), POINT: Options(raw_mode=True)}
    db = Rdict(str(path), plain, column_families=families)
    cf = db.get_column_family(POINT)
    for k, v in VALUES.items():
        cf[k] = v
    cf.flush()
    del cf  # a family's handle keeps the database open
    db.close()

    s = RocksStore(path)
    try:
        before = _tables(s, POINT)
        assert before["data block size"] < 100_000
        assert before["filter block size"] == 0
        assert s.get_many(POINT, list(VALUES)) == list(VALUES.values())
        s.commit({POINT: {b"k00007": b"new", b"z": b"added"}})
        assert s.get(POINT, b"k00007") == b"new"
    finally:
        s.close()
    view = RocksStore(path, read_only=True)
    try:
        assert view.get(POINT, b"z") == b"added"
        assert [k for k, _ in view.scan(POINT)] == sorted([*VALUES, b"z"])
    finally:
        view.close()


def _populate(s: Store, extra: bytes = b"") -> None:
    s.ensure_families(["activity", "other"])
    s.commit(
        {
            "activity": {b"acme": b'{"events":3}' + extra, b"beta": b""},
            "other": {bytes([i]): bytes([i]) * i for i in range(20)},
            META_CF: {b"checkpoint": b"cp"},
        }
    )


def test_digest_equal_across_backends_for_equal_content(tmp_path):
    mem = MemoryStore()
    rocks = RocksStore(tmp_path / "state")
    try:
        assert state_digest(mem) == state_digest(rocks)
        _populate(mem)
        _populate(rocks)
        assert state_digest(mem) == state_digest(rocks)
        # the same content reached by a different history
        rocks.commit({"other": {b"tmp": b"x"}})
        rocks.commit({"other": {b"tmp": None}})
        assert state_digest(mem) == state_digest(rocks)
    finally:
        rocks.close()


@pytest.mark.parametrize(
    "change",
    [
        {"activity": {b"acme": b'{"events":4}'}},  # a value
        {"activity": {b"beta": None}},  # a key removed
        {"other": {b"\x00\x00": b""}},  # a key added
        {META_CF: {b"checkpoint": b"cq"}},  # the checkpoint
    ],
)
def test_digest_differs_across_backends_for_different_content(tmp_path, change):
    mem = MemoryStore()
    rocks = RocksStore(tmp_path / "state")
    try:
        _populate(mem)
        _populate(rocks)
        rocks.commit(change)
        assert state_digest(mem) != state_digest(rocks)
    finally:
        rocks.close()


def test_digest_differs_by_family_layout(tmp_path):
    """Same items under a different family, or an extra empty family, are different states."""
    a, b, c = MemoryStore(), MemoryStore(), MemoryStore()
    a.ensure_families(["x", "y"])
    b.ensure_families(["x", "y"])
    c.ensure_families(["x", "y", "z"])
    a.commit({"x": {b"k": b"v"}})
    b.commit({"y": {b"k": b"v"}})
    c.commit({"x": {b"k": b"v"}})
    assert len({state_digest(a), state_digest(b), state_digest(c)}) == 3
    # and key/value boundaries are unambiguous
    d, e = MemoryStore(), MemoryStore()
    d.ensure_families(["x"])
    e.ensure_families(["x"])
    d.commit({"x": {b"ab": b"c"}})
    e.commit({"x": {b"a": b"bc"}})
    assert state_digest(d) != state_digest(e)


def _memtables(s: RocksStore) -> int:
    return sum(
        cf.property_int_value("rocksdb.cur-size-all-mem-tables") or 0 for cf in s._cfs.values()
    )


@pytest.mark.parametrize("bound_mb", [4, 0])
def test_rocks_bounds_the_memtables_of_all_families_together(tmp_path, monkeypatch, bound_mb):
    """``STREAMPROC_WRITE_BUFFER_MB`` bounds the memtables of every family of a store
    together (RocksDB's own default, 0, keeps up to 64 MB per family): 32 MB written across
    two families stays within a small multiple of a 4 MB bound, and all of it is readable."""
    monkeypatch.setenv("STREAMPROC_WRITE_BUFFER_MB", str(bound_mb))
    s = RocksStore(
        tmp_path / "state", sizes=Configuration(values=environ()).built(sizes_from)
    )  # as a role opens its store
    try:
        s.ensure_families(["t", "u"])
        rnd = random.Random(3)
        peak = 0
        for b in range(32):
            value = rnd.randbytes(16_384)
            s.commit({("t", "u")[b % 2]: {b"%02d/%03d" % (b, k): value for k in range(64)}})
            peak = max(peak, _memtables(s))
        if bound_mb:
            assert peak <= 3 * (bound_mb << 20), peak
        else:
            assert peak >= 30 << 20, peak  # nothing flushed: the bound is what flushes
        assert s.get("u", b"31/063") is not None and s.get("t", b"00/000") is not None
    finally:
        s.close()


@pytest.mark.parametrize(
    ("raw", "reason"),
    [("64MB", "expected an integer, got '64MB'"), ("-1", "-1 is below the minimum 0")],
)
def test_a_bad_write_buffer_bound_is_a_config_error_naming_the_variable(raw, reason):
    with pytest.raises(ConfigError, match=rf"\(STREAMPROC_WRITE_BUFFER_MB\): {reason}"):
        Configuration(values={"STREAMPROC_WRITE_BUFFER_MB": raw}).built(sizes_from)
    assert Configuration().built(sizes_from).write_buffer_bytes == 8 << 20
    assert Configuration(values={"X": "1"}).built(sizes_from).write_buffer_bytes == 8 << 20


def test_rocks_keeps_table_files_in_one_bounded_cache(tmp_path, monkeypatch):
    """Every family of every store in the process shares one block cache of
    ``STREAMPROC_BLOCK_CACHE_MB``, their index and filter blocks included: reading two
    stores' table files through keeps the cache within its bound, and nothing of the files
    outside it. (RocksDB's own default: an 8 MB cache per family, and index and filter
    blocks outside any cache, growing with the data.)"""
    monkeypatch.setattr(store_module, "_block_caches", {})  # a cache of this test's own
    monkeypatch.setenv("STREAMPROC_BLOCK_CACHE_MB", "1")
    monkeypatch.setenv("STREAMPROC_WRITE_BUFFER_MB", "1")  # many small table files
    rnd = random.Random(5)
    sizes = Configuration(values=environ()).built(
        sizes_from
    )  # as a role reads them to open its stores
    stores = [RocksStore(tmp_path / f"s{i}", sizes=sizes) for i in range(2)]
    try:
        for s in stores:
            s.ensure_families(["t", "u"])
            for b in range(24):
                s.commit({("t", "u")[b % 2]: {b"%02d/%04d" % (b, k): rnd.randbytes(300)
                                              for k in range(1000)}})  # fmt: skip
        for s in stores:
            for b in rnd.sample(range(24), 24):
                for k in rnd.sample(range(1000), 200):
                    assert s.get(("t", "u")[b % 2], b"%02d/%04d" % (b, k)) is not None
                assert s.get("t", b"%02d/absent" % b) is None
        cache = store_module.block_cache(1 << 20)
        assert all(s.block_cache is cache for s in stores)
        assert 0 < cache.get_usage() <= 1 << 20, cache.get_usage()
        families = [cf for s in stores for cf in s._cfs.values()]
        for cf in families:  # one cache for all
            assert cf.property_int_value("rocksdb.block-cache-capacity") == 1 << 20
        outside = sum(cf.property_int_value("rocksdb.estimate-table-readers-mem") or 0
                      for cf in families)  # fmt: skip
        assert outside < 64 << 10, outside
    finally:
        for s in stores:
            s.close()
