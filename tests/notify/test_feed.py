"""The Notify HTTP feed (real aiohttp on loopback, real nats-server) and the fail-closed tail:
pages of the caller's own tenant and kind read in one batched direct get, registrations in
the shared KV bucket, a transient JetStream failure answered 503 (never a complete page),
retention gaps refused unless a live registration vouches for the range."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, NamedTuple

import aiohttp
import pytest
from aiohttp import web
from nats.aio.msg import Msg

from streamproc.bus import jsapi, streams
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.client.dpop import DpopKey
from streamproc.client.http import ApiClient
from streamproc.client.tokens import StaticToken
from streamproc.names import PAGE_BYTES
from streamproc.notify import messages as nm
from streamproc.notify.feed_http import add_feed_routes
from streamproc.notify.http_tail import FeedClosed, FeedUnavailable, HttpTail, load_checkpoint
from streamproc.notify.registrations import FeedSettings, bucket_name
from streamproc.problems import PROBLEM_TYPE

BASE = "/api/v1/scheduler/feeds"
READER = "tenant:acme"
CONSUMER = "tenant:acme sub:streamproc-notify"
ADMIN = "tenant:acme scope:scheduler.admin"


class Caller(NamedTuple):
    tenant: str
    subject: str | None
    scopes: frozenset[str]


def who(request: web.Request) -> Caller:
    """Stands in for the gateway's token check: tenant, subject and scopes from the token."""
    token = request.headers.get("Authorization", "").removeprefix("Bearer ").removeprefix("DPoP ")
    parts = dict(p.split(":", 1) for p in token.split() if ":" in p)
    if "tenant" not in parts:
        raise web.HTTPUnauthorized(text="no token")
    scopes = {"scheduler.read", *([parts["scope"]] if "scope" in parts else [])}
    return Caller(parts["tenant"], parts.get("sub"), frozenset(scopes))


def delta(tenant: str, i: int) -> nm.RescanDelta:
    return nm.RescanDelta(
        id=f"d-{tenant}-{i}", tenant=tenant, run_id="r1", ts="2026-01-01T00:00:00.000Z",
        image_digest="sha256:" + f"{i:064x}", verdict_id=f"v-{i}", new_high=1,
    )  # fmt: skip


async def publish(pub: Publisher, prefix: str, msgs: list[nm.AnyMessage]) -> None:
    await pub.publish_many(
        (nm.subject(prefix, m.tenant, nm.kind_of(m)), nm.encode(m), m.id) for m in msgs
    )


Mount = Callable[[], Awaitable[str]]


@pytest.fixture
async def mount(
    nc: FastClient, prefix: str, stream_names: tuple[str, str, str]
) -> AsyncIterator[Mount]:
    """Starts feed servers (each like one gateway replica) on loopback; returns their URL."""
    runners: list[web.AppRunner] = []

    async def start() -> str:
        app = web.Application()
        add_feed_routes(app, nc=nc, prefix=prefix, who=who, settings=FeedSettings(lease_s=60))
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        return f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]

    yield start
    for r in runners:
        await r.cleanup()
    with contextlib.suppress(jsapi.JsApiError):
        await jsapi.request(nc, f"STREAM.DELETE.KV_{bucket_name(prefix)}")


@pytest.fixture
async def feed_url(mount: Mount) -> str:
    return await mount()


def session(token: str) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"})


def tail_into(url: str, state: Path, seen: list[int], **kw: Any) -> HttpTail:
    """The HTTP tail with the consumer's token, noting each sequence it handles."""
    key = DpopKey.load_or_create(state.parent / "dpop.jwk")
    api = ApiClient(key, StaticToken(CONSUMER, key))
    return HttpTail(url, state, api=api, out=lambda m, seq: seen.append(seq), **kw)


async def set_direct(nc: FastClient, stream: str, on: bool) -> None:
    info = await jsapi.stream_info(nc, stream)
    assert info is not None
    await jsapi.request(nc, f"STREAM.UPDATE.{stream}", {**info.config, "allow_direct": on})


