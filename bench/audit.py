"""Audit benchmark: chain folding rate and full verification of a 1,000,000-entry chain.

Everything runs in one process on this machine, beside baselines measured in the same run:

- folding: the ``audit`` projection through ``Folder`` into RocksDB (decode, fold, flush,
  commit), beside the ``activity`` projection on the same events and beside the bare hashing
  the chain needs (payload digest + link) over the same inputs;
- verification: ``chain verify`` of one tenant's 1,000,000-entry chain with 1,000 signed
  snapshots, as the command runs it (a fresh process, read-only state) and as a library call,
  beside the bare recomputation loop over the same entries held in memory.

Medians of several trials: the machine is shared and noisy. Ends with one line of JSON.

    python bench/audit.py [--events 200000] [--chain 1000000] [--trials 3]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
from nacl.signing import SigningKey

from streamproc.audit import layout
from streamproc.audit.dsse import Keyring, Signer
from streamproc.audit.entry import CHAINED_KINDS, make_entry
from streamproc.audit.log import AuditLog
from streamproc.audit.snapshots import snapshot_event
from streamproc.audit.verify import verify_tenant
from streamproc.events.envelope import Envelope, encode, new_event
from streamproc.hlc import Timestamp
from streamproc.projections.activity import Activity
from streamproc.runtime.projection import Folder, Projection
from streamproc.state.keys import Checkpoint
from streamproc.state.store import RocksStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the sample events: tests/
from tests.samples import BASE_MS, KIND_CYCLE, sample_event, sample_payload

BATCH = 1000
SNAPSHOT = 1000
SIGNER = Signer("bench", SigningKey(b"\x42" * 32))


def templates() -> list[Envelope]:
    """One sample event of every chained kind, to vary cheaply: those the samples' cycle
    makes, then one of each chained kind it does not (``sample_payload`` refuses a kind it
    has no sample of, so a new chained kind fails here instead of looping)."""
    out: dict[str, Envelope] = {}
    for i in range(len(KIND_CYCLE)):
        e = sample_event(i)
        if e.kind in CHAINED_KINDS:
            out.setdefault(e.kind, e)
    for i, kind in enumerate(sorted(CHAINED_KINDS - out.keys()), start=len(KIND_CYCLE)):
        hlc = f"{BASE_MS + i}:0:sample"
        out[kind] = new_event(
            kind, "tenant-0", sample_payload(kind, i), hlc, event_id=f"sample-{i}"
        )
    return list(out.values())


def events(n: int, tenants: int, first: int = 0) -> Iterator[Envelope]:
    base = templates()
    replace = msgspec.structs.replace
    for k in range(first, first + n):
        t = base[k % len(base)]
        yield replace(
            t,
            tenant=f"tenant-{k % tenants}",
            hlc=f"{BASE_MS + k}:{k % 3}:bench-node",
            id=f"bench-{k}",
            correlation_id=f"bench-{k}",
        )


def messages(evs: list[Envelope], first_seq: int = 1) -> list[tuple[int, str, bytes]]:
    return [(first_seq + i, "s", encode(e)) for i, e in enumerate(evs)]


def fold_rate(
    make: Callable[[], Projection], msgs: list[tuple[int, str, bytes]], work: Path
) -> float:
    path = Path(tempfile.mkdtemp(dir=work))
    store = RocksStore(path)
    folder = Folder(store, [make()])
    t0 = time.perf_counter()
    for start in range(0, len(msgs), BATCH):
        chunk = msgs[start : start + BATCH]
        folder.apply(chunk, Checkpoint("BENCH", "e", chunk[-1][0]))
    rate = len(msgs) / (time.perf_counter() - t0)
    store.close()
    shutil.rmtree(path)
    return rate


def bare_hash_rate(evs: list[Envelope]) -> float:
    """Only the hashing the chain needs: payload digest and link, inputs prepared up front."""
    canon = msgspec.json.Encoder(order="sorted")
    rows = [(e.hlc, "job", "ACTION", e.id, e.kind, canon.encode(e.payload)) for e in evs]
    sha = hashlib.sha256
    t0 = time.perf_counter()
    prev = "genesis"
    for t, j, a, i, k, p in rows:
        digest = sha(
            b"%b%b%b%b%b%b" % (t.encode(), j.encode(), a.encode(), i.encode(), k.encode(), p)
        ).hexdigest()
        prev = sha((t + j + a + prev + digest).encode()).hexdigest()
    return len(rows) / (time.perf_counter() - t0)


def build_chain(path: Path, n: int) -> tuple[float, float]:
    """Fold one tenant's ``n``-entry chain with a signed snapshot every 1,000 entries (the
    reactor's work, done inline); returns (seconds, fold-only entries/s)."""
    store = RocksStore(path)
    folder = Folder(store, [AuditLog()])
    seq = 0
    fold_s = 0.0
    t0 = time.perf_counter()
    pending: list[tuple[int, str, bytes]] = []
    for start in range(0, n, BATCH):
        msgs = []
        for e in events(min(BATCH, n - start), tenants=1, first=start):
            seq += 1
            msgs.append((seq, "s", encode(e)))
        t1 = time.perf_counter()
        folder.apply([*pending, *msgs], Checkpoint("BENCH", "e", seq))
        fold_s += time.perf_counter() - t1
        pending = []
        head = layout.read_head(store, "tenant-0")
        assert head is not None
        while head.entries - head.snapshotted - len(pending) * SNAPSHOT >= SNAPSHOT:
            lo = head.snapshotted + len(pending) * SNAPSHOT
            batch = list(layout.iter_entries(store, "tenant-0", lo))[:SNAPSHOT]
            ts = Timestamp(BASE_MS + lo + SNAPSHOT + 5, 0, "auditor")
            seq += 1
            pending.append((seq, "s", encode(snapshot_event("tenant-0", batch, ts, SIGNER))))
    if pending:
        folder.apply(pending, Checkpoint("BENCH", "e", seq))
    total = time.perf_counter() - t0
    store.close()
    return total, n / fold_s


