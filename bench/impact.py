"""ImpactIndex benchmark: a generated 50,000-image / 1,000,000-purl catalog, then one four
times larger (200,000 images / 4,000,000 purls, the same 400 purls per image) in the same run.

Phases (each timed on its own; generation and SQLite loading are never counted as ingest):

1. Ingest: ``image.indexed`` events, encoded as on the wire, folded through the real
   ``Folder`` and ``ImpactProjection`` at their default settings (decode, fold, flush, one
   RocksDB WriteBatch with the checkpoint per batch, the batches cut as the projector cuts
   them: up to ``projector.batch`` events, fewer while a batch takes longer than
   ``projector.batch_max_s``; the default cache bound) into a RocksDB state directory.
   NATS is left out on purpose (the fold is what is measured; the pull loop does ~100k
   msgs/s). A producer process generates the events and loads SQLite meanwhile (on the
   other core), so only ``Folder.apply`` is timed: wall clock, and the folding process's
   CPU time. A thread samples the folding process's RSS every 10 ms over the whole ingest
   (``ingest_peak_rss_mb``).
2. A fresh process opens the state directory and resolves 10,000 changed product keys:
   cold (the first query after opening; repeated over several reopenings), then hot after
   warming (p95 over many key sets), next to a bare pyroaring union of the very bitmaps the
   index unions, and reports its RSS.
3. The same queries against SQLite with an indexed (key, image) table.
4. The ingest baseline, in its own process: the same events decoded by the same decoder
   into a plain in-memory dict of sets (purl and product key -> image numbers, contains and
   used), timed and RSS-sampled the same way.
5. The larger catalog (``--scale``, default 200,000 images): phase 1 again in its own
   process (rate, peak and steady RSS, the longest batch against the median one: a merge
   that stalls the fold shows there), then its cold queries as in phase 2. Its rate is
   compared with the first catalog's (``ingest_rate_200k_vs_50k``).

Usage: ``python bench/impact.py [--images N] [--purls N] [--scale N] [--batch N] [--dir
DIR]``; prints a table, then one line of JSON. ``--scale 0`` skips phase 5. ``--dir DIR
--query-only`` runs phase 2 alone (in a fresh process, as above) on the state an earlier
run left in ``DIR`` (the same ``--images`` and ``--purls``), and prints its figures as one
line of JSON: what a change to the query path needs, without a new ingest.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from multiprocessing.connection import Connection
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from streamproc.events.envelope import encode, new_event
from streamproc.events.payloads import Component, ImageIndexed

TENANTS = 8
PER_IMAGE = 400
SWEEP = 20
"""Per image, purls ``i*20 .. i*20+19`` (mod the purl count): every purl is used at least
once, so the catalog really holds the requested number of distinct purls."""
KEYS = 10_000
HOT_RUNS = 40
COLD_RUNS = 5
SQLITE_RUNS = 3


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class PeakRss:
    """Samples this process's RSS every 10 ms in a thread, from ``start`` to ``stop``."""

    def __init__(self) -> None:
        self.peak = 0.0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._done.wait(0.01):
            self.peak = max(self.peak, rss_mb())

    def start(self) -> PeakRss:
        self.peak = rss_mb()
        self._thread.start()
        return self

    def stop(self) -> float:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mb())
        return self.peak


def default_batch() -> int:
    """The projector's batch at default settings (``STREAMPROC_BATCH`` unset)."""
    from streamproc.config import Settings

    return Settings().batch


def p95(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(0.95 * (len(s) - 1)))]