async def test_events_pages_in_order_for_the_callers_tenant_and_kind_only(
    feed_url: str, nc: FastClient, publisher: Publisher, prefix: str
) -> None:
    msgs: list[nm.AnyMessage] = []
    for i in range(7):
        msgs += [delta("acme", i), delta("globex", i)]
    await publish(publisher, prefix, msgs)
    requests: list[str] = []

    async def note(m: Msg) -> None:
        requests.append(m.subject)

    spy = await nc.subscribe("$JS.API.>", cb=note)
    async with session(READER) as s:
        async with s.get(f"{feed_url}{BASE}/rescan.delta/events", params={"limit": "3"}) as r:
            page = await r.json()
        assert r.status == 200
        assert page["tenant"] == "acme" and page["kind"] == "rescan.delta"
        # head and horizon of acme's own rescan.delta messages, not of the shared stream
        assert page["head"] == 13 and page["retentionHorizon"] == 1 and not page["complete"]
        assert [e["seq"] for e in page["events"]] == [1, 3, 5]
        assert [e["payload"]["id"] for e in page["events"]] == ["d-acme-0", "d-acme-1", "d-acme-2"]
        assert page["events"][0]["schemaVersion"] == 1
        await nc.flush()
        direct = [x for x in requests if x.startswith("$JS.API.DIRECT.GET.")]
        assert len(direct) == 3 and "$JS.API.STREAM.MSG.GET" not in " ".join(requests)
        requests.clear()
        params = {"afterSeq": "5", "streamEpoch": page["epoch"], "limit": "500"}
        async with s.get(f"{feed_url}{BASE}/rescan.delta/events", params=params) as r:
            rest = await r.json()
        assert [e["seq"] for e in rest["events"]] == [7, 9, 11, 13] and rest["complete"]
        await nc.flush()
        assert len([x for x in requests if x.startswith("$JS.API.DIRECT.GET.")]) == 3
        async with s.get(f"{feed_url}{BASE}/report.ready/events") as r:
            empty = await r.json()
        assert (empty["head"], empty["retentionHorizon"], empty["events"]) == (0, 0, [])
        assert empty["complete"]
        for bad in (
            {"limit": "0"},
            {"limit": "501"},
            {"afterSeq": "-1"},
            {"limit": "x"},
            {"afterSeq": "\u00b2"},
            {"afterSeq": "\u0663"},
            {"limit": " 5"},
        ):
            async with s.get(f"{feed_url}{BASE}/rescan.delta/events", params=bad) as r:
                assert r.status == 400, bad
        async with s.get(f"{feed_url}{BASE}/rescan.delta/events", params={"afterSeq": "15"}) as r:
            assert r.status == 409 and "14" not in (await r.json())["detail"]
        params = {"streamEpoch": "1999-01-01T00:00:00Z"}
        async with s.get(f"{feed_url}{BASE}/rescan.delta/events", params=params) as r:
            assert r.status == 409 and (await r.json())["type"] == PROBLEM_TYPE + "epoch-mismatch"
        async with s.get(f"{feed_url}{BASE}/nonsense/events") as r:
            assert r.status == 404 and r.content_type == "application/problem+json"
    await spy.unsubscribe()
    async with session("tenant:globex") as s, s.get(f"{feed_url}{BASE}/rescan.delta/events") as r:
        other = await r.json()
    assert (other["head"], other["retentionHorizon"]) == (14, 2)
    assert all(e["payload"]["tenant"] == "globex" for e in other["events"])
    async with aiohttp.ClientSession() as s, s.get(f"{feed_url}{BASE}/rescan.delta/events") as r:
        assert r.status == 401, "no tenant without a credential"


