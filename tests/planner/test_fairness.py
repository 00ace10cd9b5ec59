"""Two tenants, 40,000 impacted images and 10: a fair runner serves the small one within
its first seconds, not after the big one's 80 segments (real nats-server and RocksDB)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from nats.errors import TimeoutError as NatsTimeout

from streamproc.bus import jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.events import payloads as p
from streamproc.events.envelope import decode, new_event
from streamproc.hlc import wall_ms
from streamproc.impact.index import ImpactIndex
from streamproc.planner.model import StaticSource
from streamproc.planner.settings import PlannerSettings
from tests.planner.harness import PlannerProcess
from tests.planner.util import add_images, created, lib

WORK_S = 0.05
"""Simulated time a runner spends on one segment."""


class FairConsumer:
    """A minimal runner front end following the contract: one durable pull consumer per
    (tenant, priority) on ``<prefix>.work.<tenant>.segment.<priority>``, tenants served
    round-robin, a tenant's most urgent priority first."""

    def __init__(self, nc: FastClient, prefix: str, stream: str) -> None:
        self.nc = nc
        self.prefix = prefix
        self.stream = stream
        self.js = nc.jetstream()
        self.subs: dict[str, dict[int, object]] = {}
        self.served: list[tuple[str, float, int]] = []

    async def discover(self) -> None:
        doc = await jsapi.request(
            self.nc, f"STREAM.INFO.{self.stream}", {"subjects_filter": f"{self.prefix}.work.>"}
        )
        for subject in doc.get("state", {}).get("subjects") or {}:
            _, _, tenant, _, prio = subject.split(".")
            if int(prio) not in self.subs.get(tenant, {}):
                sub = await self.js.pull_subscribe(
                    subject, durable=f"fair_{tenant}_p{prio}", stream=self.stream
                )
                self.subs.setdefault(tenant, {})[int(prio)] = sub

    async def take(self, tenant: str) -> bool:
        for prio in sorted(self.subs[tenant]):
            try:
                msgs = await self.subs[tenant][prio].fetch(1, timeout=0.02)  # type: ignore[attr-defined]
            except NatsTimeout:
                continue
            seg = decode(msgs[0].data)
            await asyncio.sleep(WORK_S)  # "scan" the segment
            await msgs[0].ack()
            self.served.append((tenant, time.monotonic(), len(seg.payload.digests)))
            return True
        return False

    async def run(self, stop: asyncio.Event) -> None:
        turn = 0
        while not stop.is_set():
            await self.discover()
            tenants = sorted(self.subs)
            if not tenants:
                await asyncio.sleep(0.01)
                continue
            for i in range(len(tenants)):  # round-robin: next tenant with work
                tenant = tenants[(turn + i) % len(tenants)]
                if await self.take(tenant):
                    turn = (turn + i + 1) % len(tenants)
                    break
            else:
                await asyncio.sleep(0.01)


async def test_small_tenant_is_served_beside_a_huge_one(
    nc: FastClient,
    publisher: Publisher,
    prefix: str,
    stream_names: tuple[str, str, str],
    state_dir: Path,
) -> None:
    _, work, _ = stream_names
    index = ImpactIndex()
    add_images(index, "big", 40_000, keys_of=lambda n: [lib(1)])
    add_images(index, "small", 10, keys_of=lambda n: [lib(1)])
    now = f"{wall_ms()}:0:gw"
    await publisher.publish_events(
        [
            new_event("schedule.created", t, created("s", subscriptions=["feedser"]), now)
            for t in ("big", "small")
        ]
    )
    cfg = PlannerSettings(debounce_s=0)  # segments of 500: the big run has 80
    planner = await PlannerProcess(
        nc, publisher, prefix, state_dir, StaticSource(index), cfg
    ).start()
    consumer = FairConsumer(nc, prefix, work)
    stop = asyncio.Event()
    task = asyncio.create_task(consumer.run(stop))
    try:
        t0 = time.monotonic()
        exports = [
            new_event(
                "export.feedser",
                t,
                p.FeedserExport(export_id=f"x-{t}", changed_product_keys=[lib(1)]),
                f"{wall_ms()}:0:gw",
            )
            for t in ("big", "small")  # the big one first
        ]
        await publisher.publish_events(exports)
        deadline = time.monotonic() + 30
        while not any(t == "small" for t, _, _ in consumer.served):
            assert time.monotonic() < deadline, f"small tenant not served: {consumer.served[:5]}"
            await asyncio.sleep(0.02)
    finally:
        stop.set()
        await task
        await planner.stop()
    small_at = next(at for t, at, _ in consumer.served if t == "small")
    big_before = sum(1 for t, at, _ in consumer.served if t == "big" and at < small_at)
    assert small_at - t0 < 10.0  # within its first seconds (planning 40k images included)
    assert big_before <= 3, f"{big_before} big segments were served first"
    print(f"small served {small_at - t0:.2f} s after the exports, after {big_before} big segments")
    info = await jsapi.stream_info(nc, work)
    assert info is not None and info.state.messages >= 75  # the big backlog is still there
