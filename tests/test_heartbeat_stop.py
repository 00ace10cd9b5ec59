"""``StatusHeartbeat.stop()`` returns even when its cancel meets a NATS reply.

``System.close()`` begins with it. On Python 3.11 nats-py's request (``asyncio.wait_for``)
returned a reply that arrived in the same loop iteration as the cancel and dropped the
cancellation: the heartbeat beat on, ``stop()`` waited for it for good, and ``streamproc up``
ignored SIGINT (docs/operations.md, "Stopping")."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nats.aio.msg import Msg

from streamproc.bus.connect import connect
from streamproc.bus.fastclient import FastClient
from streamproc.config import Settings
from streamproc.natsd.server import EmbeddedNats
from streamproc.status import StatusHeartbeat
from streamproc.status.record import bucket_name


@dataclass
class Quiet:
    """A running system with no roles: each beat is still a few NATS requests."""

    settings: Settings
    nc: FastClient | None
    projectors: dict[str, Any] = field(default_factory=dict)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    http_url: str = ""


async def test_stop_returns_when_its_cancel_meets_a_reply(
    nats_server: EmbeddedNats,
    nc: FastClient,
    prefix: str,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    settings = Settings(data_dir=tmp_path / "data", nats_url=nats_server.url, prefix=prefix)
    own = await connect(nats_server.url)  # no request yet: its reply handler is ours to wrap
    heartbeat = StatusHeartbeat(Quiet(settings, own), lag_limit=10, interval=0.05)
    stopping: list[asyncio.Task[None]] = []
    armed = False
    answer = own._request_sub_callback

    async def answer_then_stop(msg: Msg) -> None:
        """Resolve a beat's reply, and ask the heartbeat to stop before the beat resumes."""
        await answer(msg)
        if armed and not stopping:
            stopping.append(asyncio.create_task(heartbeat.stop()))

    own._request_sub_callback = answer_then_stop  # type: ignore[method-assign]  # before the first request subscribes it
    await heartbeat.start()
    armed = True
    try:
        async with asyncio.timeout(20):
            while not stopping:  # the next beat's first reply
                await asyncio.sleep(0.01)
        # asyncio.wait, not a timeout around the await: cancelling stop() would end it too.
        done, _ = await asyncio.wait(stopping, timeout=20)
        assert stopping[0] in done, "stop() still waits for a heartbeat that beats on"
        assert heartbeat._task is None
    finally:
        if heartbeat._task is not None:  # the old client: the heartbeat ran on
            heartbeat._task.cancel()
        with contextlib.suppress(Exception):
            await nc.jetstream().delete_key_value(bucket_name(prefix))
        await own.close()
