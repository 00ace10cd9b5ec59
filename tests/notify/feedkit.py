"""What the HTTP feed's tests share: a real gateway (the gateway role on the session's
nats-server, DPoP-only), clients that call it as ours do (DPoP-signed, a token bound to their
key), Notify messages and a way to publish them."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from streamproc.bus import jsapi
from streamproc.bus.connect import connect
from streamproc.bus.publisher import Publisher
from streamproc.client.dpop import DpopKey
from streamproc.client.http import ApiClient, Reply
from streamproc.client.tokens import StaticToken
from streamproc.names import NOTIFY_WINDOW, feed_bucket, feed_hold_consumer, stream_names
from streamproc.natsd.server import EmbeddedNats
from streamproc.notify import messages as nm
from tests.gateway.conftest import drop_streams
from tests.gateway.harness import Harness, default_settings, start, stop, token

FEEDS = "/api/v1/scheduler/feeds"
CONSUMER = "streamproc-notify"


def delta(tenant: str, i: int, **over: Any) -> nm.RescanDelta:
    return nm.RescanDelta(
        id=f"d-{tenant}-{i}", tenant=tenant, run_id="r1", ts="2026-01-01T00:00:00.000Z",
        image_digest="sha256:" + f"{i:064x}", verdict_id=f"v-{i}", new_high=1, **over,
    )  # fmt: skip


async def publish(pub: Publisher, prefix: str, msgs: list[nm.AnyMessage]) -> list[int]:
    """Publish on each message's own subject; the stream sequences."""
    acks = await pub.publish_many(
        (nm.subject(prefix, m.tenant, nm.kind_of(m)), nm.encode(m), m.id) for m in msgs
    )
    return [a.seq for a in acks]


class Feed:
    """A running gateway and clients of its feed."""

    def __init__(self, h: Harness, prefix: str, tmp: Path) -> None:
        self.h = h
        self.prefix = prefix
        self.tmp = tmp
        self.url = h.url
        self.stream = stream_names(prefix)[2]
        assert h.system.nc is not None and h.system.publisher is not None
        self.nc = h.system.nc
        self.publisher = h.system.publisher
        self._n = 0

    def client(
        self, tenant: str = "acme", scopes: str = "scheduler.read", **claims: Any
    ) -> ApiClient:
        """A DPoP client with a token for ``tenant`` bound to a key of its own."""
        self._n += 1
        key = DpopKey.load_or_create(self.tmp / "keys" / f"k{self._n}.jwk")
        tok = token(tenant, scopes, cnf={"jkt": key.jkt}, **claims)
        return ApiClient(key, StaticToken(tok, key))

    def consumer(self, tenant: str = "acme", **claims: Any) -> ApiClient:
        """The configured feed consumer (its token's client_id)."""
        return self.client(tenant, client_id=CONSUMER, sub="svc-notify", **claims)

    async def page(self, api: ApiClient, kind: str = "rescan.delta", **params: Any) -> Reply:
        q = {k: str(v) for k, v in params.items()}
        return await api.request("GET", f"{self.url}{FEEDS}/{kind}/events", params=q)

    async def report(
        self, api: ApiClient, epoch: int | None, seq: int | None, kind: str = "rescan.delta"
    ) -> Reply:
        return await api.request(
            "POST", f"{self.url}{FEEDS}/{kind}/consumer-checkpoint",
            json={"streamEpoch": epoch, "seq": seq},
        )  # fmt: skip

    async def publish(self, msgs: list[nm.AnyMessage]) -> list[int]:
        return await publish(self.publisher, self.prefix, msgs)

    async def info(self) -> jsapi.StreamInfo:
        info = await jsapi.stream_info(self.nc, self.stream)
        assert info is not None
        return info

    async def hold_exists(self, tenant: str, kind: str = "rescan.delta") -> bool:
        try:
            await jsapi.request(
                self.nc, f"CONSUMER.INFO.{self.stream}.{feed_hold_consumer(tenant, kind)}"
            )
        except jsapi.JsApiError as exc:
            assert exc.err_code == jsapi.CONSUMER_NOT_FOUND, exc
            return False
        return True

    async def window_floor(self) -> int:
        info = await jsapi.request(self.nc, f"CONSUMER.INFO.{self.stream}.{NOTIFY_WINDOW}")
        return int(info["ack_floor"]["stream_seq"])


@contextlib.asynccontextmanager
async def running_feed(
    tmp: Path, nats: EmbeddedNats, prefix: str, **settings: Any
) -> AsyncIterator[Feed]:
    """The gateway role on a DPoP-only gateway; ``settings`` override the gateway's."""
    h = await start(
        tmp, nats.url, prefix, default_settings(tmp, required_modes=["dpop"], **settings)
    )
    try:
        yield Feed(h, prefix, tmp)
    finally:
        await stop(h)
        await drop_streams(nats.url, prefix)
        await drop_bucket(nats, prefix)


async def drop_bucket(nats: EmbeddedNats, prefix: str) -> None:
    nc = await connect(nats.url)
    try:
        with contextlib.suppress(jsapi.JsApiError):
            await jsapi.request(nc, f"STREAM.DELETE.KV_{feed_bucket(prefix)}")
    finally:
        await nc.close()


@pytest.fixture
async def feed(tmp_path: Path, nats_server: EmbeddedNats, prefix: str) -> AsyncIterator[Feed]:
    async with running_feed(tmp_path, nats_server, prefix) as f:
        yield f
