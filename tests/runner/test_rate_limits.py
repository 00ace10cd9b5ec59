"""Rate limits hold across runner processes: a planner and three ``streamproc runner``
processes on a real nats-server, and a scanner stand-in that records when each call
arrives. In every 5-second window the calls a bucket governs stay within 5 x its rate
+ 10 %, plus one burst (``STREAMPROC_PLANNER_BURST_S``, 1 s of the rate):

- a run's ``limits.ratePerSecond`` (600 images at 20/s, more segments than shards) over
  every segment and runner;
- a tenant's bucket (``STREAMPROC_PLANNER_TENANT_RATE``) over two runs of the tenant;
- a registry host's bucket (``STREAMPROC_PLANNER_REGISTRY_RATE``) over the content-refresh
  runs of two tenants on that host.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import msgspec
import pytest
from aiohttp import web

from streamproc.bus import direct, streams
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.events import payloads as p
from streamproc.events.catalog import aggregate_subject
from streamproc.events.envelope import Envelope, decode, new_event
from streamproc.hlc import wall_ms
from streamproc.natsd.server import EmbeddedNats, free_port
from tests.cluster.processes import clean_env, wait_ready
from tests.cluster.system import Installation, read_events
from tests.helpers import eventually, most_in_a_window

pytestmark = pytest.mark.slow

RUNNERS = ("runner-1", "runner-2", "runner-3")
WINDOW_S = 5.0


@dataclass
class Scanner:
    """Answers every report with no findings, every tag with the image's own digest, and
    records when each call arrived: ``calls[(path, key)]`` (key: tenant or registry host)."""

    hosts: dict[str, str] = field(default_factory=dict)
    """digest → registry host (content refresh resolves ``<host>/app:<digest>``)."""
    calls: dict[tuple[str, str], list[float]] = field(default_factory=lambda: defaultdict(list))
    url: str = ""

    async def reports(self, request: web.Request) -> web.Response:
        body = msgspec.json.decode(await request.read())
        self.calls[("/reports", body.get("tenant", ""))].append(time.monotonic())
        return web.json_response({"imageDigest": body["imageDigest"], "findings": []})

    async def image(self, request: web.Request) -> web.Response:
        digest = request.match_info["digest"]
        return web.json_response({"digest": digest, "ref": f"{self.hosts[digest]}/app:{digest}"})

    async def resolve(self, request: web.Request) -> web.Response:
        host, _, digest = request.query["ref"].partition("/app:")
        self.calls[("/resolve", host)].append(time.monotonic())
        return web.json_response({"digest": digest})

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[Scanner]:
        app = web.Application()
        app.router.add_post("/reports", self.reports)
        app.router.add_get("/images/{digest}", self.image)
        app.router.add_get("/resolve", self.resolve)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        self.url = f"http://127.0.0.1:{port}"
        try:
            yield self
        finally:
            await runner.cleanup()


@dataclass
class Rig:
    system: Installation
    scanner: Scanner
    pub: Publisher
    nc: FastClient
    stream: str

    def _ev(self, kind: str, tenant: str, payload: p.Payload, eid: str | None = None) -> Envelope:
        return new_event(kind, tenant, payload, f"{wall_ms()}:0:test", event_id=eid)

    async def catalog(self, tenant: str, host: str, n: int, limits: p.Limits) -> None:
        """Schedule ``s`` with ``limits`` and ``n`` images of ``tenant`` on ``host``."""
        schedule = p.ScheduleCreated(
            schedule_id="s", name="s", cron="0 2 * * *", timezone="UTC", limits=limits,
            subscriptions=[],
        )  # fmt: skip
        images = []
        for i in range(n):
            digest = "sha256:" + hashlib.sha256(f"{tenant}/{i}".encode()).hexdigest()
            self.scanner.hosts[digest] = host
            component = p.Component(purl="pkg:deb/debian/lib@1.0", product_key="pkg:deb/debian/lib")
            indexed = p.ImageIndexed(
                digest=digest, registry=host, repository="app", components=[component]
            )
            images.append(self._ev("image.indexed", tenant, indexed))
        await self.pub.publish_events([self._ev("schedule.created", tenant, schedule), *images])

    async def run(self, tenant: str, run_id: str, mode: p.Mode = "analysis-only") -> None:
        req = p.RunRequested(run_id=run_id, trigger="manual", schedule_id="s", mode=mode)
        await self.pub.publish_event(self._ev("run.requested", tenant, req, run_id))

    async def completed(self, tenant: str, run_id: str) -> p.RunCompleted | None:
        subject = aggregate_subject(self.system.prefix, tenant, "run", run_id)
        got = await direct.last_of(self.nc, self.stream, subject)
        env = decode(got.messages[0].data) if got.messages else None
        return env.payload if env is not None and env.kind == "run.completed" else None

    async def wait_completed(self, runs: Sequence[tuple[str, str]], timeout: float) -> None:
        async def done() -> bool:
            return all([await self.completed(t, r) for t, r in runs])

        await eventually(done, timeout, f"runs {runs} completed", every=0.5)

    async def rate_limited(self) -> dict[str, float]:
        """``scheduler_rate_limited_total`` by reason, summed over the runner processes."""
        out: dict[str, float] = defaultdict(float)
        line = re.compile(r'^scheduler_rate_limited_total\{reason="([^"]+)"\} (\S+)$', re.M)
        async with aiohttp.ClientSession() as http:
            for name in RUNNERS:
                async with http.get(f"{self.system.http(name)}/metrics") as r:
                    for reason, value in line.findall(await r.text()):
                        out[reason] += float(value)
        return out

    async def runners_of(self, run_id: str) -> set[str]:
        return {
            e.payload.runner
            for _, e in await read_events(self.nc, self.stream)
            if e.kind == "segment.started" and e.payload.run_id == run_id
        }


@contextlib.asynccontextmanager
async def rig(
    tmp: Path, server: EmbeddedNats, nc: FastClient, prefix: str, **env: str
) -> AsyncIterator[Rig]:
    """The scanner stand-in, one planner and three runner processes (docs/roles.md)."""
    async with Scanner().serving() as scanner:
        environment = clean_env(
            STREAMPROC_PLANNER_SEGMENT_SIZE="25", STREAMPROC_LEASE_TTL_S="1.5", **env
        )
        system = Installation(tmp, server.url, prefix, environment)
        system.add("planner", "planner")
        for name in RUNNERS:
            system.add(name, "runner", "--scanner-url", scanner.url)
        await streams.apply(nc, streams.definitions(prefix))
        system.start()
        try:
            await asyncio.gather(*(wait_ready(proc, system.http(n))
                                   for n, proc in system.procs.items()))  # fmt: skip
            async with Publisher(nc, prefix=prefix) as pub:
                yield Rig(system, scanner, pub, nc, streams.stream_names(prefix)[0])
        finally:
            codes = system.stop()
            assert all(c == 0 for c in codes.values()), {
                n: system.procs[n].tail() for n in system.procs
            }


def windows(times: list[float]) -> tuple[int, list[int]]:
    """The most calls in any 5 s window (one starting at each call), and the counts of the
    consecutive 5 s windows from the first call (for the record)."""
    ts = sorted(times)
    counts = [0] * (int((ts[-1] - ts[0]) // WINDOW_S) + 1)
    for t in ts:
        counts[int((t - ts[0]) // WINDOW_S)] += 1
    return most_in_a_window(ts, WINDOW_S), counts


def allowed(rate: float, burst_s: float = 1.0) -> float:
    return WINDOW_S * rate * 1.1 + max(1.0, rate * burst_s)


async def test_a_runs_rate_is_a_total_over_every_segment_and_runner(
    nats_server: EmbeddedNats, nc: FastClient, prefix: str, tmp_path: Path
) -> None:
    rate = 20
    async with rig(tmp_path, nats_server, nc, prefix) as r:
        # 600 images in 24 segments over 2 shards: each runner works up to two at once.
        await r.catalog("acme", "registry.test", 600, p.Limits(rate_per_second=rate, parallelism=2))
        began = time.monotonic()
        await r.run("acme", "run-1")
        await r.wait_completed([("acme", "run-1")], 120)
        took = time.monotonic() - began
        done = await r.completed("acme", "run-1")
        assert done is not None and done.stats.completed == 600
        calls = r.scanner.calls[("/reports", "acme")]
        most, counts = windows(calls)
        print(f"\nrun at {rate}/s: 600 calls in {took:.1f} s; most in a 5 s window {most} "
              f"(allowed {allowed(rate):.0f}); per 5 s window: {counts}")  # fmt: skip
        assert len(calls) == 600
        assert most <= allowed(rate), counts
        assert took < 2 * 600 / rate, "far slower than the run's rate"
        assert len(await r.runners_of("run-1")) == 3  # every runner worked on it
        assert (await r.rate_limited())["run_rate"] > 0


async def test_a_tenant_bucket_and_a_registry_hosts_bucket_hold_across_runs(
    nats_server: EmbeddedNats, nc: FastClient, prefix: str, tmp_path: Path
) -> None:
    tenant_rate, registry_rate = 10, 8
    fast = p.Limits(rate_per_second=50, parallelism=2)
    host = "shared.registry.test:5000"
    async with rig(
        tmp_path, nats_server, nc, prefix,
        STREAMPROC_PLANNER_TENANT_RATE=str(tenant_rate),
        STREAMPROC_PLANNER_REGISTRY_RATE=str(registry_rate),
    ) as r:  # fmt: skip
        await r.catalog("busy", "registry.test", 80, fast)
        for tenant in ("refresh-a", "refresh-b"):
            await r.catalog(tenant, host, 40, fast)
        runs = [
            ("busy", "run-a"),
            ("busy", "run-b"),
            ("refresh-a", "run-c"),
            ("refresh-b", "run-d"),
        ]
        began = time.monotonic()
        for tenant, run_id in runs:
            mode: p.Mode = "content-refresh" if tenant.startswith("refresh") else "analysis-only"
            await r.run(tenant, run_id, mode)
        await r.wait_completed(runs, 120)
        took = time.monotonic() - began
        tenant_calls = r.scanner.calls[("/reports", "busy")]
        registry_calls = r.scanner.calls[("/resolve", host)]
        t_most, t_counts = windows(tenant_calls)
        h_most, h_counts = windows(registry_calls)
        print(f"\ntenant bucket {tenant_rate}/s, two runs at 50/s: {len(tenant_calls)} calls; "
              f"most in a 5 s window {t_most} (allowed {allowed(tenant_rate):.0f}): {t_counts}"
              f"\nregistry host {registry_rate}/s, two tenants' refreshes: {len(registry_calls)}"
              f" calls; most in a 5 s window {h_most} (allowed {allowed(registry_rate):.0f}): "
              f"{h_counts}; all done in {took:.1f} s")  # fmt: skip
        assert len(tenant_calls) == 160 and len(registry_calls) == 80
        assert t_most <= allowed(tenant_rate), t_counts
        assert h_most <= allowed(registry_rate), h_counts
        limited = await r.rate_limited()
        assert limited["tenant_bucket"] > 0 and limited["registry_bucket"] > 0