async def test_checkpoints_need_the_consumer_identity_and_are_shared_by_every_gateway(
    mount: Mount, nc: FastClient, publisher: Publisher, prefix: str
) -> None:
    one, two = await mount(), await mount()
    await publish(publisher, prefix, [delta("acme", i) for i in range(3)])
    url = f"{BASE}/rescan.delta/consumer-checkpoint"
    async with session(READER) as s, s.post(one + url, json={"streamEpoch": None}) as r:
        assert (
            r.status == 403 and (await r.json())["type"] == PROBLEM_TYPE + "not-the-feed-consumer"
        )
    async with session(CONSUMER) as s:
        async with s.post(one + url, json={"streamEpoch": None, "seq": None}) as r:
            reg = await r.json()
        assert r.status == 200 and reg["seq"] == 0 and reg["registered"] and reg["head"] == 3
        assert reg["leaseSeconds"] == 60
        async with s.post(two + url, json={"streamEpoch": reg["epoch"], "seq": 2}) as r:
            assert r.status == 200 and (await r.json())["seq"] == 2
        async with s.post(one + url, json={"streamEpoch": reg["epoch"], "seq": 4}) as r:
            assert r.status == 409, "beyond the stream's end"
        async with s.post(one + url, json={"streamEpoch": "other", "seq": 1}) as r:
            assert r.status == 409, "outside the current epoch"
        async with s.post(one + url, json={"streamEpoch": reg["epoch"], "seq": None}) as r:
            assert r.status == 400
    async with session(ADMIN) as s, s.post(one + url, json={"streamEpoch": None}) as r:
        assert r.status == 200, "a write scope may register too"
    kv = await nc.jetstream().key_value(bucket_name(prefix))
    entry = await kv.get("acme.rescan.delta")
    assert entry.value is not None and b'"seq":0' in entry.value  # the admin's reset, stored
    info = await jsapi.stream_info(nc, f"KV_{bucket_name(prefix)}")
    assert info is not None and info.config["max_age"] == 60 * 10**9, "kept for the lease"


