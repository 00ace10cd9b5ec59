"""A nats-py client with a raw fast path for the few hot subscriptions and publishes.

nats-py turns every incoming message into a ``Msg`` (parsing its headers), queues it, and
hands it to a per-subscription task: several microseconds a message, which caps a Python
consumer far below what one connection carries. Pull loops and publish acknowledgements do
not need any of that, so a subscription registered with :meth:`subscribe_raw` gets the
parser's raw ``(subject, reply, data, headers)`` bytes in a synchronous call. Everything else
(reconnects, resubscription, flushing, other subscriptions) stays nats-py's own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from secrets import token_hex
from typing import Any

from nats import errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.protocol.parser import AWAITING_CONTROL_LINE, Parser

NATS_PY_MINOR = "2.16"
"""The nats-py minor version whose private internals this module and ``runtime/lease.py`` use
(the parser, ``_process_msg``, ``_send_command``, the pending buffer): pyproject.toml pins it,
and tests/bus/test_nats_internals.py names what changed if a new release moves them."""

RawHandler = Callable[[bytes, bytes, bytes, bytes], None]
"""``handler(subject, reply, data, headers)``; ``headers`` is the raw header block or b""."""

_CRLF = b"\r\n"


class PayloadTooLarge(ValueError):
    """A message bigger than the server's ``max_payload`` (refused before sending)."""


def status_of(headers: bytes) -> bytes:
    """The status code of a status message (``NATS/1.0 408 Request Timeout``), or b""."""
    if len(headers) >= 12 and headers[8:9] == b" ":
        return headers[9:12]
    return b""


def description_of(headers: bytes) -> str:
    line = headers.split(_CRLF, 1)[0]
    return line[13:].decode(errors="replace").strip()


def _frame_start(buf: bytearray) -> bool:
    """Whether ``buf`` begins with (a prefix of) a MSG/HMSG frame still being received."""
    head = bytes(buf[:4])
    return head in (b"MSG ", b"HMSG") or (
        len(head) < 4 and (b"HMSG".startswith(head) or b"MSG ".startswith(head))
    )


class FastParser(Parser):
    """nats-py's parser with a fast path for complete ``MSG``/``HMSG`` frames.

    The stock parser tries a regex per frame type per message and trims its buffer after each
    one. This walks complete message frames with ``find``/``split`` and trims once per read;
    a frame split across reads waits for the next read; anything else (PING, INFO, +OK, -ERR)
    goes to the stock parser.
    """

    async def parse(self, data: bytes = b"") -> None:
        buf = self.buf
        buf.extend(data)
        if self.state != AWAITING_CONTROL_LINE:
            await super().parse()
            return
        nc = self.nc
        raw: dict[int, RawHandler] = nc._raw_handlers
        stats = nc.stats
        pos = 0
        size = len(buf)
        while pos < size:
            op = buf[pos : pos + 4]
            if op == b"HMSG":
                has_headers = True
            elif op == b"MSG ":
                has_headers = False
            else:
                break
            end = buf.find(b"\r\n", pos)
            if end < 0:
                break
            args = bytes(buf[pos:end]).split()
            total = int(args[-1])
            start = end + 2
            if start + total + 2 > size:
                break  # payload not all here yet: leave the frame to the next read
            n = len(args)
            if has_headers:
                hdr_len = int(args[-2])
                reply = args[3] if n == 6 else b""
                headers = bytes(buf[start : start + hdr_len])
                payload = bytes(buf[start + hdr_len : start + total])
            else:
                reply = args[3] if n == 5 else b""
                headers = b""
                payload = bytes(buf[start : start + total])
            pos = start + total + 2
            sid = int(args[2])
            handler = raw.get(sid)
            if handler is None:
                await nc._process_msg(sid, args[1], reply, payload, headers)
            else:  # a raw subscription: a plain call, no coroutine per message
                stats["in_msgs"] += 1
                stats["in_bytes"] += len(payload)
                handler(args[1], reply, payload, headers)
        if pos:
            del buf[:pos]
        if buf and not _frame_start(buf):
            await super().parse()  # PING, INFO, +OK, -ERR: the stock parser's business


