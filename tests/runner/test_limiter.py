"""The shared buckets against a real nats-server: several limiters, each on its own
connection (as runner processes are), hold one rate together; a call waiting for two buckets
takes neither's tokens in vain; a cancelled wait stops at once; while NATS is away calls
wait, and go on when it is back."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from streamproc import metrics
from streamproc.bus import jsapi
from streamproc.bus.connect import connect
from streamproc.bus.publisher import Publisher
from streamproc.natsd.server import EmbeddedNats, free_port
from streamproc.runner.limiter import BucketSpec, Limiter, Stopped
from streamproc.runner.ratebucket import (
    SYNC_EVERY_NS,
    RateStore,
    ServerClock,
    definition,
    key_of,
    rfc3339_ns,
)
from tests.helpers import most_in_a_window


def limited(reason: str) -> float:
    return metrics.RATE_LIMITED.labels(reason)._value.get()


@contextlib.asynccontextmanager
async def limiters(url: str, prefix: str, n: int) -> AsyncIterator[list[Limiter]]:
    """``n`` limiters, each with its own connection and publisher (as runner processes)."""
    parts = []
    try:
        for i in range(n):
            nc = await connect(url)
            pub = await Publisher(nc, prefix=prefix).start()
            store = RateStore(pub, prefix, f"runner-{i}")
            parts.append((nc, pub, Limiter(store)))
        await parts[0][2].store.open(1)
        yield [lim for _, _, lim in parts]
    finally:
        for _, _, lim in parts:
            await lim.close()
        if parts:
            with contextlib.suppress(jsapi.JsApiError):
                await jsapi.request(parts[0][0], f"STREAM.DELETE.{definition(prefix, 1)['name']}")
        for nc, pub, _ in parts:
            await pub.close()
            await nc.close()


async def hammer(
    limiter: Limiter, specs: list[BucketSpec], lanes: int, seconds: float, out: list[float]
) -> None:
    """``lanes`` callers acquiring back to back for ``seconds``; each use's time in ``out``."""
    end = time.monotonic() + seconds

    async def lane() -> None:
        while time.monotonic() < end:
            await limiter.acquire(specs)
            out.append(time.monotonic())

    await asyncio.gather(*(lane() for _ in range(lanes)))


async def test_three_limiters_hold_one_rate_together(
    nats_server: EmbeddedNats, prefix: str
) -> None:
    rate, burst_s = 40, 0.5  # a burst of 20 calls
    spec = [BucketSpec(key_of("run", "t1", "r1"), rate, burst_s, "run_rate")]
    before = limited("run_rate")
    uses: list[list[float]] = [[], [], []]
    async with limiters(nats_server.url, prefix, 3) as lims:
        began = time.monotonic()
        await asyncio.gather(
            *(hammer(lim, spec, 6, 2.5, out) for lim, out in zip(lims, uses, strict=True))
        )
        took = time.monotonic() - began
    every = [t for u in uses for t in u]
    for w in (0.2, 1.0, 2.0):
        assert most_in_a_window(every, w) <= w * rate + 20 + 1, (w, most_in_a_window(every, w))
    # Not slower than the rate either (the first burst is 3/4 of it: 15 calls), and shared.
    assert len(every) >= 0.8 * (rate * (took - 0.5) + 15), (len(every), took)
    # Shared, not split evenly: whoever asks first once tokens conform gets a batch
    # (docs/planning.md, "Fairness"), so a loaded machine skews the shares (12 % of the calls
    # for one limiter was seen at load 11); none may be starved.
    assert min(len(u) for u in uses) >= 0.05 * len(every), [len(u) for u in uses]
    assert limited("run_rate") > before  # 18 callers for 40/s: they waited, and it shows


