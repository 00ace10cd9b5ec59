"""Running one command against NATS: ``--nats-url`` if given, else a temporary embedded
server on the data directory's store (what every one-shot CLI command needs)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from streamproc.bus.connect import NatsAuth, connect
from streamproc.bus.server import EmbeddedNats
from streamproc.config import Settings


def run(coro: Awaitable[int]) -> int:
    import uvloop

    return uvloop.run(coro)  # type: ignore[arg-type]


async def with_nats(settings: Settings, fn: Callable[[Any], Awaitable[int]]) -> int:
    """Run ``fn(nc)`` against the configured server, else the data directory's embedded one."""
    server = None
    url = settings.nats_url
    if not url:
        server = EmbeddedNats(settings.nats_dir, host=settings.nats_host, port=0)
        await asyncio.to_thread(server.start)
        url = server.url
    nc = await connect(url, auth=NatsAuth.from_env() if settings.nats_url else None)
    try:
        return await fn(nc)
    finally:
        await nc.close()
        if server is not None:
            await asyncio.to_thread(server.stop)