class FastClient(Client):
    def __init__(self) -> None:
        super().__init__()
        self._ps = FastParser(self)
        self._raw_handlers: dict[int, RawHandler] = {}
        self.announced_urls: frozenset[str] | None = None
        """The client URLs of the connected server's cluster as its latest INFO listed them.
        nats-py keeps only the first INFO, and marks a server "discovered" only when it was
        not in the pool already: with every node in ``NATS_URL`` (as a cluster is given), a
        node whose route formed after we connected would never be counted."""

    async def _process_info(self, info: dict[str, Any], initial_connection: bool = False) -> None:
        if "connect_urls" in info:
            self.announced_urls = frozenset(info["connect_urls"] or ())
        await super()._process_info(info, initial_connection)

    async def _process_pong(self) -> None:
        """A PONG whose ``flush`` gave up (timed out, or its task was cancelled) finds its
        future cancelled. nats-py sets its result regardless, and its read loop ends on the
        ``InvalidStateError`` with the connection still counted as up: nothing more is read
        (replies, pulled messages) until the connection is found stale."""
        if self._pongs:
            future = self._pongs.pop(0)
            if not future.done():
                future.set_result(True)
            self._pongs_received += 1
            self._pings_outstanding = 0

    async def subscribe_raw(self, subject: str, handler: RawHandler) -> Subscription:
        sub = await self.subscribe(subject)
        self._raw_handlers[sub._id] = handler
        return sub

    async def unsubscribe_raw(self, sub: Subscription) -> None:
        self._raw_handlers.pop(sub._id, None)
        await sub.unsubscribe()

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes
    ) -> None:
        handler = self._raw_handlers.get(sid)
        if handler is None:
            await super()._process_msg(sid, subject, reply, data, headers)
            return
        self.stats["in_msgs"] += 1
        self.stats["in_bytes"] += len(data)
        handler(subject, reply, data, headers or b"")

    async def _request_new_style(
        self,
        subject: str,
        payload: bytes,
        timeout: float = 1,
        headers: dict[str, Any] | None = None,
    ) -> Msg:
        """nats-py's request, waiting with ``asyncio.timeout`` instead of ``asyncio.wait_for``.

        On Python 3.11 ``wait_for`` returns the reply and drops a cancellation that arrives
        in the same loop iteration as it: the cancelled task runs on. ``System.close()``
        cancelling the status heartbeat just as a reply came in then waited for it forever,
        and ``streamproc up`` did not stop on SIGINT (docs/operations.md, "Stopping")."""
        if self.is_draining_pubs:
            raise errors.ConnectionDrainingError
        if not self._resp_sub_prefix:
            await self._init_request_sub()
        assert self._resp_sub_prefix
        token = self._nuid.next()
        token.extend(token_hex(2).encode())
        inbox = self._resp_sub_prefix[:]
        inbox.extend(token)
        key = token.decode()
        future: asyncio.Future[Msg] = asyncio.get_running_loop().create_future()
        future.add_done_callback(lambda _: self._resp_map.pop(key, None))
        self._resp_map[key] = future
        try:
            await self.publish(subject, payload, reply=inbox.decode(), headers=headers)
            async with asyncio.timeout(timeout):
                return await future
        except TimeoutError:
            raise errors.TimeoutError from None
        finally:
            future.cancel()  # a no-op once answered; else it leaves the response map

    def _hpub(self, subject: str, reply: str, header: bytes, payload: bytes) -> bytes:
        """The ``HPUB`` command, after nats-py's ``publish`` guards: a closed or draining
        connection raises at once, and so does a reconnecting one whose outbound buffer is
        disabled or full, instead of queueing a message that is never sent."""
        if not subject:
            raise errors.BadSubjectError
        if self.is_closed:
            raise errors.ConnectionClosedError
        if self.is_draining_pubs:
            raise errors.ConnectionDrainingError
        size = len(header) + len(payload)
        if not self.is_connected and (
            self._max_pending_size <= 0 or size + self._pending_data_size > self._max_pending_size
        ):
            raise errors.OutboundBufferLimitError
        if size > self._max_payload:
            # The server would drop the whole connection for it; refuse this one message.
            raise PayloadTooLarge(
                f"message of {size} bytes to {subject} exceeds the server's max_payload "
                f"{self._max_payload}"
            )
        return b"HPUB %s %s %d %d\r\n%s%s\r\n" % (
            subject.encode(),
            reply.encode(),
            len(header),
            size,
            header,
            payload,
        )

    async def publish_hpub(self, subject: str, reply: str, header: bytes, payload: bytes) -> None:
        """Publish with a pre-encoded header block (``publisher.msg_header``)."""
        cmd = self._hpub(subject, reply, header, payload)
        self.stats["out_msgs"] += 1
        self.stats["out_bytes"] += len(payload)
        await self._send_command(cmd)
        if self._flush_queue is not None and self._flush_queue.empty():
            await self._flush_pending()

    def publish_hpub_nowait(self, subject: str, reply: str, header: bytes, payload: bytes) -> bool:
        """:meth:`publish_hpub` as a plain call when nothing need be waited for: queued, and
        the flusher woken. False, with nothing done, when it would have to wait or buffer
        (disconnected, no flusher, the pending buffer full): then use :meth:`publish_hpub`."""
        queue, flusher = self._flush_queue, self._flusher_task
        if queue is None or flusher is None or flusher.done() or not self.is_connected:
            return False
        cmd = self._hpub(subject, reply, header, payload)
        pending = self._pending_data_size + len(cmd)
        if self._max_pending_size > 0 and pending > self._max_pending_size:
            return False
        self._pending.append(cmd)
        self._pending_data_size = pending
        self.stats["out_msgs"] += 1
        self.stats["out_bytes"] += len(payload)
        if queue.empty():
            queue.put_nowait(asyncio.get_running_loop().create_future())
        return True