async def test_a_transient_jetstream_failure_is_a_503_and_the_tail_keeps_its_checkpoint(
    feed_url: str,
    nc: FastClient,
    publisher: Publisher,
    prefix: str,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    """The Notify stream answers no direct gets for a while (no responders): the feed says
    503, never ``complete``; the tail keeps its checkpoint, waits, and reads every message
    once the stream answers again."""
    notify = stream_names[2]
    state = tmp_path / "tail.json"
    seen: list[int] = []
    tail = tail_into(feed_url, state, seen, limit=2, poll_s=0.05)
    await publish(publisher, prefix, [delta("acme", i) for i in range(3)])
    await tail.run(once=True)
    assert seen == [1, 2, 3]
    await publish(publisher, prefix, [delta("acme", i) for i in range(3, 6)])
    await set_direct(nc, notify, False)
    async with session(READER) as s:
        params = {"afterSeq": "3"}
        async with s.get(f"{feed_url}{BASE}/rescan.delta/events", params=params) as r:
            doc = await r.json()
        assert r.status == 503 and r.headers["Retry-After"] == "1"
        assert doc["type"] == PROBLEM_TYPE + "feed-unavailable" and "complete" not in doc
    with pytest.raises(FeedUnavailable, match="503"):
        await tail.run(once=True)
    cp = load_checkpoint(state)
    assert cp is not None and cp.seq == 3 and seen == [1, 2, 3], "nothing skipped"
    follow = asyncio.create_task(tail.run())
    await asyncio.sleep(0.3)  # it keeps asking, the checkpoint stays
    assert not follow.done() and load_checkpoint(state) == cp
    await set_direct(nc, notify, True)
    try:
        async with asyncio.timeout(20):
            while seen != [1, 2, 3, 4, 5, 6]:
                await asyncio.sleep(0.05)
    finally:
        follow.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follow
    assert load_checkpoint(state).seq == 6  # type: ignore[union-attr]


async def test_http_tail_resumes_then_fails_closed_on_gap_epoch_and_missing_stream(
    feed_url: str,
    nc: FastClient,
    publisher: Publisher,
    prefix: str,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    notify_stream = stream_names[2]
    seen: list[int] = []
    state = tmp_path / "tail.json"

    def tail() -> HttpTail:
        return tail_into(feed_url, state, seen, limit=2)

    await publish(publisher, prefix, [delta("acme", i) for i in range(3)])
    cp = await tail().run(once=True)
    assert seen == [1, 2, 3] and cp.seq == 3
    await publish(publisher, prefix, [delta("globex", 9), delta("acme", 3)])
    cp = await tail().run(once=True)
    assert seen == [1, 2, 3, 5] and load_checkpoint(state) == cp

    # Retention removes messages past the checkpoint: stop, do not skip.
    await publish(publisher, prefix, [delta("acme", i) for i in range(4, 7)])
    await jsapi.request(nc, f"STREAM.PURGE.{notify_stream}")
    with pytest.raises(FeedClosed, match="retention gap"):
        await tail().run(once=True)
    assert load_checkpoint(state) == cp, "the checkpoint is not moved by a failure"

    # The stream is missing while a checkpoint exists.
    await jsapi.request(nc, f"STREAM.DELETE.{notify_stream}")
    with pytest.raises(FeedClosed, match="stream missing"):
        await tail().run(once=True)

    # The stream was recreated: a new epoch.
    await streams.apply(nc, streams.definitions(prefix))
    await publish(publisher, prefix, [delta("acme", i) for i in range(8)])
    with pytest.raises(FeedClosed, match="epoch"):
        await tail().run(once=True)
    with contextlib.suppress(FileNotFoundError):
        state.unlink()
    seen.clear()
    await tail().run(once=True)
    assert seen == list(range(1, 9)), "a deliberately reset consumer starts over"


async def test_a_quiet_tenant_is_vouched_for_while_its_registration_lives(
    feed_url: str,
    nc: FastClient,
    publisher: Publisher,
    prefix: str,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    """acme is caught up at its last message; retention then removes it and globex's
    messages after it: no gap for acme (its live registration vouches that none of its
    messages lay there) — until the registration is gone, then the gap is reported."""
    notify_stream = stream_names[2]
    seen: list[int] = []
    state = tmp_path / "tail.json"

    def tail() -> HttpTail:
        return tail_into(feed_url, state, seen)

    await publish(publisher, prefix, [delta("acme", 0)])
    await tail().run(once=True)  # reports seq 1 and, caught up, vouches up to the head
    await publish(publisher, prefix, [delta("globex", i) for i in range(5)])  # 2..6
    await tail().run(once=True)  # a caught-up poll: vouched up to 6 now
    await jsapi.request(nc, f"STREAM.PURGE.{notify_stream}", {"seq": 6})  # 1..5 gone
    await publish(publisher, prefix, [delta("acme", 1)])  # 7
    await tail().run(once=True)
    assert seen == [1, 7], "no gap: nothing of acme's was removed"

    await publish(publisher, prefix, [delta("globex", i) for i in range(5, 8)])  # 8..10
    await jsapi.request(nc, f"STREAM.PURGE.{notify_stream}", {"seq": 10})  # 7..9 gone
    kv = await nc.jetstream().key_value(bucket_name(prefix))
    await kv.delete("acme.rescan.delta")  # the lease ran out
    async with session(READER) as s:
        params = {"afterSeq": "7"}
        async with s.get(f"{feed_url}{BASE}/rescan.delta/events", params=params) as r:
            assert r.status == 409 and (await r.json())["type"] == PROBLEM_TYPE + "retention-gap"


async def test_a_page_is_bounded_by_bytes_as_well_as_by_messages(
    feed_url: str, publisher: Publisher, prefix: str
) -> None:
    """Run summaries can be large (1,000 digests per vulnerability): a page ends before the
    message that would take it past the bound, says it is not complete, and the next page
    goes on from there."""
    digests = [f"sha256:{i:064x}" for i in range(1000)]
    summaries: list[nm.AnyMessage] = [
        nm.RunSummary(
            id=f"s-{i}",
            tenant="acme",
            run_id=f"r{i}",
            ts="2026-01-01T00:00:00.000Z",
            state="completed",
            vulnerabilities=[
                nm.VulnImages(
                    vuln_id=f"CVE-2026-{i}", severity="high", image_count=1000, images=digests
                )
            ],
        )
        for i in range(4)
    ]
    await publish(publisher, prefix, summaries)
    seen: list[str] = []
    after = 0
    async with session(READER) as s:
        for _ in range(10):
            params = {"afterSeq": str(after), "limit": "500"}
            async with s.get(f"{feed_url}{BASE}/run.summary/events", params=params) as r:
                raw = await r.read()
                page = await r.json()
            assert r.status == 200 and len(raw) <= PAGE_BYTES, len(raw)
            seen += [e["payload"]["id"] for e in page["events"]]
            if page["complete"]:
                break
            assert len(page["events"]) == 3, "three of ~75 KB fit, the fourth does not"
            after = page["events"][-1]["seq"]
    assert seen == ["s-0", "s-1", "s-2", "s-3"]
