"""A request cancelled in the loop iteration its reply arrives in ends cancelled.

On Python 3.11 nats-py's request waits with ``asyncio.wait_for``, which then returns the reply
and drops the cancellation: the task runs on. ``System.close()`` cancels the status heartbeat
and waits for it, so one such coincidence kept ``streamproc up`` running after SIGINT, for
good (docs/operations.md, "Stopping")."""

from __future__ import annotations

import asyncio

import pytest
from nats.aio.msg import Msg

from streamproc.bus.fastclient import FastClient


async def test_a_cancel_that_meets_the_reply_is_not_lost(nc: FastClient, prefix: str) -> None:
    subject = f"{prefix}.cancel.meets.reply"

    async def pong(msg: Msg) -> None:
        await msg.respond(b"pong")

    await nc.subscribe(subject, cb=pong)
    requester: asyncio.Task[Msg] | None = None
    answer = nc._request_sub_callback

    async def answer_then_cancel(msg: Msg) -> None:
        """The reply's future is resolved, and the requester cancelled before it resumes."""
        await answer(msg)
        assert requester is not None
        requester.cancel()

    nc._request_sub_callback = answer_then_cancel  # type: ignore[method-assign]  # before the first request subscribes it
    for _ in range(5):
        requester = asyncio.create_task(nc.request(subject, b"ping", timeout=5))
        with pytest.raises(asyncio.CancelledError):
            await requester
    assert nc._resp_map == {}, "no reply left waiting"
    assert (await nc.request(subject, b"ping", timeout=5)).data == b"pong"