def bare_verify_loop(path: Path) -> float:
    """The recomputation alone: entries already decoded in memory, no storage, no Merkle."""
    store = RocksStore(path, read_only=True)
    rows = [
        (e.t_hlc, e.job_id, e.action, e.event_id, e.kind, e.payload.encode())
        for e in layout.iter_entries(store, "tenant-0")
    ]
    store.close()
    from streamproc.audit.entry import link_of, payload_digest

    t0 = time.perf_counter()
    prev = None
    for t, j, a, i, k, p in rows:
        prev = link_of(t, j, a, prev, payload_digest(t, j, a, i, k, p))
    return time.perf_counter() - t0


def cli_verify(path: Path) -> tuple[float, str]:
    key = base64.b64encode(bytes(SIGNER.signing_key.verify_key)).decode()
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPROC_")}
    t0 = time.perf_counter()
    out = subprocess.run(
        [
            sys.executable, "-m", "streamproc.audit.cli", "chain", "verify",
            "--state-dir", str(path), "--trusted-key", f"bench={key}",
            "--data-dir", str(path.parent),
        ],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    seconds = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"chain verify failed: {out.stdout} {out.stderr}")
    return seconds, out.stdout.strip()


def main(args: argparse.Namespace) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="streamproc-audit-bench-"))
    try:
        evs = list(events(args.events, tenants=10))
        msgs = messages(evs)
        trials = args.trials
        pairs = [  # interleaved, so both see the same background load
            (fold_rate(Activity, msgs, work), fold_rate(AuditLog, msgs, work))
            for _ in range(trials)
        ]
        activity = statistics.median(a for a, _ in pairs)
        audit = statistics.median(b for _, b in pairs)
        hashing = statistics.median(bare_hash_rate(evs) for _ in range(trials))
        assert make_entry(evs[0], 0, None).chain_link  # the folded format is the real one
        del evs, msgs

        chain = work / "chain" / "auditor"
        build_s, build_rate = build_chain(chain, args.chain)
        bare_s = bare_verify_loop(chain)
        ring = Keyring({"bench": SIGNER.signing_key.verify_key})

        def serial(log_view: bool) -> float:
            store = RocksStore(chain, read_only=True)
            t0 = time.perf_counter()
            report = verify_tenant(store, "tenant-0", ring, count_metrics=False, log_view=log_view)
            seconds = time.perf_counter() - t0
            store.close()
            assert report.ok and report.entries == args.chain, report
            return seconds

        lib_s = serial(False)
        lib_log_s = serial(True)
        cli_s, cli_out = cli_verify(chain)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    n = f"{args.chain:,}"
    rows = [
        ("fold: activity projection -> RocksDB (baseline)", f"{activity:,.0f}/s", ""),
        ("fold: bare sha256, digest + link only (baseline)", f"{hashing:,.0f}/s", ""),
        (
            "fold: audit chain -> RocksDB (Folder)",
            f"{audit:,.0f}/s",
            f"{audit / activity:.2f}x activity",
        ),
        (f"fold: {n}-entry chain, 1 tenant, in the build", f"{build_rate:,.0f}/s", ""),
        (
            f"build: {n} entries + {args.chain // SNAPSHOT:,} signed snapshots",
            f"{build_s:.1f} s",
            "",
        ),
        (f"verify: bare recomputation loop, {n} in memory", f"{bare_s:.1f} s", ""),
        (f"verify: in-process, serial, {n}", f"{lib_s:.1f} s", f"{lib_s / bare_s:.2f}x bare"),
        (
            "verify: in-process, serial, + HLC log view",
            f"{lib_log_s:.1f} s",
            f"{lib_log_s / bare_s:.2f}x bare",
        ),
        (
            f"verify: `chain verify` command, {n}",
            f"{cli_s:.1f} s",
            f"{cli_s / bare_s:.2f}x bare",
        ),
    ]
    print(f"\n{'measurement':<52} {'result':>12}  {'vs baseline':<16}")
    print("-" * 84)
    for name, value, ratio in rows:
        print(f"{name:<52} {value:>12}  {ratio:<16}")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"(fold: medians of {args.trials} interleaved trials of {args.events:,} events over 10 "
        f"tenants; `chain verify` --workers {min(os.cpu_count() or 1, 4)} (from 200,000 "
        f"entries) said {cli_out.splitlines()[-1][:40]!r}...; load average {load})"
    )
    result = {
        "chain_entries_per_s": round(audit),
        "verify_1m_s": round(cli_s, 2),
        "verify_1m_serial_s": round(lib_s, 2),
        "verify_1m_serial_log_view_s": round(lib_log_s, 2),
        "activity_fold_per_s": round(activity),
        "bare_hash_per_s": round(hashing),
        "bare_verify_1m_s": round(bare_s, 2),
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--chain", type=int, default=1_000_000)
    parser.add_argument("--trials", type=int, default=3)
    main(parser.parse_args())
