"""Rate-limit benchmark: what the shared leaky buckets cost a runner, and how exactly they
hold a rate across runner processes.

Against an embedded nats-server on loopback, with the runner's own limiter
(``streamproc.runner.limiter``, buckets in JetStream KV, compare-and-set):

- acquires/s of 16 callers against a generous limit (10^6/s, burst 1 s), beside the same
  loop without a limiter: the limiter's overhead per call; once with tokens taken in
  batches (the runner's way) and once one token per compare-and-set (one KV round trip per
  call, the alternative);
- three limiters on their own connections (three runner processes) on one generous
  bucket, and a call that needs two buckets (run and tenant);
- report calls through the runner's scanner client to a stub scanner (a separate process),
  paced by a run's and a tenant's generous buckets, beside the same calls unpaced, in
  alternating slices (the ratio is the median of each pair's);
- accuracy and cost under contention: three limiters on one bucket of 1,000/s for 3 s (the
  calls per second, the most in any 1 s window beside what is allowed: rate + burst), and
  on a run's bucket at the default 50/s within a tenant's at 200/s; KV requests per call.

Medians of ``--trials`` runs; ends with one line of JSON.

    python bench/ratelimit.py [--seconds 2] [--trials 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import uvloop

from streamproc import metrics
from streamproc.bus.connect import connect
from streamproc.bus.publisher import Publisher
from streamproc.natsd.server import EmbeddedNats, free_port
from streamproc.runner import limiter as limiter_module
from streamproc.runner.limiter import BucketSpec, Limiter
from streamproc.runner.ratebucket import RateStore, key_of
from streamproc.runner.scanner_client import ScannerClient

PREFIX = "bench"
LANES = 16
GENEROUS = 1_000_000
STUB = """
import sys
from aiohttp import web
async def reports(request):
    await request.read()
    return web.Response(body=b'{"imageDigest":"sha256:00","findings":[]}',
                        content_type="application/json")
app = web.Application()
app.router.add_post("/reports", reports)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


@contextlib.asynccontextmanager
async def limiters(url: str, n: int) -> AsyncIterator[list[Limiter]]:
    parts = []
    try:
        for i in range(n):
            nc = await connect(url)
            pub = await Publisher(nc, prefix=PREFIX).start()
            parts.append((nc, pub, Limiter(RateStore(pub, PREFIX, f"bench-{i}"))))
        await parts[0][2].store.open(1)
        yield [lim for _, _, lim in parts]
    finally:
        for nc, pub, lim in parts:
            await lim.close()
            await pub.close()
            await nc.close()


async def loop_for(
    seconds: float, lanes: int, call: Callable[[], Awaitable[object]]
) -> list[float]:
    """``lanes`` callers doing ``call`` back to back for ``seconds``: each finish time."""
    end = time.monotonic() + seconds
    out: list[float] = []

    async def lane() -> None:
        while time.monotonic() < end:
            await call()
            out.append(time.monotonic())

    await asyncio.gather(*(lane() for _ in range(lanes)))
    return out


def kv_requests() -> float:
    """Requests to the buckets so far (every outcome), from the runner's own metric."""
    return sum(
        metrics.RATE_BUCKET_CALLS.labels(o)._value.get()
        for o in ("granted", "conflict", "read", "clock", "error")
    )


def most_in(times: list[float], w: float) -> int:
    ts = sorted(times)
    j = best = 0
    for i, t in enumerate(ts):
        while ts[j] < t - w:
            j += 1
        best = max(best, i - j + 1)
    return best


async def nothing() -> None:
    await asyncio.sleep(0)


