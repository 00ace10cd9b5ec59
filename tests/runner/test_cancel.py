"""Cancel during a 20,000-image run: verdicts stop within 2 s of the request, the remaining
segments are acked as cancelled and counted, and the run ends ``cancelled`` exactly once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.hlc import Timestamp, wall_ms
from streamproc.natsd.server import EmbeddedNats
from streamproc.runner.settings import RunnerSettings
from streamproc.scanner.faults import FaultConfig
from tests.runner.harness import (
    Planner,
    digest_of,
    events,
    register_images,
    scanner,
    start_runner,
    stream_messages,
    wait_until,
)

N = 20_000


async def test_cancel_a_20k_image_run_stops_within_two_seconds(
    nats_server: EmbeddedNats,
    nc: FastClient,
    prefix: str,
    publisher: Publisher,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    svc = await scanner(["GHSA-r9hx-vwmv-q579"], FaultConfig(latency_ms=5))
    digests = [digest_of(f"big-{i}") for i in range(N)]
    register_images(svc, dict.fromkeys(digests, "python-app.spdx23.json"))
    runner = await start_runner(
        tmp_path,
        nats_server.url,
        prefix,
        RunnerSettings(scanner_url=svc.url, workers=2, inflight=8),
    )
    planner = Planner(publisher, prefix)
    try:
        await planner.run("acme", "big", digests, size=500)

        async def some() -> bool:
            return svc.stats["reports"] >= 800

        await wait_until(some, timeout=60, every=0.05)
        cancel_ms = wall_ms()
        await planner.cancel("acme", "big")

        async def cancelled() -> list:
            return [e for e in await events(nc, stream_names[0], "run.cancelled")]

        done = await wait_until(cancelled, timeout=30, every=0.2)
        verdicts = await events(nc, stream_names[0], "verdict.recorded")
        last_ms = max(Timestamp.parse(v.hlc).physical for v in verdicts)
        assert last_ms - cancel_ms <= 2000, f"verdicts went on {last_ms - cancel_ms} ms"
        assert len(verdicts) < N / 2, "the cancel landed early in the run"
        assert len(done) == 1
        stats = done[0].payload.stats
        assert stats.completed == len(verdicts)
        assert Counter(v.payload.digest for v in verdicts).most_common(1)[0][1] == 1
        assert stats.completed + stats.failed + stats.cancelled == N
        assert stats.cancelled > N / 2
        segs = await events(nc, stream_names[0], "segment.completed")
        assert len(segs) == N // 500 and sum(s.payload.cancelled for s in segs) == stats.cancelled
        work = await stream_messages(nc, stream_names[1])
        assert work == [], "every segment was acked (as cancelled or done)"
        assert not await events(nc, stream_names[0], "run.completed")
    finally:
        await runner.close()
        await svc.close()


async def test_a_cancel_stops_calls_waiting_for_their_rate_at_once(
    nats_server: EmbeddedNats,
    nc: FastClient,
    prefix: str,
    publisher: Publisher,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    """16 calls wait in line at a 2/s run bucket: a cancel ends them, not their turns."""
    svc = await scanner(["GHSA-r9hx-vwmv-q579"])
    digests = [digest_of(f"slow-{i}") for i in range(60)]
    register_images(svc, dict.fromkeys(digests, "python-app.spdx23.json"))
    settings = RunnerSettings(scanner_url=svc.url, workers=2, inflight=8)
    runner = await start_runner(tmp_path, nats_server.url, prefix, settings)
    planner = Planner(publisher, prefix)
    try:
        await planner.run("acme", "slow", digests, size=30, rate=2)

        async def started() -> bool:
            return svc.stats["reports"] >= 3  # past the first burst: the rest wait in line

        await wait_until(started, timeout=30, every=0.05)
        await planner.cancel("acme", "slow")
        calls = svc.stats["reports"]
        t0 = wall_ms()

        async def cancelled() -> list:
            return await events(nc, stream_names[0], "run.cancelled")

        done = await wait_until(cancelled, timeout=30, every=0.1)
        assert Timestamp.parse(done[0].hlc).physical - t0 <= 1500
        assert svc.stats["reports"] - calls <= 1  # at most the one that had its token
        assert done[0].payload.stats.cancelled >= 50
    finally:
        await runner.close()
        await svc.close()
