"""What a registration's hold on the Notify stream costs in disk, on the product's own path:
the default stream definition (interest retention, 7-day limit), the runner's publisher,
the feed's registration (``Feed.checkpoint``) and the gateway's window keeper.

Ten tenants publish ``--messages`` rescan.delta messages (ten top findings each, as the
runner writes them). Side by side, each on a stream of its own:

* ``in window``     — before the delivery window passes: every message is kept (the cost
  every deployment already pays for its 24 hours);
* ``no hold``       — the window has passed, nobody registered: nothing is left;
* ``one lagging``   — one tenant's consumer registered at zero and reported nothing since;
* ``all lagging``   — every tenant's consumer registered and lagging;
* ``caught up``     — every tenant registered and reported up to its last message.

For each: messages and bytes as the server counts them, and bytes on disk (the stream's
directory, its consumers' state included). A held message is stored once (no copy), so the
hold costs what a registration has not reported yet.

    python bench/notify_hold.py [--messages 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from streamproc.bus import jsapi, streams
from streamproc.bus.connect import connect
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.names import stream_names
from streamproc.natsd.server import EmbeddedNats, free_port
from streamproc.notify import messages as nm
from streamproc.notify.feed_http import CheckpointBody, Feed, epoch_of
from streamproc.notify.registrations import FeedSettings
from streamproc.notify.retention import WindowKeeper

TENANTS = [f"tenant{i}" for i in range(10)]
SETTLE_S = float(os.environ.get("SETTLE_S", "1"))


class Caller(NamedTuple):
    tenant: str
    client_ids: frozenset[str] = frozenset({"streamproc-notify"})


def message(tenant: str, i: int) -> nm.RescanDelta:
    findings = [
        nm.TopFinding(purl=f"pkg:pypi/package{j}@1.{j}.0", vuln_id=f"CVE-2025-{1000 + j}",
                      severity="high", kev=j == 0,
                      link=f"https://osv.dev/vulnerability/CVE-2025-{1000 + j}")
        for j in range(10)
    ]  # fmt: skip
    return nm.RescanDelta(
        id=f"{tenant}-{i}", tenant=tenant, run_id=f"run-{i // 100}",
        ts="2026-01-01T00:00:00.000Z", image_digest="sha256:" + f"{i:064x}",
        verdict_id=f"verdict-{tenant}-{i}", schedule_ids=["nightly"], new_criticals=0,
        new_high=10, kev_hits=["CVE-2025-1000"], top_findings=findings,
        report_url=f"https://scanner.example/reports/{i}",
    )  # fmt: skip


def disk(path: Path) -> int:
    out = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


async def scenario(
    nc: FastClient, store: Path, name: str, n: int, registered: list[str], report_all: bool,
    window_passed: bool,
) -> dict[str, object]:  # fmt: skip
    prefix = f"b{abs(hash(name)) % 10**6}"
    stream = stream_names(prefix)[2]
    await streams.apply(nc, streams.definitions(prefix)[2:3])
    feed = Feed(nc, prefix, FeedSettings())
    for tenant in registered:
        await feed.checkpoint(
            Caller(tenant), "rescan.delta", CheckpointBody(stream_epoch=None, seq=None)
        )
    pub = await Publisher(nc, prefix=prefix).start()
    last: dict[str, int] = {}
    per = n // len(TENANTS)
    for i in range(per):
        batch = [message(t, i) for t in TENANTS]
        subject = lambda m: nm.subject(prefix, m.tenant, "rescan.delta")  # noqa: E731
        acks = await pub.publish_many((subject(m), nm.encode(m), m.id) for m in batch)
        last.update({m.tenant: a.seq for m, a in zip(batch, acks, strict=True)})
    await pub.close()
    if report_all:
        info = await jsapi.stream_info(nc, stream)
        assert info is not None
        for tenant in registered:
            body = CheckpointBody(stream_epoch=epoch_of(info.created), seq=last[tenant])
            await feed.checkpoint(Caller(tenant), "rescan.delta", body)
    if window_passed:
        keeper = WindowKeeper(feed.holds, streams.NotifyRetention().max_age_s)
        await keeper.step(now=time.time() + keeper.max_age_s + 1)
    await asyncio.sleep(SETTLE_S)  # the file store writes its blocks and removes what went
    info = await jsapi.stream_info(nc, stream)
    assert info is not None
    on_disk = disk(store / "jetstream" / "$G" / "streams" / stream)
    await jsapi.request(nc, f"STREAM.DELETE.{stream}")
    with_feed_bucket = f"KV_{prefix}_feed"
    with contextlib.suppress(jsapi.JsApiError):
        await jsapi.request(nc, f"STREAM.DELETE.{with_feed_bucket}")
    return {"scenario": name, "messages": info.state.messages, "bytes": info.state.bytes,
            "disk": on_disk}  # fmt: skip


async def main(n: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="notify-hold-"))
    srv = EmbeddedNats(tmp / "nats", port=free_port()).start()
    nc = await connect(srv.url)
    try:
        rows = [
            await scenario(nc, tmp / "nats", "in window", n, [], False, False),
            await scenario(nc, tmp / "nats", "no hold", n, [], False, True),
            await scenario(nc, tmp / "nats", "one lagging", n, TENANTS[:1], False, True),
            await scenario(nc, tmp / "nats", "all lagging", n, TENANTS, False, True),
            await scenario(nc, tmp / "nats", "caught up", n, TENANTS, True, True),
        ]
    finally:
        await nc.close()
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    base = rows[0]
    load = os.getloadavg()[0]
    print(
        f"{n} rescan.delta messages over {len(TENANTS)} tenants, "
        f"{int(base['bytes']) // max(1, int(base['messages']))} bytes each (load {load:.2f})"
    )  # type: ignore[call-overload]
    print(
        f"{'scenario':<14}{'messages':>10}{'stream bytes':>15}{'on disk':>14}{'disk vs window':>16}"
    )
    for r in rows:
        ratio = int(r["disk"]) / int(base["disk"])  # type: ignore[call-overload]
        print(
            f"{r['scenario']:<14}{r['messages']:>10}{r['bytes']:>15,}{r['disk']:>14,}{ratio:>16.2f}"
        )
    held = rows[2]
    per_msg = (int(held["disk"]) - int(rows[1]["disk"])) / max(1, int(held["messages"]))  # type: ignore[call-overload]
    print(json.dumps({"bench": "notify_hold", "messages": n, "load": round(load, 2),
                      "disk_per_held_message": round(per_msg), "rows": rows}))  # fmt: skip


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=20_000)
    asyncio.run(main(p.parse_args().messages))
