"""Fault (d): during a 20,000-image run, SIGKILL a runner, then the active planner. The
standby planner takes the lease and acts (it plans the next run), the surviving runner
finishes the dead runner's segments, every image of the run gets exactly one verdict, and
the run completes — on a 3-node cluster with R3 streams and an R3 lease bucket."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest

from streamproc.bus import streams
from streamproc.bus.connect import connect
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.events import payloads as p
from streamproc.events.envelope import decode, new_event
from streamproc.hlc import wall_ms
from streamproc.ids import derive_id
from streamproc.natsd.cluster import NatsCluster
from streamproc.natsd.server import free_port
from streamproc.scanner.demo import DATA
from tests.cluster.processes import RoleProcess, clean_env, wait_ready
from tests.cluster.system import Installation, read_events, wait_for

pytestmark = pytest.mark.cluster

TENANT = "acme"
IMAGES = 20_000
KILL_RUNNER_AT = 3_000
KILL_PLANNER_AT = 7_000
"""Verdicts recorded when the runner, then the active planner, are killed."""


def digest(i: int) -> str:
    return f"sha256:{derive_id('takeover', i):0<64}"[:71]


def hlc() -> str:
    return f"{wall_ms()}:0:test"


async def lease_state(http: aiohttp.ClientSession, url: str) -> str | None:
    try:
        async with http.get(f"{url}/readyz") as r:
            return (await r.json()).get("lease", {}).get("planner")
    except (aiohttp.ClientError, TimeoutError):
        return None


COMPONENTS = [
    p.Component(purl="pkg:deb/debian/zlib1g@1:1.2.13.dfsg-1?arch=amd64",
                product_key="pkg:deb/debian/zlib1g"),
    p.Component(purl="pkg:deb/debian/openssl@3.0.11-1~deb12u2?arch=amd64",
                product_key="pkg:deb/debian/openssl"),
]  # fmt: skip
"""Two packages per image: the scanner's work per image stays small, the run's size is the
test."""


async def index_images(pub: Publisher, digests: list[str]) -> None:
    """The indexer's part: one ``image.indexed`` per image; the planner's index and the
    scanner both learn the images from it."""
    events = [
        new_event("image.indexed", TENANT,
                  p.ImageIndexed(digest=d, registry="registry.test", repository=f"app{i % 50}",
                                 namespace="prod", tags=["latest"], components=COMPONENTS),
                  hlc(), event_id=derive_id("index", d))
        for i, d in enumerate(digests)
    ]  # fmt: skip
    await pub.publish_events(events)


async def request_run(pub: Publisher, run_id: str) -> None:
    """What ``POST /run`` publishes: a manual run over every image of the tenant."""
    payload = p.RunRequested(
        run_id=run_id,
        trigger="manual",
        selection=p.Selection(),
        reason=p.RunReason(text="takeover test"),
        requested_by="test",
    )
    await pub.publish_event(new_event("run.requested", TENANT, payload, hlc(), event_id=run_id))


class Watch:
    """Progress as it is published (core subscriptions, cheap): verdicts counted, and the
    kinds of events seen per run. The assertions read the stream itself at the end."""

    def __init__(self) -> None:
        self.verdicts = 0
        self.runs: dict[str, set[str]] = {}
        self.subs: list[Any] = []

    async def start(self, nc: FastClient, prefix: str) -> Watch:
        async def verdict(_msg: Any) -> None:
            self.verdicts += 1

        async def run(msg: Any) -> None:
            event = decode(msg.data)
            self.runs.setdefault(event.payload.run_id, set()).add(event.kind)

        self.subs.append(await nc.subscribe(f"{prefix}.events.{TENANT}.verdict.>", cb=verdict))
        self.subs.append(await nc.subscribe(f"{prefix}.events.{TENANT}.run.>", cb=run))
        return self

    async def close(self) -> None:
        for sub in self.subs:
            await sub.unsubscribe()

    async def reached(self, n: int) -> bool:
        return self.verdicts >= n

    def saw(self, run_id: str, kind: str) -> Any:
        async def check() -> bool:
            return kind in self.runs.get(run_id, set())

        return check


async def test_kill_a_runner_then_the_active_planner_during_a_20k_image_run(
    cluster: NatsCluster, tmp_path: Path, prefix: str
) -> None:
    env = clean_env(
        STREAMPROC_LEASE_TTL_S="2.5",
        STREAMPROC_PLANNER_DEBOUNCE_S="0",
        STREAMPROC_PLANNER_DEFAULT_RATE="100000",
        STREAMPROC_PLANNER_TENANT_RATE="100000",
        STREAMPROC_PLANNER_DEFAULT_PARALLELISM="8",
        STREAMPROC_PLANNER_SEGMENT_SIZE="500",
        STREAMPROC_RUNNER_ACK_WAIT_S="2",
        STREAMPROC_RUNNER_WORKERS="4",
        STREAMPROC_RUNNER_INFLIGHT="16",
    )
    scanner_port = free_port()
    scanner_url = f"http://127.0.0.1:{scanner_port}"
    scanner = RoleProcess(
        "scanner",
        ["scanner", "--port", str(scanner_port), "--kev", str(DATA / "kev.json"),
         "--debian-sources", str(DATA / "osv" / "debian-sources.json"),
         "--nats-url", cluster.url, "--prefix", prefix, "--data-dir", str(tmp_path / "scanner"),
         "--node-id", "scanner"],
        env, tmp_path / "logs" / "scanner.log",
    ).start()  # fmt: skip
    system = Installation(tmp_path, cluster.url, prefix, env)
    for name in ("planner-a", "planner-b"):
        system.add(name, "planner")
    for name in ("runner-1", "runner-2"):
        system.add(name, "runner", "--scanner-url", scanner_url)
    nc = await connect(cluster.url)
    http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
    watch = await Watch().start(nc, prefix)
    try:
        system.start()
        for name in system.procs:
            await wait_ready(system.procs[name], system.http(name))
        urls = {name: system.http(name) for name in ("planner-a", "planner-b")}
        await wait_for(lambda: _one_active(http, urls), 30, "one planner active")

        digests = [digest(i) for i in range(IMAGES)]
        stream = streams.stream_names(prefix)[0]
        async with Publisher(nc, prefix=prefix) as pub:
            await index_images(pub, digests)
            for url in urls.values():  # both planners folded the whole catalog
                await wait_for(lambda u=url: _caught_up(http, u), 60, "index folded")
            run_id = derive_id("takeover-run", prefix)
            started = time.monotonic()
            await request_run(pub, run_id)

            await wait_for(lambda: watch.reached(KILL_RUNNER_AT), 60, "first verdicts")
            system.kill(["runner-1"])
            await wait_for(lambda: watch.reached(KILL_PLANNER_AT), 60, "more verdicts")
            assert watch.verdicts < IMAGES, "the planner kill must land mid-run"
            # Whichever holds the lease now (under load it may have changed hands already).
            states = await wait_for(lambda: _one_active(http, urls), 30, "one planner active")
            active = next(name for name, state in states.items() if state == "active")
            standby = next(name for name in urls if name != active)
            assert states[standby] == "standby", states
            system.kill([active])
            killed_at = time.monotonic()
            await wait_for(lambda: _is(http, urls[standby], "active"), 30, "takeover", every=0.1)
            takeover_s = time.monotonic() - killed_at
            await wait_for(watch.saw(run_id, "run.completed"), 120, "run completed")
            run_s = time.monotonic() - started
            # The new active planner plans: a second run, over a handful of images.
            second = derive_id("after-takeover", prefix)
            few = p.Selection(scope="by-digest", digests=digests[:10])
            await pub.publish_event(new_event(
                "run.requested", TENANT,
                p.RunRequested(run_id=second, trigger="manual", selection=few,
                               requested_by="test"),
                hlc(), event_id=second))  # fmt: skip
            await wait_for(watch.saw(second, "run.planned"), 30, "the new active plans")

        evs = [e for _, e in await read_events(nc, stream)]
        verdicts = Counter(
            e.payload.digest
            for e in evs
            if e.kind == "verdict.recorded" and e.payload.run_id == run_id
        )
        assert len(verdicts) == IMAGES and set(verdicts.values()) == {1}
        (done,) = [
            e.payload for e in evs if e.kind == "run.completed" and e.payload.run_id == run_id
        ]
        assert done.stats.completed == IMAGES and done.stats.failed == 0, done
        planned = [e for e in evs if e.kind == "run.planned" and e.payload.run_id == run_id]
        assert len(planned) == 1
        redelivered = [e for e in evs if e.kind == "segment.started" and e.payload.attempt > 1]
        assert redelivered, "the killed runner's segment was taken over"
        print(
            f"\nplanner takeover: {IMAGES} images in {run_s:.1f} s; standby active "
            f"{takeover_s:.1f} s after the SIGKILL; {len(redelivered)} segment(s) redelivered"
        )
        codes = system.stop()
        assert codes[standby] == 0 and codes["runner-2"] == 0, codes
    finally:
        await watch.close()
        await http.close()
        await nc.close()
        system.stop()
        scanner.stop()


async def _is(http: aiohttp.ClientSession, url: str, state: str) -> bool:
    return await lease_state(http, url) == state


async def _caught_up(http: aiohttp.ClientSession, url: str) -> bool:
    try:
        async with http.get(f"{url}/readyz") as r:
            doc = msgspec.json.decode(await r.read())
    except (aiohttp.ClientError, TimeoutError):
        return False
    return r.status == 200 and not any(doc.get("lag", {}).values())


async def _one_active(http: aiohttp.ClientSession, urls: dict[str, str]) -> dict[str, Any]:
    """The planners' lease states when exactly one is active and the other standby."""
    states = {name: await lease_state(http, url) for name, url in urls.items()}
    return states if sorted(map(str, states.values())) == ["active", "standby"] else {}
