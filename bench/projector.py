"""Foundation benchmark: fold throughput vs. raw consumption, 1M replay, publish rates.

Runs an embedded nats-server on loopback, prints a table with every figure beside its
baseline measured in the same run, and ends with one line of JSON (the issue's keys).
Medians of several trials: the machine is shared and noisy.

    python bench/projector.py [--events 200000] [--replay 1000000] [--trials 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import nats
import uvloop

from streamproc.bus import jsapi, streams
from streamproc.bus.connect import connect
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.bus.pull import PullLoop
from streamproc.config import Configuration
from streamproc.events.envelope import encode
from streamproc.natsd.server import EmbeddedNats, free_port
from streamproc.projections.activity import Activity
from streamproc.roles import rebuild
from streamproc.runtime.projector import Projector
from streamproc.state.store import RocksStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the sample events: tests/
from tests.samples import sample_event

PREFIX = "bench"


async def plain_pull_loop(url: str, stream: str, n: int) -> float:
    """The fastest public-API nats-py consumer: a callback subscription on an inbox fed by
    raw CONSUMER.MSG.NEXT requests of 1,000, a second request kept outstanding."""
    nc = await nats.connect(url)
    name = f"plain{time.time_ns()}"
    await jsapi.create_consumer(
        nc, stream, {"name": name, "ack_policy": "none", "inactive_threshold": 30 * 10**9}
    )
    inbox = nc.new_inbox()
    done = asyncio.Event()
    got = 0
    open_requests = 0

    async def request() -> None:
        nonlocal open_requests
        open_requests += 1
        await nc.publish(
            f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{name}",
            b'{"batch":1000,"expires":2000000000}',
            reply=inbox,
        )

    async def on_msg(msg: nats.aio.msg.Msg) -> None:
        nonlocal got, open_requests
        if msg.reply:
            got += 1
            if got % 1000 == 0:
                open_requests -= 1
                await request()
            if got >= n:
                done.set()
        else:  # status: the request ended
            open_requests -= 1
            while open_requests < 2:
                await request()

    sub = await nc.subscribe(inbox, cb=on_msg, pending_msgs_limit=-1, pending_bytes_limit=-1)
    t0 = time.perf_counter()
    await request()
    await request()
    await done.wait()
    rate = n / (time.perf_counter() - t0)
    await sub.unsubscribe()
    await nc.close()
    return rate


async def plain_ordered_push(url: str, stream: str, subject: str, n: int) -> float:
    nc = await nats.connect(url)
    js = nc.jetstream()
    done = asyncio.Event()
    got = 0

    async def on_msg(msg: nats.aio.msg.Msg) -> None:
        nonlocal got
        got += 1
        if got >= n:
            done.set()

    t0 = time.perf_counter()
    sub = await js.subscribe(
        subject, stream=stream, ordered_consumer=True, cb=on_msg, pending_msgs_limit=-1
    )
    await done.wait()
    rate = n / (time.perf_counter() - t0)
    await sub.unsubscribe()
    await nc.close()
    return rate


async def fast_raw_loop(nc: FastClient, stream: str, n: int) -> float:
    """streamproc's own pull loop with no decoding and no state (its ceiling)."""
    name = f"raw{time.time_ns()}"
    await jsapi.create_consumer(
        nc, stream, {"name": name, "ack_policy": "none", "inactive_threshold": 30 * 10**9}
    )
    loop = await PullLoop(nc, stream, name).start()
    t0 = time.perf_counter()
    got = 0
    while got < n:
        got += len(await loop.next_batch(1000))
    rate = n / (time.perf_counter() - t0)
    await loop.close()
    return rate


async def projector_fold(nc: FastClient, stream: str, n: int, work: Path) -> float:
    path = Path(tempfile.mkdtemp(dir=work))
    store = RocksStore(path)
    proj = await Projector(nc, store, [Activity()], stream=stream, role="bench").start()
    t0 = time.perf_counter()
    await proj.run(until_seq=n)
    rate = n / (time.perf_counter() - t0)
    store.close()
    return rate


