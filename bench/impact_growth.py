"""How the ImpactIndex's ingest cost grows with the catalog: ``bench/impact.py``'s
``Catalog(N, 20 N)`` folded through the real ``Folder`` and ``ImpactProjection`` into RocksDB
at the default settings (batches of ``projector.batch`` events, the default cache bound;
unlike the projector and ``bench/impact.py``, not made smaller by ``projector.batch_max_s``, so
that a tree from before that setting folds the same batches), printing per 5,000
images the folding process's CPU per image (``Folder.apply`` only; the events come from a
forked producer), its RSS, the cache estimate, what the open chunk holds and how many groups
were read back from RocksDB (evicted before).

Written so that it runs on any tree of the project that has ``bench/impact.py`` (the
performance notebook's side-by-side runs): run it with the tree to measure as the current
directory, ``cd TREE && TREE/.venv/bin/python PATH/TO/impact_growth.py --images 70000``; it
imports ``streamproc`` and ``bench.impact`` from there. "open" is the decoded members of open
chunks where groups hold them (``Group.open_members``), or the columnar open chunk's checked
purls (``OpenChunk.flat``) where that exists.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.getcwd())

STEP = 5_000


def _open_count(idx: object) -> tuple[str, int]:
    opened = getattr(idx, "_open", None)
    if isinstance(opened, dict):
        return "checked purls", sum(len(oc.flat) for oc in opened.values())
    groups = idx._groups.values()  # type: ignore[attr-defined]
    return "decoded members", sum(g.open_members for g in groups)


def _loadavg() -> str:
    with open("/proc/loadavg") as fh:
        return " ".join(fh.read().split()[:3])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=70_000)
    ap.add_argument("--purls", type=int, default=0, help="default: 20 x images")
    ap.add_argument("--batch", type=int, default=0, help="default: the projector's")
    args = ap.parse_args()
    import multiprocessing as mp

    import msgspec

    from bench.impact import batches, default_batch, producer, rss_mb
    from streamproc.configfile.loader import environment_only
    from streamproc.impact.settings import configured_projection
    from streamproc.runtime.projection import Folder
    from streamproc.state.keys import Checkpoint
    from streamproc.state.store import RocksStore

    images, purls = args.images, args.purls or 20 * args.images
    batch = args.batch or default_batch()
    work = Path(tempfile.mkdtemp(prefix="impact-growth-"))
    parent, child = mp.Pipe(duplex=False)
    proc = mp.get_context("fork").Process(
        target=producer, args=(child, images, purls, batch, None), daemon=True
    )
    proc.start()
    store = RocksStore(work / "state")
    proj = configured_projection(environment_only())
    folder = Folder(store, [proj], "impact")
    idx = proj.index
    read_back = [0]
    read_groups = idx._read_groups

    def counting(gids: list[int]) -> list:  # type: ignore[type-arg]
        read_back[0] += len(gids)
        return read_groups(gids)

    idx._read_groups = counting  # type: ignore[method-assign]
    print(
        f"tree {os.getcwd()}, {images:,} images, {purls:,} purls, batch {batch:,}, "
        f"bound {(proj.max_bytes or 0) >> 20} MB, load {_loadavg()}",
        flush=True,
    )
    print("images  ms_cpu/img  rss_mb  estimate_mb  open  read_back  load1", flush=True)
    seq, cpu, cpu_all, back0, lo = 0, 0.0, 0.0, 0, 0
    t0 = time.perf_counter()
    for _, hi in batches(images, batch):
        events = msgspec.msgpack.decode(parent.recv_bytes(), type=list[bytes])
        msgs = [(seq + k + 1, "scheduler.events.image", data) for k, data in enumerate(events)]
        del events
        seq += len(msgs)
        c = time.process_time()
        folder.apply(msgs, Checkpoint("SCHEDULER", "bench", seq))
        dc = time.process_time() - c
        cpu += dc
        cpu_all += dc
        if hi % STEP < batch or hi == images:
            what, n = _open_count(proj.index)
            print(
                f"{hi:>6}  {1000 * cpu / (hi - lo):>10.2f}  {rss_mb():>6.0f}  "
                f"{proj.index.cached_bytes / 2**20:>11.0f}  {n:>8} {what}  "
                f"{read_back[0] - back0:>9}  {_loadavg().split()[0]}",
                flush=True,
            )
            cpu, back0, lo = 0.0, read_back[0], hi
    # What is left to merge (trees that merge over later batches), as the idle projector
    # merges it: counted in the total.
    finish = getattr(folder, "finish", None)
    if finish is not None:
        c = time.process_time()
        finish()
        cpu_all += time.process_time() - c
    parent.recv_bytes()
    proc.join()
    store.close()
    shutil.rmtree(work, ignore_errors=True)
    print(
        f"all: {1000 * cpu_all / images:.2f} ms CPU per image, "
        f"{time.perf_counter() - t0:.0f} s wall, load {_loadavg()}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
