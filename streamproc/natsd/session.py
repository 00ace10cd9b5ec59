"""Running one command against NATS: ``--nats-url`` if given, else the server that owns the
data directory's store (``streamproc up``, ``nats``), else a temporary embedded server on
that store — what every one-shot CLI command needs (:mod:`streamproc.natsd.owner`)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import uvloop

from streamproc.bus.connect import NatsAuth, NatsConnectError, connect
from streamproc.bus.fastclient import FastClient
from streamproc.config import Settings
from streamproc.natsd import owner
from streamproc.natsd.server import EmbeddedNats

CLUSTER_DIR = "nats-cluster"
"""Where ``streamproc nats --cluster N`` keeps its nodes' stores, under the data directory."""


def run(coro: Awaitable[int]) -> int:
    return uvloop.run(coro)  # type: ignore[arg-type]  # uvloop.run is typed for Coroutine; every caller passes one


async def with_nats(settings: Settings, fn: Callable[[Any], Awaitable[int]]) -> int:
    """Run ``fn(nc)`` against the configured server, else the data directory's own."""
    async with nats_session(settings) as nc:
        return await fn(nc)


@asynccontextmanager
async def nats_session(settings: Settings, name: str = "streamproc") -> AsyncIterator[FastClient]:
    if settings.nats_url:
        nc = await connect(
            settings.nats_url, name=name, auth=NatsAuth.configured(settings.configuration)
        )
        try:
            yield nc
        finally:
            await nc.close()
        return
    command = owner.command_label(sys.argv)
    found = await asyncio.to_thread(_locate, settings, command)
    server = None
    if isinstance(found, tuple):
        store, running = found
        nc = await _connect_owner(store, running, name)
    else:
        server = EmbeddedNats(settings.nats_dir, host=settings.nats_host, port=0, lock=found)
        await asyncio.to_thread(server.start)
        nc = await connect(server.url, name=name)  # the embedded server has no auth
    try:
        yield nc
    finally:
        await nc.close()
        if server is not None:
            await asyncio.to_thread(server.stop)


def _locate(settings: Settings, command: str) -> tuple[Path, owner.Owner] | owner.StoreLock:
    """A running ``nats --cluster`` of this data directory, else the single store's owner,
    else that store taken for a temporary server."""
    cluster = settings.data_dir / CLUSTER_DIR
    running = owner.read_owner(cluster)
    if running is not None and running.ready and owner.pid_alive(running.pid):
        return cluster, running
    store = settings.nats_dir
    found = owner.resolve(
        store, command=command, node=settings.node_id, serving=False, temporary=True
    )
    return (store, found) if isinstance(found, owner.Owner) else found


async def _connect_owner(store: Path, running: owner.Owner, name: str) -> FastClient:
    """Connect to the owner, failing fast: a held store whose owner does not answer is the
    operator's to sort out (exit 2), never a reason to start a second server on it."""
    try:
        return await connect(running.url, name=name, max_reconnect_attempts=0, connect_timeout=2)
    except NatsConnectError as exc:
        reason = str(exc).removeprefix(f"cannot connect to NATS at {running.url}: ")
        message = owner.unreachable_message(store, running, reason, owner.pid_alive)
        raise NatsConnectError(message) from None
