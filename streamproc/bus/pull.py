"""A fast pull loop over a JetStream consumer.

``psub.fetch`` tops out at a fraction of what the connection carries. This loop takes the raw
messages of one wildcard inbox (see :mod:`streamproc.bus.fastclient`), sends
``CONSUMER.MSG.NEXT`` requests for large batches with their own reply subjects, keeps a second
request outstanding so the server never waits for us, and ends a request on its status
message (404 no messages, 408 expired, 409 conflict).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import Any, Final

from streamproc.bus.ack import PREFIX as ACK_PREFIX
from streamproc.bus.ack import stream_seq
from streamproc.bus.fastclient import FastClient, description_of, status_of
from streamproc.bus.jsapi import API


class ConsumerGone(RuntimeError):
    """The server ended our requests for a reason we must not paper over (409)."""


RawMessage = tuple[int, bytes, bytes, bytes]
"""``(stream_seq, subject, data, reply)`` of one delivered message."""

SEQ: Final = 0
SUBJECT: Final = 1
DATA: Final = 2
REPLY: Final = 3


class PullLoop:
    def __init__(
        self,
        nc: FastClient,
        stream: str,
        consumer: str,
        *,
        batch: int = 1000,
        expires_s: float = 2.0,
        outstanding: int = 2,
    ) -> None:
        self.nc = nc
        self.stream = stream
        self.consumer = consumer
        self.batch = batch
        self.expires_ns = int(expires_s * 1e9)
        self.outstanding = outstanding
        self._buf: deque[RawMessage] = deque()
        self._ready = asyncio.Event()
        self._requests: dict[bytes, int] = {}  # reply token -> messages still owed
        self._next = 0
        self._inbox = ""
        self._inbox_len = 0
        self._sub: Any = None
        self._error: BaseException | None = None
        self._closed = False
        self._topping = False

    async def start(self) -> PullLoop:
        self._inbox = self.nc.new_inbox()
        self._inbox_len = len(self._inbox) + 1
        self._sub = await self.nc.subscribe_raw(self._inbox + ".*", self._on_msg)
        await self._top_up()
        return self

    async def close(self) -> None:
        self._closed = True
        if self._sub is not None:
            sub, self._sub = self._sub, None
            with contextlib.suppress(Exception):  # the connection may already be gone
                await self.nc.unsubscribe_raw(sub)
        self._ready.set()

    async def _top_up(self) -> None:
        self._topping = False
        while not self._closed and len(self._requests) < self.outstanding:
            token = str(self._next)
            self._next += 1
            self._requests[token.encode()] = self.batch
            body = b'{"batch":%d,"expires":%d}' % (self.batch, self.expires_ns)
            await self.nc.publish(
                f"{API}.CONSUMER.MSG.NEXT.{self.stream}.{self.consumer}",
                body,
                reply=f"{self._inbox}.{token}",
            )

    def _schedule_top_up(self) -> None:
        if not self._topping and not self._closed:
            self._topping = True
            asyncio.get_running_loop().create_task(self._top_up())

    def _on_msg(self, subject: bytes, reply: bytes, data: bytes, headers: bytes) -> None:
        if reply[:8] == ACK_PREFIX:
            # Data messages carry their original subject; the server serves requests in
            # order, so each one counts against the oldest request still open.
            self._buf.append((stream_seq(reply), subject, data, reply))
            for token, left in self._requests.items():
                if left <= 1:
                    del self._requests[token]
                    self._schedule_top_up()
                else:
                    self._requests[token] = left - 1
                break
            self._ready.set()
            return
        self._requests.pop(subject[self._inbox_len :], None)
        if status_of(headers) == b"409":
            desc = description_of(headers)
            if "Leadership Change" not in desc and "Exceeded Max" not in desc:
                self._error = ConsumerGone(f"consumer {self.consumer} on {self.stream}: {desc}")
                self._ready.set()
                return
        self._schedule_top_up()

    async def next_batch(self, max_n: int, timeout: float | None = None) -> list[RawMessage]:
        """Wait for messages, then return up to ``max_n`` of those already received."""
        while not self._buf:
            if self._error is not None:
                raise self._error
            if self._closed:
                return []
            self._ready.clear()
            if timeout is None:
                await self._ready.wait()
            else:
                try:
                    await asyncio.wait_for(self._ready.wait(), timeout)
                except TimeoutError:
                    # A request lost in a reconnect would stall us: the server ends every
                    # request within ``expires``, so after a quiet period start afresh.
                    self._requests.clear()
                    await self._top_up()
                    return []
        buf = self._buf
        n = min(max_n, len(buf))
        return [buf.popleft() for _ in range(n)]

    async def ack_all(self, msg: RawMessage) -> None:
        """With ``ack_policy: all``, acking the last message acknowledges the whole batch."""
        await self.nc.publish(msg[REPLY].decode(), b"+ACK")
