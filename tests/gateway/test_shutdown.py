"""Graceful shutdown: handlers in flight when the process stops finish and their events are
recorded; new requests are refused and record nothing; no export is half-published.

(aiohttp stops reading request bodies once shutdown starts, so "in flight" means a request
that has been received and is being handled; here each is held mid-publish.)
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest

from streamproc.bus import jsapi
from streamproc.bus.connect import connect
from streamproc.events.envelope import decode
from streamproc.natsd.server import EmbeddedNats
from tests.gateway.conftest import drop_streams
from tests.gateway.harness import BASE, default_settings, signed_headers, start, token

FEEDSER = f"{BASE}/events/feedser-export"
N_EXPORTS, N_SCHEDULES = 40, 5


async def test_in_flight_requests_finish_and_nothing_is_half_published(
    tmp_path: Path, nats_server: EmbeddedNats, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Sources that take no token record each export for both their tenants: one delivery,
    # two events, which must never be half-published.
    h = await start(tmp_path, nats_server.url, prefix, default_settings(tmp_path, tokenless=True))
    stream = h.system.settings.events_stream
    publisher = h.system.publisher
    assert publisher is not None
    real = publisher.publish
    entered = 0

    async def slow_publish(subject: str, *args: Any, **kw: Any) -> Any:
        nonlocal entered
        if ".events." in subject:  # an event (not a replay claim)
            entered += 1
            await asyncio.sleep(0.5)  # hold every handler mid-publish across the shutdown
        return await real(subject, *args, **kw)

    monkeypatch.setattr(publisher, "publish", slow_publish)
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=100))

    async def export(i: int) -> tuple[int, Any]:
        body = msgspec.json.encode({"exportId": f"x-{i}-{uuid.uuid4().hex[:6]}"})
        async with session.post(h.url + FEEDSER, data=body, headers=signed_headers(body)) as r:
            return r.status, await r.json(content_type=None)

    async def schedule(i: int) -> tuple[int, Any]:
        async with session.post(
            f"{h.url}{BASE}/schedules",
            headers={"Authorization": f"Bearer {token()}"},
            json={"id": f"s{i}", "name": "n", "whenCron": "* * * * *", "timezone": "UTC"},
        ) as r:
            return r.status, await r.json(content_type=None)

    tasks = [asyncio.create_task(export(i)) for i in range(N_EXPORTS)]
    tasks += [asyncio.create_task(schedule(i)) for i in range(N_SCHEDULES)]
    while entered < N_EXPORTS * 2 + N_SCHEDULES:
        await asyncio.sleep(0.01)
    closing = asyncio.create_task(h.system.close())
    await asyncio.sleep(0.1)
    with contextlib.suppress(aiohttp.ClientError):  # refused: the listener is gone
        async with (
            aiohttp.ClientSession() as late,
            late.post(
                h.url + FEEDSER,
                data=b'{"exportId":"late"}',
                headers=signed_headers(b'{"exportId":"late"}'),
            ) as r,
        ):
            assert r.status == 503
    results = await asyncio.gather(*tasks)
    await closing
    await session.close()
    await h.session.close()
    assert [s for s, _ in results] == [202] * (N_EXPORTS + N_SCHEDULES)
    nc = await connect(nats_server.url)
    try:
        info = await jsapi.stream_info(nc, stream)
        assert info is not None
        js = nc.jetstream()
        stored = [
            decode((await js.get_msg(stream, seq)).data)
            for seq in range(1, info.state.last_seq + 1)
        ]
    finally:
        await nc.close()
    assert len(stored) == N_EXPORTS * 2 + N_SCHEDULES
    tenants: dict[str, set[str]] = {}
    for ev in stored:
        if ev.kind == "export.feedser":
            tenants.setdefault(ev.payload.export_id, set()).add(ev.tenant)
    assert len(tenants) == N_EXPORTS and all(t == {"acme", "globex"} for t in tenants.values())
    assert "late" not in tenants
    await drop_streams(nats_server.url, prefix)
