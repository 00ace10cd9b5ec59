"""Which buckets a segment's calls take, from what the planner recorded; segments of schema
1 (recorded before the buckets were shared) still decode, keep their audit digest and are
paced by their run's bucket at the rate they recorded; and a retry after a 429 waits for
its tokens like a first attempt."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from aiohttp import web

from streamproc.audit.entry import make_entry
from streamproc.backends.model import ToolError
from streamproc.bus import jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.events import payloads as p
from streamproc.events.envelope import decode, encode, new_event
from streamproc.natsd.server import EmbeddedNats, free_port
from streamproc.runner.backend import ToolBackend
from streamproc.runner.limiter import BucketSpec, Limiter
from streamproc.runner.pacing import registry_buckets, report_buckets
from streamproc.runner.ratebucket import RateStore, definition, key_of
from streamproc.runner.scanner_client import ImageFailed, ScannerClient
from tests.helpers import most_in_a_window

HLC = "1767225600000:0:node-a"
DIGEST = "sha256:" + "ab" * 32


def test_a_planned_segment_names_its_runs_tenants_and_hosts_buckets() -> None:
    seg = p.SegmentEnqueued(
        segment_id="s", run_id="r:1", shard=0, digests=[DIGEST], rate_per_second=20,
        mode="content-refresh", tenant_rate=200, registry_host="reg.example:5000",
        registry_rate=8, burst_s=2.0,
    )  # fmt: skip
    assert report_buckets("acme", seg) == [
        BucketSpec("run.acme.r=3A1", 20, 2.0, "run_rate"),
        BucketSpec("tenant.acme", 200, 2.0, "tenant_bucket"),
    ]
    assert registry_buckets(seg) == [
        BucketSpec("host.reg=2Eexample=3A5000", 8, 2.0, "registry_bucket")
    ]
    analysis = p.SegmentEnqueued(
        segment_id="s", run_id="r", shard=0, digests=[DIGEST], rate_per_second=20, tenant_rate=9
    )
    assert registry_buckets(analysis) == []  # no registry call to pace


def test_a_schema_1_segment_decodes_keeps_its_digest_and_is_paced_by_its_run() -> None:
    current = new_event(
        "segment.enqueued",
        "acme",
        p.SegmentEnqueued(segment_id="s", run_id="r", shard=0, digests=[DIGEST], rate_per_second=5),
        HLC,
        event_id="e1",
    )
    doc = json.loads(encode(current))
    doc["schema"] = 1
    old = decode(json.dumps(doc).encode())
    assert old.schema == 2 and isinstance(old.payload, p.SegmentEnqueued)
    # Encoded again, the payload is byte for byte what schema 1 wrote: the audit chain of
    # an old log rebuilds to the same links.
    assert json.loads(encode(old))["payload"] == doc["payload"]
    assert "tenantRate" not in doc["payload"]
    assert make_entry(old, 0, None).payload_digest == make_entry(current, 0, None).payload_digest
    # Its recorded rate (the shard's share then) is taken as its run's: slower, never faster.
    assert report_buckets("acme", old.payload) == [BucketSpec("run.acme.r", 5, 1.0, "run_rate")]


async def test_retries_after_a_429_wait_for_their_tokens_too(
    nats_server: EmbeddedNats, nc: FastClient, prefix: str
) -> None:
    """Every other call is answered 429: the retries go out within the bucket as well, so
    the attempts of any 1 s window stay within the rate and one burst."""
    arrivals: list[float] = []

    async def reports(request: web.Request) -> web.Response:
        body = await request.json()
        arrivals.append(time.monotonic())
        if len(arrivals) % 2:
            return web.json_response({"error": "busy"}, status=429, headers={"Retry-After": "0"})
        return web.json_response({"imageDigest": body["imageDigest"], "findings": []})

    app = web.Application()
    app.router.add_post("/reports", reports)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    client = ScannerClient(f"http://127.0.0.1:{port}", backoff_base_s=0.01, backoff_cap_s=0.02)
    rate = 10
    spec = [BucketSpec(key_of("run", "t1", "throttled"), rate, 0.5, "run_rate")]  # burst 5
    async with Publisher(nc, prefix=prefix) as pub:
        limiter = Limiter(RateStore(pub, prefix, "r1"))
        await limiter.store.open(1)
        try:

            async def pace() -> None:
                await limiter.acquire(spec)

            retries = await asyncio.gather(
                *(client.report(DIGEST, f"k{i}", pace=pace) for i in range(20))
            )
        finally:
            await limiter.close()
            await client.close()
            await runner.cleanup()
            await jsapi.request(nc, f"STREAM.DELETE.{definition(prefix, 1)['name']}")
    assert sum(r[2] for r in retries) >= 15 and len(arrivals) >= 35  # most were retried
    most = most_in_a_window(arrivals, 1.0)
    assert most <= rate + 5 + 1, most  # rate and burst, attempts and retries together


class _FailingTool:
    """A tool whose every run fails (as grype without its database)."""

    kind = "grype"

    async def scan(self, name: str) -> None:
        raise ToolError("exit_status", "grype exited with 3")


class _Counted:
    def __init__(self) -> None:
        self.reports = self.registries = 0

    async def report(self) -> None:
        self.reports += 1

    async def registry(self) -> None:
        self.registries += 1


async def test_each_run_of_a_tool_retries_included_waits_for_its_tokens() -> None:
    tool: Any = _FailingTool()
    backend = ToolBackend(
        tool, lambda _t, _d: "sbom", {}, attempts=3, backoff_base_s=0.001, backoff_cap_s=0.002
    )
    pace = _Counted()
    with pytest.raises(ImageFailed):
        await backend.answer("acme", DIGEST, "k", False, pace)
    assert (pace.reports, pace.registries) == (3, 0)