async def median(trials: int, fn: Callable[[], Awaitable[float]]) -> float:
    return statistics.median([await fn() for _ in range(trials)])


async def main(args: argparse.Namespace) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="streamproc-bench-"))
    server = EmbeddedNats(work / "nats", port=free_port()).start()
    try:
        nc = await connect(server.url)
        await streams.apply(nc, streams.definitions(PREFIX))
        stream = streams.stream_names(PREFIX)[0]
        pub = await Publisher(nc, prefix=PREFIX).start()

        # -- publishing: sequential js.publish vs. the pipelined publisher
        js = nc.jetstream()
        seq_n = 3000
        t0 = time.perf_counter()
        for i in range(seq_n):
            e = sample_event(i)
            await js.publish(pub.subject_of(e), encode(e), headers={"Nats-Msg-Id": e.id})
        sequential = seq_n / (time.perf_counter() - t0)

        events = [sample_event(i) for i in range(seq_n, args.events)]
        items = [(pub.subject_of(e), encode(e), e.id) for e in events]
        t0 = time.perf_counter()
        await pub.publish_many(items)
        pipelined = len(items) / (time.perf_counter() - t0)
        n = args.events

        # -- consuming the same n messages
        plain_pull = await median(args.trials, lambda: plain_pull_loop(server.url, stream, n))
        plain_push = await median(
            args.trials, lambda: plain_ordered_push(server.url, stream, f"{PREFIX}.events.>", n)
        )
        fast_raw = await median(args.trials, lambda: fast_raw_loop(nc, stream, n))
        fold = await median(args.trials, lambda: projector_fold(nc, stream, n, work))
        raw = max(plain_pull, plain_push)

        # -- replay of 1M events into a fresh directory
        more = [sample_event(i) for i in range(n, args.replay)]
        for start in range(0, len(more), 50_000):
            await pub.publish_many(
                (pub.subject_of(e), encode(e), e.id) for e in more[start : start + 50_000]
            )
        summary = await rebuild(
            nc, stream, "activity", work / "replay", progress=False, configuration=Configuration()
        )
        assert summary.events == args.replay, summary
        await pub.close()
        await nc.close()
    finally:
        server.stop()

    rows = [
        ("publish: js.publish awaited one at a time", sequential, None),
        ("publish: streamproc pipelined publisher", pipelined, pipelined / sequential),
        ("consume: plain nats-py pull loop (callback)", plain_pull, None),
        ("consume: plain nats-py ordered push consumer", plain_push, None),
        ("consume: streamproc raw pull loop, no decode", fast_raw, fast_raw / raw),
        ("fold: projector -> RocksDB (decode+fold+commit)", fold, fold / raw),
        (f"replay: {args.replay:,} events into a fresh dir", summary.rate, None),
    ]
    print(f"\n{'measurement':<50} {'events/s':>12} {'vs baseline':>12}")
    print("-" * 76)
    for name, rate, ratio in rows:
        r = f"{ratio:.2f}x" if ratio is not None else ""
        print(f"{name:<50} {rate:>12,.0f} {r:>12}")
    print(f"replay of {args.replay:,} events took {summary.seconds:.1f} s")
    print(
        f"(consume baseline = fastest plain nats-py loop = {raw:,.0f}/s; medians of {args.trials})"
    )
    result = {
        "fold_events_per_s": round(fold),
        "raw_consume_events_per_s": round(raw),
        "fold_vs_raw": round(fold / raw, 3),
        "replay_1m_s": round(summary.seconds, 2),
        "publish_pipelined_per_s": round(pipelined),
        "publish_sequential_per_s": round(sequential),
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--replay", type=int, default=1_000_000)
    parser.add_argument("--trials", type=int, default=3)
    uvloop.run(main(parser.parse_args()))