async def trial(url: str, scanner: str, seconds: float, n: int) -> dict[str, float]:
    fig: dict[str, float] = {}

    def spec(kind: str, rate: float = GENEROUS, *parts: str) -> BucketSpec:
        return BucketSpec(key_of(kind, f"t{n}", *parts), rate, 1.0, "run_rate")

    base = await loop_for(seconds, LANES, nothing)
    fig["bare_loop_per_s"] = len(base) / seconds
    async with limiters(url, 3) as lims:
        one = [spec("run", GENEROUS, "batched")]
        kv = kv_requests()
        got = await loop_for(seconds, LANES, lambda: lims[0].acquire(one))
        fig["batched_per_s"] = len(got) / seconds
        fig["batched_kv_per_call"] = (kv_requests() - kv) / len(got)

        limiter_module.MAX_BATCH = 1
        try:
            single = [spec("run", GENEROUS, "single")]
            got = await loop_for(seconds, LANES, lambda: lims[0].acquire(single))
            fig["per_call_cas_per_s"] = len(got) / seconds
        finally:
            limiter_module.MAX_BATCH = 256

        shared = [spec("run", GENEROUS, "shared")]
        three = await asyncio.gather(
            *(loop_for(seconds, LANES, lambda lim=lim: lim.acquire(shared)) for lim in lims)
        )
        fig["three_runners_per_s"] = sum(len(x) for x in three) / seconds

        pair = [spec("run", GENEROUS, "pair"), spec("tenant")]
        got = await loop_for(seconds, LANES, lambda: lims[0].acquire(pair))
        fig["two_buckets_per_s"] = len(got) / seconds

        client = ScannerClient(scanner, connections=LANES + 4)
        try:
            report = [spec("run", GENEROUS, "http"), spec("tenant", GENEROUS, "http")]

            async def paced() -> None:
                await lims[0].acquire(report)

            # Alternating short slices, so both see the same load of a shared machine.
            slice_s, plain, with_pace = seconds / 4, [], []
            for _ in range(8):
                got = await loop_for(slice_s, LANES, lambda: client.report("sha256:00", "k"))
                plain.append(len(got) / slice_s)
                got = await loop_for(
                    slice_s, LANES, lambda: client.report("sha256:00", "k", pace=paced)
                )
                with_pace.append(len(got) / slice_s)
            fig["http_unpaced_per_s"] = statistics.median(plain)
            fig["http_paced_per_s"] = statistics.median(with_pace)
            fig["http_ratio"] = statistics.median(
                b / a for a, b in zip(plain, with_pace, strict=True)
            )
        finally:
            await client.close()

        binding = [spec("run", 1000, "binding")]
        kv = kv_requests()
        began = time.monotonic()
        three = await asyncio.gather(
            *(loop_for(3.0, LANES, lambda lim=lim: lim.acquire(binding)) for lim in lims)
        )
        every = [t for x in three for t in x]
        fig["binding_per_s"] = (len(every) - 750) / (time.monotonic() - began)  # less the burst
        fig["binding_most_in_1s"] = most_in(every, 1.0)
        fig["binding_kv_per_call"] = (kv_requests() - kv) / len(every)

        # The defaults: a run at 50/s in a tenant's bucket of 200/s, three runners.
        defaults = [spec("run", 50, "defaults"), spec("tenant", 200, "defaults")]
        kv = kv_requests()
        three = await asyncio.gather(
            *(loop_for(3.0, 8, lambda lim=lim: lim.acquire(defaults)) for lim in lims)
        )
        calls = sum(len(x) for x in three)
        fig["defaults_per_s"] = calls / 3.0
        fig["defaults_kv_per_call"] = (kv_requests() - kv) / calls
    return fig


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        srv = EmbeddedNats(Path(tmp) / "nats", port=free_port()).start()
        port = free_port()
        stub = subprocess.Popen([sys.executable, "-c", STUB, str(port)], env=os.environ.copy())
        try:
            scanner = f"http://127.0.0.1:{port}"
            for _ in range(100):
                with contextlib.suppress(OSError):
                    _, w = await asyncio.open_connection("127.0.0.1", port)
                    w.close()
                    break
                await asyncio.sleep(0.05)
            trials = [await trial(srv.url, scanner, args.seconds, n) for n in range(args.trials)]
        finally:
            stub.terminate()
            stub.wait()
            srv.stop()
    med = {k: statistics.median(t[k] for t in trials) for k in trials[0]}
    base = med["bare_loop_per_s"]

    def us(rate: float) -> float:
        return 1e6 / rate - 1e6 / base

    rows = [
        ("16 callers, no limiter (baseline)", med["bare_loop_per_s"], "1.00", "-"),
        ("one bucket, tokens in batches", med["batched_per_s"],
         f"{med['batched_per_s'] / base:.3f}", f"{us(med['batched_per_s']):.1f}"),
        ("one bucket, one KV round trip per call", med["per_call_cas_per_s"],
         f"{med['per_call_cas_per_s'] / base:.3f}", f"{us(med['per_call_cas_per_s']):.1f}"),
        ("three limiters (processes), one bucket", med["three_runners_per_s"], "-", "-"),
        ("two buckets per call (run + tenant)", med["two_buckets_per_s"],
         f"{med['two_buckets_per_s'] / base:.3f}", f"{us(med['two_buckets_per_s']):.1f}"),
        ("report calls to a stub scanner, unpaced (baseline)", med["http_unpaced_per_s"],
         "1.00", "-"),
        ("the same, paced by run + tenant buckets", med["http_paced_per_s"],
         f"{med['http_ratio']:.3f}", "-"),
    ]  # fmt: skip
    print(f"{'case':<52} {'calls/s':>10} {'ratio':>7} {'µs/call':>8}")
    for name, rate, ratio, cost in rows:
        print(f"{name:<52} {rate:>10,.0f} {ratio:>7} {cost:>8}")
    print(
        f"one bucket, tokens in batches: {med['batched_kv_per_call']:.4f} KV requests per call\n"
        f"three limiters on one bucket of 1,000/s: {med['binding_per_s']:,.0f} calls/s after "
        f"the burst; most in any 1 s window {med['binding_most_in_1s']:.0f} (allowed 2,000: "
        f"rate + burst); {med['binding_kv_per_call']:.2f} KV requests per call\n"
        f"three limiters, a run at 50/s in a tenant bucket of 200/s (the defaults): "
        f"{med['defaults_per_s']:.1f} calls/s, {med['defaults_kv_per_call']:.2f} KV requests "
        "per call"
    )
    print(json.dumps({"bench": "ratelimit", "trials": args.trials, **med}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--trials", type=int, default=3)
    uvloop.run(main(parser.parse_args()))
