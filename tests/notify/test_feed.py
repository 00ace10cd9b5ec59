"""The Notify HTTP feed (real aiohttp on loopback, real nats-server) and the fail-closed tail."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from streamproc.bus import jsapi, streams
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.notify import messages as nm
from streamproc.notify.feed_http import add_feed_routes
from streamproc.notify.http_tail import FeedClosed, HttpTail, load_checkpoint

BASE = "/api/v1/scheduler/feeds"


def delta(tenant: str, i: int) -> nm.RescanDelta:
    return nm.RescanDelta(
        id=f"d-{tenant}-{i}", tenant=tenant, run_id="r1", ts="2026-01-01T00:00:00.000Z",
        image_digest="sha256:" + f"{i:064x}", verdict_id=f"v-{i}", new_high=1,
    )  # fmt: skip


async def publish(pub: Publisher, prefix: str, msgs: list[nm.AnyMessage]) -> None:
    await pub.publish_many(
        (nm.subject(prefix, m.tenant, nm.kind_of(m)), nm.encode(m), m.id) for m in msgs
    )


def tenant_of(request: web.Request) -> str:
    """Stands in for the gateway's token check: the tenant comes from the credential."""
    token = request.headers.get("Authorization", "").removeprefix("Bearer ")
    if not token.startswith("tenant:"):
        raise web.HTTPUnauthorized(text="no token")
    return token.removeprefix("tenant:")


@pytest.fixture
async def feed_url(
    nc: FastClient, prefix: str, stream_names: tuple[str, str, str]
) -> AsyncIterator[str]:
    app = web.Application()
    add_feed_routes(app, nc=nc, prefix=prefix, tenant_of=tenant_of)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def test_events_pages_in_order_for_the_callers_tenant_only(
    feed_url: str, publisher: Publisher, prefix: str
) -> None:
    msgs: list[nm.AnyMessage] = []
    for i in range(7):
        msgs += [delta("acme", i), delta("globex", i)]
    await publish(publisher, prefix, msgs)
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer tenant:acme"}) as s:
        async with s.get(f"{feed_url}{BASE}/rescan.delta/events", params={"limit": "3"}) as r:
            page = await r.json()
        assert r.status == 200
        assert page["tenant"] == "acme" and page["kind"] == "rescan.delta"
        assert page["head"] == 14 and page["retentionHorizon"] == 1 and not page["complete"]
        assert [e["seq"] for e in page["events"]] == [1, 3, 5]
        assert [e["payload"]["id"] for e in page["events"]] == ["d-acme-0", "d-acme-1", "d-acme-2"]
        assert page["events"][0]["schemaVersion"] == 1
        params = {"afterSeq": "5", "streamEpoch": page["epoch"]}
        async with s.get(f"{feed_url}{BASE}/rescan.delta/events", params=params) as r:
            rest = await r.json()
        assert [e["seq"] for e in rest["events"]] == [7, 9, 11, 13] and rest["complete"]
        for bad in ({"limit": "0"}, {"limit": "501"}, {"afterSeq": "-1"}, {"limit": "x"}):
            async with s.get(f"{feed_url}{BASE}/rescan.delta/events", params=bad) as r:
                assert r.status == 400, bad
        async with s.get(f"{feed_url}{BASE}/rescan.delta/events", params={"afterSeq": "15"}) as r:
            assert r.status == 409
        params = {"streamEpoch": "1999-01-01T00:00:00Z"}
        async with s.get(f"{feed_url}{BASE}/rescan.delta/events", params=params) as r:
            assert r.status == 409 and (await r.json())["title"] == "epoch-mismatch"
        async with s.get(f"{feed_url}{BASE}/nonsense/events") as r:
            assert r.status == 404
    async with aiohttp.ClientSession() as s, s.get(f"{feed_url}{BASE}/rescan.delta/events") as r:
        assert r.status == 401, "no tenant without a credential"


async def test_consumer_checkpoint_registers_reports_and_refuses(
    feed_url: str, publisher: Publisher, prefix: str
) -> None:
    await publish(publisher, prefix, [delta("acme", i) for i in range(3)])
    url = f"{feed_url}{BASE}/rescan.delta/consumer-checkpoint"
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer tenant:acme"}) as s:
        async with s.post(url, json={"streamEpoch": None, "seq": None}) as r:
            reg = await r.json()
        assert r.status == 200 and reg["seq"] == 0 and reg["registered"] and reg["head"] == 3
        async with s.post(url, json={"streamEpoch": reg["epoch"], "seq": 2}) as r:
            assert r.status == 200 and (await r.json())["seq"] == 2
        async with s.post(url, json={"streamEpoch": reg["epoch"], "seq": 4}) as r:
            assert r.status == 409, "beyond the head"
        async with s.post(url, json={"streamEpoch": "other", "seq": 1}) as r:
            assert r.status == 409, "outside the current epoch"
        async with s.post(url, json={"streamEpoch": reg["epoch"], "seq": None}) as r:
            assert r.status == 400


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
        return HttpTail(feed_url, state, token="tenant:acme", limit=2,
                        out=lambda m, seq: seen.append(seq))  # fmt: skip

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