async def test_a_tenant_bucket_shared_by_two_runs_wastes_neither(
    nats_server: EmbeddedNats, prefix: str
) -> None:
    tenant = BucketSpec(key_of("tenant", "t1"), 20, 1.0, "tenant_bucket")
    runs = [[BucketSpec(key_of("run", "t1", r), 30, 1.0, "run_rate"), tenant] for r in "ab"]
    before = {r: limited(r) for r in ("tenant_bucket", "run_rate")}
    uses: list[list[float]] = [[], [], [], []]
    async with limiters(nats_server.url, prefix, 2) as lims:
        began = time.monotonic()
        await asyncio.gather(
            *(
                hammer(lims[i % 2], runs[i // 2], 4, 3.0, uses[i])
                for i in range(4)  # each run on both limiters
            )
        )
        took = time.monotonic() - began
    every = [t for u in uses for t in u]
    assert most_in_a_window(every, 1.0) <= 20 + 20 + 1
    assert len(every) >= 0.8 * (20 * (took - 1) + 15), (len(every), took)
    per_run = [len(uses[0]) + len(uses[1]), len(uses[2]) + len(uses[3])]
    assert min(per_run) >= 0.3 * len(every), per_run  # both runs get their turn
    assert limited("tenant_bucket") > before["tenant_bucket"]
    assert limited("run_rate") == before["run_rate"]  # 30/s each was never the limit


async def test_a_cancelled_wait_stops_at_once(nats_server: EmbeddedNats, prefix: str) -> None:
    spec = [BucketSpec(key_of("run", "t1", "slow"), 1, 1.0, "run_rate")]
    async with limiters(nats_server.url, prefix, 1) as (lim,):
        await lim.acquire(spec)  # the one call of the burst
        stop = asyncio.Event()
        waiting = asyncio.create_task(lim.acquire(spec, stop))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        stop.set()
        t0 = time.monotonic()
        with pytest.raises(Stopped):
            await waiting
        assert time.monotonic() - t0 < 0.1


async def test_while_nats_is_away_calls_wait_and_go_on_after(tmp_path: Path) -> None:
    port = free_port()
    srv = EmbeddedNats(tmp_path / "nats", port=port).start()
    spec = [BucketSpec(key_of("run", "t1", "r"), 50, 0.2, "run_rate")]  # hold: 50 ms
    before = limited("bucket_unavailable")
    try:
        async with limiters(srv.url, "rl", 1) as (lim,):
            await lim.acquire(spec)
            srv.stop()
            await asyncio.sleep(0.2)  # what this process held has expired
            calls = asyncio.gather(*(lim.acquire(spec) for _ in range(5)))
            await asyncio.sleep(2.5)  # longer than a bucket call may take: given up, asked again
            assert not calls.done(), "a call went out without its token"
            srv = EmbeddedNats(tmp_path / "nats", port=port).start()
            back = time.monotonic()
            await asyncio.wait_for(calls, 30)
            print(f"\ncalls went on {time.monotonic() - back:.2f} s after NATS was back")
        assert limited("bucket_unavailable") > before
    finally:
        srv.stop()


def test_the_server_clock_estimate_is_never_ahead_and_follows_a_correction() -> None:
    clock = ServerClock()
    assert clock.stale(0)
    clock.observe(1_000_500, 1_000, tight=True)  # answered 500 ns after stamping... or later
    clock.observe(1_000_200, 1_000)  # an older stamp bounds less: ignored
    assert clock.at(2_000) == 2_000 + 999_500 and not clock.stale(2_000)
    assert clock.stale(1_000 + SYNC_EVERY_NS)
    # The server's clock is set back by 1 ms: followed once two sync periods have passed.
    for k in (1, 2):
        clock.observe(1_000_500 - 1_000_000 + k * SYNC_EVERY_NS, 1_000 + k * SYNC_EVERY_NS)
    assert clock.at(0) == -500


def test_nats_timestamps_parse_to_the_nanosecond() -> None:
    assert rfc3339_ns("1970-01-01T00:00:01.000000002Z") == 1_000_000_002
    assert rfc3339_ns("1970-01-01T01:00:01.5+01:00") == 1_500_000_000
    assert rfc3339_ns("2026-12-06T02:15:37Z") % 1_000_000_000 == 0


def test_bucket_keys_are_valid_kv_keys() -> None:
    assert key_of("host", "registry.example.com:5000") == "host.registry=2Eexample=2Ecom=3A5000"
    assert key_of("run", "t-1", "r_2") == "run.t-1.r_2"
    assert Counter(key_of("tenant", x) for x in ("a.b", "a=2Eb")).most_common(1)[0][1] == 1


async def test_each_call_that_waited_for_its_turn_counts_once(
    nats_server: EmbeddedNats, prefix: str
) -> None:
    spec = [
        BucketSpec(key_of("run", "t1", "counted"), 8, 1.0, "run_rate"),  # 6 at once, then 8/s
        BucketSpec(key_of("tenant", "t1"), 1000, 1.0, "tenant_bucket"),  # never the limit
    ]
    before = {r: limited(r) for r in ("run_rate", "tenant_bucket")}
    async with limiters(nats_server.url, prefix, 1) as (lim,):
        t0 = time.monotonic()

        async def call() -> float:
            await lim.acquire(spec)
            return time.monotonic() - t0

        took = sorted(await asyncio.gather(*(call() for _ in range(11))))
    assert max(took[:6]) < 0.1 < min(took[6:])
    assert limited("run_rate") - before["run_rate"] == 5
    assert limited("tenant_bucket") == before["tenant_bucket"]
