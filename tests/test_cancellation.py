"""A stop that Python 3.11's ``asyncio.wait_for`` swallowed still ends the loop.

nats-py waits with ``wait_for`` in every request; on 3.11 a cancel arriving in the instant
the reply does is lost (gh-86296). These tests stage that instant exactly: the awaited
future gets its result and the task is cancelled before it runs again."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from streamproc.cancellation import checkpoint
from streamproc.config import Settings
from streamproc.status.heartbeat import StatusHeartbeat
from tests.helpers import eventually

LOST = pytest.mark.skipif(sys.version_info >= (3, 12), reason="wait_for keeps the cancel on 3.12+")


@LOST
async def test_on_3_11_wait_for_drops_a_cancel_that_meets_its_result() -> None:
    """The premise: the task returns normally, and only its cancel count remembers."""
    reply: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(asyncio.wait_for(reply, 5))
    await asyncio.sleep(0)  # waiting now
    reply.set_result("answer")
    task.cancel()
    assert await task == "answer"
    assert task.cancelling() == 1


async def test_a_loop_with_a_checkpoint_ends_though_its_wait_ate_the_cancel() -> None:
    replies: list[asyncio.Future[None]] = []
    turns = 0

    async def loop() -> None:
        nonlocal turns
        while True:
            checkpoint()
            turns += 1
            replies.append(asyncio.get_running_loop().create_future())
            await asyncio.wait_for(replies[-1], 5)

    task = asyncio.create_task(loop())
    await eventually(lambda: replies, 5, "the first wait")
    replies[0].set_result(None)
    task.cancel()
    async with asyncio.timeout(2):
        with pytest.raises(asyncio.CancelledError):
            await task
    assert turns == 1  # it ended at the next turn, not after another wait


async def test_checkpoint_passes_while_no_stop_is_pending() -> None:
    async def inner() -> None:
        await asyncio.sleep(10)

    other = asyncio.create_task(inner())
    await asyncio.sleep(0)
    other.cancel()  # cancelling another task leaves this one's count alone
    with pytest.raises(asyncio.CancelledError):
        await other
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0):  # a timeout withdraws its own request
            await asyncio.sleep(1)
    checkpoint()


class _Observed:
    """Just what the heartbeat reads of a system: no roles, no connection."""

    settings = Settings(node_id="n1")
    projectors: Mapping[str, Any] = {}
    tasks: Sequence[asyncio.Task[None]] = []
    http_url = "http://127.0.0.1:1"
    nc = None


class _RequestingHeartbeat(StatusHeartbeat):
    """Each beat waits for its reply the way nats-py does, and the test hands the replies."""

    def __init__(self) -> None:
        super().__init__(_Observed(), lag_limit=0, interval=0.0)
        self.replies: list[asyncio.Future[None]] = []

    async def beat(self) -> None:
        self.replies.append(asyncio.get_running_loop().create_future())
        await asyncio.wait_for(self.replies[-1], 5)
        self.beats += 1


async def test_the_heartbeat_stops_when_its_cancel_meets_a_reply() -> None:
    """Seen under load: ``System.close()`` waited for ever on a heartbeat that beat on."""
    hb = _RequestingHeartbeat()
    starting = asyncio.create_task(hb.start())
    await eventually(lambda: hb.replies, 5, "the first beat")
    hb.replies[0].set_result(None)
    await starting
    await eventually(lambda: len(hb.replies) == 2, 5, "a beat of the loop")
    hb.replies[1].set_result(None)  # the reply arrives, and in the same instant the stop
    stopping = asyncio.create_task(hb.stop())
    async with asyncio.timeout(3):
        await stopping
    assert hb.beats == 2 and len(hb.replies) == 2