class Catalog:
    """Zipf-like popularity: ranks drawn log-uniformly (P(r) ~ 1/r), so a few dozen purls
    are in every image and most are in one or two. Purl ``r`` is version ``r // P`` of
    product ``r % P``: popular products have one very common version and rarer ones."""

    def __init__(self, images: int, purls: int, seed: int = 20261130) -> None:
        self.images = images
        self.purls = purls
        self.products = max(1, purls // 4)
        self.rnd = random.Random(seed)
        self._names: dict[int, tuple[str, str]] = {}

    def purl(self, r: int) -> tuple[str, str]:
        got = self._names.get(r)
        if got is None:
            j, v = r % self.products, r // self.products
            kind = j % 10
            if kind < 4:
                pk = f"pkg:deb/debian/lib{j}"
                p = f"{pk}@{v}.{j % 7}.{j % 13}-1?arch=amd64"
            elif kind < 6:
                pk = f"pkg:npm/node-{j}"
                p = f"{pk}@{v}.0.{j % 9}"
            elif kind < 8:
                pk = f"pkg:pypi/py-{j}"
                p = f"{pk}@{v}.{j % 5}.0"
            elif kind < 9:
                pk = f"pkg:maven/org.example{j % 100}/artifact-{j}"
                p = f"{pk}@{v}.{j % 4}"
            else:
                pk = f"pkg:golang/github.com/org{j % 50}/mod-{j}"
                p = f"{pk}@v{v}.{j % 3}.0"
            got = self._names[r] = (p, pk)
        return got

    def ranks(self, i: int) -> list[int]:
        base = i * SWEEP % self.purls
        s = {(base + k) % self.purls for k in range(SWEEP)}
        rr, n = self.rnd.random, self.purls
        while len(s) < PER_IMAGE:
            s.add(int(n ** rr()) - 1)
        return sorted(s)

    def image(self, i: int) -> tuple[str, ImageIndexed]:
        comps = []
        for r in self.ranks(i):
            p, pk = self.purl(r)
            comps.append(Component(purl=p, product_key=pk, used=(r * 2654435761 + i) % 4 == 0))
        payload = ImageIndexed(
            digest="sha256:" + hashlib.sha256(b"img%d" % i).hexdigest(),
            registry="registry.example.com",
            repository=f"team-{i % 40}/app-{i % 2000}",
            namespace=f"ns-{i % 200}",
            tags=[f"v{i % 50}", "prod-1" if i % 3 == 0 else "dev"],
            labels={"team": f"t{i % 20}", "env": "prod" if i % 2 else "dev"},
            components=comps,
        )
        return f"tenant-{i % TENANTS}", payload

    def query_keys(self, seed: int) -> list[str]:
        rnd = random.Random(seed)
        return [self.purl(j)[1] for j in rnd.sample(range(self.products), min(KEYS, self.products))]


# -- phase 1: ingest ------------------------------------------------------------------------
def batches(images: int, size: int) -> list[tuple[int, int]]:
    return [(lo, min(images, lo + size)) for lo in range(0, images, size)]


def producer(conn: Connection, images: int, purls: int, batch: int, db_path: str | None) -> None:
    """Generate and encode the events (sent to the folding process batch by batch), and
    load the same catalog into SQLite meanwhile (unless ``db_path`` is None): neither is
    part of the ingest timing."""
    import msgspec

    cat = Catalog(images, purls)
    if db_path is None:
        for lo, hi in batches(images, batch):
            msgs = []
            for n in range(lo, hi):
                tenant, payload = cat.image(n)
                ts = f"{1_700_000_000_000 + n}:0:b"
                msgs.append(encode(new_event("image.indexed", tenant, payload, ts)))
            conn.send_bytes(msgspec.msgpack.encode(msgs))
        conn.send_bytes(msgspec.msgpack.encode([len(cat._names), 0.0]))
        conn.close()
        return
    db = sqlite3.connect(db_path)
    for pragma in ("journal_mode=OFF", "synchronous=OFF", "cache_size=-262144"):
        db.execute(f"PRAGMA {pragma}")
    db.execute("CREATE TABLE pi (key TEXT NOT NULL, image INTEGER NOT NULL)")
    db.execute("CREATE TABLE img (image INTEGER PRIMARY KEY, tenant TEXT NOT NULL)")
    for lo, hi in batches(images, batch):
        msgs, rows, imgs = [], [], []
        for n in range(lo, hi):
            tenant, payload = cat.image(n)
            event = new_event("image.indexed", tenant, payload, f"{1_700_000_000_000 + n}:0:b")
            msgs.append(encode(event))
            rows.extend((pk, n) for pk in {c.product_key for c in payload.components})
            imgs.append((n, tenant))
        conn.send_bytes(msgspec.msgpack.encode(msgs))
        db.executemany("INSERT INTO pi VALUES (?, ?)", rows)
        db.executemany("INSERT INTO img VALUES (?, ?)", imgs)
    t = time.perf_counter()
    db.execute("CREATE INDEX pi_key ON pi (key, image)")
    db.commit()
    build = time.perf_counter() - t
    db.close()
    conn.send_bytes(msgspec.msgpack.encode([len(cat._names), build]))
    conn.close()


def ingest(
    images: int, purls: int, batch: int, state: Path, db_path: Path | None
) -> dict[str, float]:
    import multiprocessing as mp

    import msgspec

    from streamproc.configfile.loader import environment_only
    from streamproc.impact.settings import configured_projection
    from streamproc.runtime.batching import BatchSizer, batch_time_from
    from streamproc.runtime.projection import Folder
    from streamproc.state.keys import Checkpoint
    from streamproc.state.store import RocksStore

    parent, child = mp.Pipe(duplex=False)
    proc = mp.get_context("fork").Process(
        target=producer,
        args=(child, images, purls, batch, None if db_path is None else str(db_path)),
        daemon=True,
    )
    proc.start()
    sampler = PeakRss().start()
    store = RocksStore(state)
    # As the planner hosts it: the settings of this process's environment, read once, and
    # the projector's batches: up to ``batch`` events, fewer while a batch takes longer
    # than ``projector.batch_max_s`` (streamproc/runtime/batching.py).
    conf = environment_only()
    proj = configured_projection(conf)
    folder = Folder(store, [proj], "impact")
    sizer = BatchSizer(batch, conf.built(batch_time_from))
    wall = cpu = 0.0
    seq = 0
    times: list[float] = []
    sizes: list[int] = []
    buffered: deque[bytes] = deque()
    received = 0
    reported = 0
    while seq < images:
        while received < images and len(buffered) < sizer.size:
            events = msgspec.msgpack.decode(parent.recv_bytes(), type=list[bytes])
            buffered.extend(events)
            received += len(events)
            del events
        n = min(sizer.size, len(buffered))
        msgs = [(seq + k + 1, "scheduler.events.image", buffered.popleft()) for k in range(n)]
        seq += n
        t, c = time.perf_counter(), time.process_time()
        folder.apply(msgs, Checkpoint("SCHEDULER", "bench", seq))
        dt, dc = time.perf_counter() - t, time.process_time() - c
        sizer.observe(n, dt)
        wall += dt
        cpu += dc
        times.append(dt)
        sizes.append(n)
        if seq - reported >= 5000 or seq == images:
            reported = seq
            print(
                f"  ingested {seq:,} images ({n / dt:,.0f}/s at batch {n:,}), "
                f"RSS {rss_mb():,.0f} MB (peak {sampler.peak:,.0f})",
                file=sys.stderr,
                flush=True,
            )
    # What the batches left to merge, merged as the projector does while no event waits
    # (one flush without events at a time): part of the ingest's time.
    t, c = time.perf_counter(), time.process_time()
    tidies = 0
    while folder.has_deferred():
        folder.tidy()
        tidies += 1
    drain = time.perf_counter() - t
    wall += drain
    cpu += time.process_time() - c
    peak = sampler.stop()
    steady = rss_mb()
    distinct, build = msgspec.msgpack.decode(parent.recv_bytes())
    proc.join()
    store.close()
    full = sorted(times[:-1] if len(times) > 1 else times)  # the last batch may be short
    return {
        "ingest_images_per_s": images / wall,
        "ingest_images_per_cpu_s": images / cpu,
        "ingest_batch": batch,
        "ingest_batch_median_events": sorted(sizes)[len(sizes) // 2],
        "ingest_peak_rss_mb": peak,
        "ingest_rss_mb": steady,
        "ingest_batch_median_s": full[len(full) // 2],
        "ingest_batch_max_s": full[-1],
        "ingest_drain_s": drain,
        "ingest_drain_flushes": tidies,
        "cache_bound_mb": (proj.max_bytes or 0) / 2**20,
        "distinct_purls": distinct,
        "sqlite_index_build_s": build,
    }


def baseline(images: int, purls: int, batch: int) -> dict[str, float]:
    """The same events, decoded by the same decoder, into a plain dict of sets: what the
    simplest in-memory index costs (no persistence, no bitmaps, no checkpoint)."""
    from streamproc.events.envelope import decode

    cat = Catalog(images, purls)
    contains: dict[str, set[int]] = {}
    used: dict[str, set[int]] = {}
    sampler = PeakRss().start()
    wall = 0.0
    for lo, hi in batches(images, batch):
        msgs = []
        for n in range(lo, hi):
            tenant, payload = cat.image(n)
            msgs.append(encode(new_event("image.indexed", tenant, payload, f"{n}:0:b")))
        t = time.perf_counter()
        for n, data in enumerate(msgs, lo):
            for c in decode(data).payload.components:
                contains.setdefault(c.purl, set()).add(n)
                contains.setdefault(c.product_key, set()).add(n)
                if c.used:
                    used.setdefault(c.purl, set()).add(n)
                    used.setdefault(c.product_key, set()).add(n)
        wall += time.perf_counter() - t
    return {"baseline_images_per_s": images / wall, "baseline_peak_rss_mb": sampler.stop()}


# -- phase 2: queries in a fresh process ------------------------------------------------------
def reader(state: Path, images: int, purls: int, cold_only: bool = False) -> dict[str, float]:
    from pyroaring import BitMap

    from streamproc.impact.projection import ImpactProjection
    from streamproc.impact.selector import Selector
    from streamproc.state.store import RocksStore

    cat = Catalog(images, purls)
    sel = Selector(tenant="tenant-3")
    out: dict[str, float] = {"rss_start_mb": rss_mb()}
    cold, cold_cpu, opens = [], [], []
    for run in range(COLD_RUNS):
        keys = cat.query_keys(1000 + run)
        t = time.perf_counter()
        store = RocksStore(state)
        proj = ImpactProjection(warm_on_start=False)
        proj.open(store)
        t1, c1 = time.perf_counter(), time.thread_time()
        r = proj.index.resolve_by_purls(keys, False, sel)
        _ = r.count
        cold_cpu.append((time.thread_time() - c1) * 1000)
        cold.append((time.perf_counter() - t1) * 1000)
        opens.append((t1 - t) * 1000)
        store.close()
    out["resolve_10k_p95_ms_cold"] = p95(cold)
    out["resolve_10k_p95_cpu_ms_cold"] = p95(cold_cpu)  # the query thread's CPU time
    out["resolve_10k_median_cpu_ms_cold"] = sorted(cold_cpu)[len(cold_cpu) // 2]
    out["open_ms"] = p95(opens)
    if cold_only:
        out["rss_mb"] = rss_mb()
        return out

    store = RocksStore(state)
    proj = ImpactProjection(warm_on_start=False)
    proj.open(store)
    t = time.perf_counter()
    proj.warm_now()
    out["warm_s"] = time.perf_counter() - t
    ix = proj.index
    out["warm_resident_groups"], out["known_groups"] = ix.warm_progress
    out["cached_mb"] = ix.cached_bytes / 2**20
    hot, bare, counts = [], [], []
    for run in range(HOT_RUNS + 5):
        keys = cat.query_keys(run)
        ix.resolve_by_purls(keys, False, sel)  # a first pass rebuilds nothing twice
        t = time.perf_counter()
        r = ix.resolve_by_purls(keys, False, sel)
        n = r.count
        dt = (time.perf_counter() - t) * 1000
        _, hits = ix._lookup(keys, False)
        t = time.perf_counter()
        u = BitMap.union(*hits)
        u &= ix._mask(sel)
        db = (time.perf_counter() - t) * 1000
        assert len(u) == n
        if run >= 5:
            hot.append(dt)
            bare.append(db)
            counts.append(n)
    out["resolve_10k_p95_ms_hot"] = p95(hot)
    out["bare_union_p95_ms"] = p95(bare)
    out["impacted_images_median"] = sorted(counts)[len(counts) // 2]
    out["rss_mb"] = rss_mb()
    store.close()
    return out


# -- phase 3: SQLite ------------------------------------------------------------------------
def sqlite_queries(cat: Catalog, db_path: Path) -> dict[str, float]:
    db = sqlite3.connect(db_path)
    db.execute("PRAGMA cache_size=-262144")
    times, counts = [], []
    for run in range(SQLITE_RUNS):
        keys = cat.query_keys(5 + run)
        t = time.perf_counter()
        db.execute("CREATE TEMP TABLE IF NOT EXISTS q (key TEXT PRIMARY KEY)")
        db.execute("DELETE FROM q")
        db.executemany("INSERT OR IGNORE INTO q VALUES (?)", ((k,) for k in keys))
        rows = db.execute(
            "SELECT DISTINCT pi.image FROM q JOIN pi ON pi.key = q.key "
            "JOIN img ON img.image = pi.image WHERE img.tenant = ?",
            ("tenant-3",),
        ).fetchall()
        times.append((time.perf_counter() - t) * 1000)
        counts.append(len(rows))
    db.close()
    return {"sqlite_p95_ms": p95(times), "sqlite_rows": counts[0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=50_000)
    ap.add_argument("--purls", type=int, default=1_000_000)
    ap.add_argument(
        "--scale",
        type=int,
        default=200_000,
        help="images of the second, larger catalog (its purls in proportion; 0: none)",
    )
    ap.add_argument("--batch", type=int, help="events per batch (default: the projector's)")
    ap.add_argument("--dir", help="work directory (default: a temporary one, removed after)")
    ap.add_argument(
        "--query-only",
        action="store_true",
        help="only the queries (phase 2), on the state an earlier run with --dir left there",
    )
    ap.add_argument("--reader", help=argparse.SUPPRESS)
    ap.add_argument("--cold-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ingest-only", help=argparse.SUPPRESS)
    ap.add_argument("--baseline", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.batch = args.batch or default_batch()
    if args.reader:
        print(json.dumps(reader(Path(args.reader), args.images, args.purls, args.cold_only)))
        return 0
    if args.ingest_only:
        print(json.dumps(ingest(args.images, args.purls, args.batch, Path(args.ingest_only), None)))
        return 0
    if args.baseline:
        print(json.dumps(baseline(args.images, args.purls, args.batch)))
        return 0
    if args.query_only:
        return query_only(args)
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="impact-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    state = work / "state"
    shutil.rmtree(state, ignore_errors=True)
    (work / "sqlite.db").unlink(missing_ok=True)
    t0 = time.perf_counter()
    try:
        cat = Catalog(args.images, args.purls)
        print(f"ingesting {args.images:,} images ...", file=sys.stderr, flush=True)
        res = ingest(args.images, args.purls, args.batch, state, work / "sqlite.db")
        print("querying in a fresh process ...", file=sys.stderr, flush=True)
        sizes = ["--images", str(args.images), "--purls", str(args.purls)]
        res.update(child_json([sys.executable, __file__, "--reader", str(state), *sizes]))
        print("SQLite ...", file=sys.stderr, flush=True)
        res.update(sqlite_queries(cat, work / "sqlite.db"))
        print("ingest baseline (dict of sets) in a fresh process ...", file=sys.stderr, flush=True)
        batch = ["--batch", str(args.batch)]
        res.update(child_json([sys.executable, __file__, "--baseline", *sizes, *batch]))
        if args.scale:
            res.update(scaled(args, work))
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    res["hot_vs_bare"] = res["resolve_10k_p95_ms_hot"] / res["bare_union_p95_ms"]
    res["sqlite_vs_index"] = res["sqlite_p95_ms"] / res["resolve_10k_p95_ms_hot"]
    res["ingest_vs_baseline"] = res["ingest_images_per_s"] / res["baseline_images_per_s"]
    res["seconds"] = time.perf_counter() - t0
    if args.scale:
        res["ingest_rate_200k_vs_50k"] = (
            res["ingest_images_per_s_200k"] / res["ingest_images_per_s"]
        )
    report(args, res)
    keys = [
        "resolve_10k_p95_ms_hot",
        "resolve_10k_p95_ms_cold",
        "bare_union_p95_ms",
        "hot_vs_bare",
        "sqlite_p95_ms",
        "sqlite_vs_index",
        "ingest_images_per_s",
        "rss_mb",
        "ingest_peak_rss_mb",
        "baseline_images_per_s",
        "ingest_vs_baseline",
        "cache_bound_mb",
        "ingest_batch_max_s",
    ]
    if args.scale:
        keys += [
            "ingest_images_per_s_200k",
            "ingest_rate_200k_vs_50k",
            "ingest_peak_rss_mb_200k",
            "ingest_rss_mb_200k",
            "ingest_batch_max_s_200k",
            "ingest_batch_median_s_200k",
            "resolve_10k_p95_ms_cold_200k",
        ]
    print(json.dumps({k: round(res[k], 2) for k in keys}))
    return 0


def scaled(args: argparse.Namespace, work: Path) -> dict[str, float]:
    """Phase 5: the larger catalog's ingest and cold queries, each in a fresh process."""
    images = args.scale
    purls = args.purls * images // args.images
    state = work / "state-scaled"
    shutil.rmtree(state, ignore_errors=True)
    print(f"ingesting {images:,} images (the larger catalog) ...", file=sys.stderr, flush=True)
    sizes = ["--images", str(images), "--purls", str(purls), "--batch", str(args.batch)]
    got = child_json([sys.executable, __file__, "--ingest-only", str(state), *sizes])
    print("cold queries on the larger catalog ...", file=sys.stderr, flush=True)
    cold = child_json([sys.executable, __file__, "--reader", str(state), "--cold-only", *sizes])
    if not args.dir:  # with --dir the larger catalog's state stays in DIR/state-scaled
        shutil.rmtree(state, ignore_errors=True)
    out = {f"{k}_200k": v for k, v in got.items() if k.startswith("ingest_")}
    out["resolve_10k_p95_ms_cold_200k"] = cold["resolve_10k_p95_ms_cold"]
    out["resolve_10k_p95_cpu_ms_cold_200k"] = cold["resolve_10k_p95_cpu_ms_cold"]
    out["open_ms_200k"] = cold["open_ms"]
    out["scale_images"] = images
    out["scale_purls"] = got["distinct_purls"]
    return out


def query_only(args: argparse.Namespace) -> int:
    """Phase 2 alone, in a fresh process, on the state directory of an earlier run."""
    state = Path(args.dir or "") / "state"
    if not args.dir or not (state / "CURRENT").exists():
        print("--query-only needs --dir DIR holding an earlier run's state", file=sys.stderr)
        return 2
    sizes = ["--images", str(args.images), "--purls", str(args.purls)]
    res = child_json([sys.executable, __file__, "--reader", str(state), *sizes])
    res["hot_vs_bare"] = res["resolve_10k_p95_ms_hot"] / res["bare_union_p95_ms"]
    print(json.dumps({k: round(v, 2) for k, v in res.items()}))
    return 0


def child_json(cmd: list[str]) -> dict[str, float]:
    """Run a phase in a fresh process; its last stdout line is its JSON result (its
    progress lines go to this process's stderr)."""
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def report(args: argparse.Namespace, r: dict[str, float]) -> None:
    rows = [
        ("catalog", f"{args.images:,} images, {r['distinct_purls']:,} purls, "
         f"{r['known_groups']:,} product keys, {PER_IMAGE} purls/image, {TENANTS} tenants"),
        ("resolve 10k keys, p95 hot", f"{r['resolve_10k_p95_ms_hot']:.2f} ms"
         f"  (median {r['impacted_images_median']:,} images impacted)"),
        ("bare pyroaring union, p95", f"{r['bare_union_p95_ms']:.2f} ms"),
        ("hot / bare", f"{r['hot_vs_bare']:.2f}x  (target <= 1.5x)"),
        ("resolve 10k keys, p95 cold", f"{r['resolve_10k_p95_ms_cold']:.1f} ms"
         f"  (first query after opening; {r['resolve_10k_p95_cpu_ms_cold']:.1f} ms CPU; "
         f"opening {r['open_ms']:.0f} ms)"),
        ("SQLite (key, image) index, p95", f"{r['sqlite_p95_ms']:.0f} ms  ({r['sqlite_rows']:,}"
         f" images; index built in {r['sqlite_index_build_s']:.0f} s)"),
        ("SQLite / index", f"{r['sqlite_vs_index']:.0f}x  (target >= 20x)"),
        ("ingest", f"{r['ingest_images_per_s']:,.0f} images/s wall, "
         f"{r['ingest_images_per_cpu_s']:,.0f} per CPU-second of the folding process "
         f"(batch {r['ingest_batch']:,}; target >= 2,000)"),
        ("  dict-of-sets baseline", f"{r['baseline_images_per_s']:,.0f} images/s "
         f"(same events and decoder, in memory only)"),
        ("  index / baseline", f"{r['ingest_vs_baseline']:.2f}x"),
        ("peak RSS during ingest", f"{r['ingest_peak_rss_mb']:,.0f} MB, "
         f"{r['ingest_rss_mb']:,.0f} MB after it  (cache bound {r['cache_bound_mb']:,.0f} MB; "
         f"baseline {r['baseline_peak_rss_mb']:,.0f} MB)"),
        ("batch time, median / max", f"{r['ingest_batch_median_s']:.2f} / "
         f"{r['ingest_batch_max_s']:.2f} s  (median batch "
         f"{r['ingest_batch_median_events']:,.0f} events)"),
        ("warm-up", f"{r['warm_s']:.1f} s, {r['warm_resident_groups']:,} groups, "
         f"{r['cached_mb']:,.0f} MB estimated"),
        ("RSS, index loaded", f"{r['rss_mb']:,.0f} MB  (target <= 1024)"),
    ]  # fmt: skip
    if args.scale:
        rows += [
            (f"{int(r['scale_images']):,} images", f"{r['scale_purls']:,.0f} purls, "
             f"{PER_IMAGE} purls/image"),
            ("  ingest", f"{r['ingest_images_per_s_200k']:,.0f} images/s wall, "
             f"{r['ingest_images_per_cpu_s_200k']:,.0f} per CPU-second"),
            ("  rate vs the first catalog", f"{r['ingest_rate_200k_vs_50k']:.2f}x  "
             "(target >= 0.8)"),
            ("  peak RSS during ingest", f"{r['ingest_peak_rss_mb_200k']:,.0f} MB, "
             f"{r['ingest_rss_mb_200k']:,.0f} MB after it  (target <= cache bound "
             f"{r['cache_bound_mb']:,.0f} + 512 MB)"),
            ("  batch time, median / max", f"{r['ingest_batch_median_s_200k']:.2f} / "
             f"{r['ingest_batch_max_s_200k']:.2f} s  (median batch "
             f"{r['ingest_batch_median_events_200k']:,.0f} events)"),
            ("  resolve 10k keys, p95 cold", f"{r['resolve_10k_p95_ms_cold_200k']:.1f} ms  "
             f"({r['resolve_10k_p95_cpu_ms_cold_200k']:.1f} ms CPU; opening "
             f"{r['open_ms_200k']:.0f} ms; target < 300 ms)"),
        ]  # fmt: skip
    rows.append(("benchmark wall time", f"{r['seconds']:.0f} s"))
    width = max(len(k) for k, _ in rows)
    print(f"{'measure':<{width}}  value")
    print(f"{'-' * width}  {'-' * 40}")
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


if __name__ == "__main__":
    os.environ.setdefault("STREAMPROC_IMPACT_WARM_ON_START", "false")
    sys.exit(main())
