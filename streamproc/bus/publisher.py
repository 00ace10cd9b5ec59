"""Publishing events to JetStream: one pipelined path for single edits and bulk alike.

nats-py's ``publish_async`` leaks window slots when the server rejects a message and has
no per-message timeout, and awaiting ``js.publish`` one at a time caps at a few thousand
per second. This publisher keeps one wildcard reply inbox and a token → pending map, so many
publishes are in flight at once (a bounded window), every rejection surfaces on its own
future, and a publish that times out is sent again with the same ``Nats-Msg-Id`` — JetStream's
de-duplication makes the retry safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from typing import Any

import msgspec

from streamproc import metrics
from streamproc.bus.fastclient import FastClient, status_of
from streamproc.cancellation import checkpoint
from streamproc.events.catalog import subject_for
from streamproc.events.envelope import Envelope, encode
from streamproc.names import DEFAULT_PREFIX

WRONG_LAST_SEQUENCE = 10071
STREAM_STORE_FULL = 10077


class PubAck(msgspec.Struct, frozen=True):
    stream: str
    seq: int
    duplicate: bool = False


class _ApiError(msgspec.Struct):
    code: int = 0
    err_code: int = 0
    description: str = ""


class _Reply(msgspec.Struct):
    stream: str = ""
    seq: int = 0
    duplicate: bool = False
    error: _ApiError | None = None


class PublishError(Exception):
    """The server refused the message; not retried (the answer would be the same)."""

    def __init__(self, code: int, err_code: int, description: str, subject: str) -> None:
        self.code = code
        self.err_code = err_code
        self.description = description
        self.subject = subject
        super().__init__(f"publish to {subject} refused ({code}/{err_code}): {description}")


class WrongExpectedSequence(PublishError):
    """Optimistic concurrency lost: someone else wrote to the aggregate first."""


class PublishTimeout(Exception):
    """No acknowledgement after every retry; the outcome is unknown but retry-safe."""


class NoStream(Exception):
    """No stream answered for the subject (no responders) after every retry."""


_reply_decoder = msgspec.json.Decoder(_Reply)
# Counted on every acknowledgement (two a webhook): plain adds, read as usual when scraped.
_STORED = metrics.loop_counter(metrics.PUBLISHED.labels("stored"))
_DUPLICATE = metrics.loop_counter(metrics.PUBLISHED.labels("duplicate"))
_REFUSED = metrics.loop_counter(metrics.PUBLISHED.labels("refused"))


class _Sink:
    """Collects the outcomes of one call's messages; resolves once all are settled."""

    __slots__ = ("future", "left", "results")

    def __init__(self, n: int, loop: asyncio.AbstractEventLoop) -> None:
        self.results: list[PubAck | BaseException | None] = [None] * n
        self.left = n
        self.future: asyncio.Future[None] = loop.create_future()
        if n == 0:
            self.future.set_result(None)

    def settle(self, index: int, outcome: PubAck | BaseException) -> None:
        if self.results[index] is not None:
            return
        self.results[index] = outcome
        self.left -= 1
        if self.left == 0 and not self.future.done():
            self.future.set_result(None)


class _Pending:
    __slots__ = ("attempts", "data", "deadline", "header", "index", "sink", "subject")

    def __init__(self, subject: str, data: bytes, header: bytes, sink: _Sink, index: int) -> None:
        self.subject = subject
        self.data = data
        self.header = header
        self.sink = sink
        self.index = index
        self.attempts = 1
        self.deadline = 0.0


def msg_header(
    msg_id: str | None, expected_last_subject_seq: int | None = None, ttl_s: int | None = None
) -> bytes:
    """``msg_id`` None: no ``Nats-Msg-Id`` (the message is kept out of the stream's duplicate
    window; it must be made unique another way, e.g. ``expected_last_subject_seq``)."""
    out = b"NATS/1.0\r\n"
    if msg_id is not None:
        out += b"Nats-Msg-Id: %s\r\n" % msg_id.encode()
    if expected_last_subject_seq is not None:
        out += b"Nats-Expected-Last-Subject-Sequence: %d\r\n" % expected_last_subject_seq
    if ttl_s is not None:  # per-message TTL (server >= 2.11; the stream must allow it)
        out += b"Nats-TTL: %d\r\n" % ttl_s
    return out + b"\r\n"


class Publisher:
    """Pipelined JetStream publisher. Start it once per connection and share it."""

    def __init__(
        self,
        nc: FastClient,
        *,
        prefix: str = DEFAULT_PREFIX,
        window: int = 4096,
        timeout: float = 5.0,
        attempts: int = 4,
    ) -> None:
        self.nc = nc
        self.prefix = prefix
        self.window = window
        self.timeout = timeout
        self.attempts = attempts
        self._inflight = 0
        self._space = asyncio.Event()
        self._pending: dict[bytes, _Pending] = {}
        self._next = 0
        self._inbox = ""
        self._inbox_len = 0
        self._sub: Any = None
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self) -> Publisher:
        self._inbox = self.nc.new_inbox()
        self._inbox_len = len(self._inbox) + 1
        self._sub = await self.nc.subscribe_raw(self._inbox + ".*", self._on_reply)
        self._sweeper = asyncio.create_task(self._sweep())
        return self

    async def close(self) -> None:
        if self._sweeper:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self.nc.unsubscribe_raw(self._sub)
            self._sub = None
        for p in self._pending.values():
            p.sink.settle(p.index, PublishTimeout("publisher closed before acknowledgement"))
        self._pending.clear()

    async def __aenter__(self) -> Publisher:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ sending

    def _send_now(self, subject: str, data: bytes, header: bytes, sink: _Sink, i: int) -> bool:
        """Send without waiting when the window has room and the client can queue at once
        (the common case); False, with nothing sent, otherwise."""
        if self._inflight >= self.window:
            return False
        n = self._next
        try:
            if not self.nc.publish_hpub_nowait(subject, f"{self._inbox}.{n}", header, data):
                return False
        except Exception as exc:
            sink.settle(i, exc)
            return True
        self._next = n + 1
        self._inflight += 1
        pending = _Pending(subject, data, header, sink, i)
        pending.deadline = time.monotonic() + self.timeout
        self._pending[b"%d" % n] = pending
        return True

    async def _send(self, subject: str, data: bytes, header: bytes, sink: _Sink, i: int) -> None:
        if self._inflight >= self.window:
            # Resume only when half the window is free, so sends and flushes stay in bulk
            # instead of one message per acknowledgement.
            while self._inflight > self.window // 2:
                self._space.clear()
                await self._space.wait()
        self._inflight += 1
        token = b"%d" % self._next
        self._next += 1
        pending = _Pending(subject, data, header, sink, i)
        pending.deadline = time.monotonic() + self.timeout
        self._pending[token] = pending
        try:
            await self.nc.publish_hpub(subject, f"{self._inbox}.{token.decode()}", header, data)
        except Exception as exc:
            self._finish(token)
            sink.settle(i, exc)

    async def publish(
        self,
        subject: str,
        data: bytes,
        msg_id: str | None,
        *,
        expected_last_subject_seq: int | None = None,
        ttl_s: int | None = None,
    ) -> PubAck:
        """Publish one message and wait for its acknowledgement (or its error); ``ttl_s``:
        the server removes the message that many seconds after storing it. ``msg_id`` None:
        without ``Nats-Msg-Id`` (see :func:`msg_header`); a resend after a timeout is then
        told from a new message only by ``expected_last_subject_seq``."""
        sink = _Sink(1, asyncio.get_running_loop())
        header = msg_header(msg_id, expected_last_subject_seq, ttl_s)
        if not self._send_now(subject, data, header, sink, 0):
            await self._send(subject, data, header, sink, 0)
        await sink.future
        outcome = sink.results[0]
        if isinstance(outcome, BaseException):
            raise outcome
        assert outcome is not None
        return outcome

    def subject_of(self, event: Envelope) -> str:
        return subject_for(self.prefix, event.tenant, event.kind, event.payload)

    async def publish_event(
        self, event: Envelope, *, expected_last_subject_seq: int | None = None
    ) -> PubAck:
        return await self.publish(
            self.subject_of(event),
            encode(event),
            event.id,
            expected_last_subject_seq=expected_last_subject_seq,
        )

    async def publish_events(self, events: Iterable[Envelope]) -> list[PubAck]:
        """Pipeline many events; raises the first per-message error after all settle."""
        return await self.publish_many((self.subject_of(e), encode(e), e.id) for e in events)

    async def publish_many(self, items: Iterable[tuple[str, bytes, str]]) -> list[PubAck]:
        outcomes = await self.publish_many_settled(items)
        for r in outcomes:
            if isinstance(r, BaseException):
                raise r
        return outcomes  # type: ignore[return-value]  # gather(return_exceptions=True) types BaseException too; raised above

    async def publish_many_settled(
        self, items: Iterable[tuple[str, bytes, str]]
    ) -> list[PubAck | BaseException]:
        """Pipeline ``(subject, data, msg_id)`` items; each outcome is an ack or its error."""
        batch = list(items)
        sink = _Sink(len(batch), asyncio.get_running_loop())
        send, send_now = self._send, self._send_now
        for i, (subject, data, msg_id) in enumerate(batch):
            header = msg_header(msg_id)
            if not send_now(subject, data, header, sink, i):
                await send(subject, data, header, sink, i)
            if i & 255 == 255:
                await asyncio.sleep(0)  # let the flusher write while we keep producing
        await sink.future
        return sink.results  # type: ignore[return-value]  # the sink fills every slot before its future resolves

    # ------------------------------------------------------------------ replies

    def _finish(self, token: bytes) -> _Pending | None:
        p = self._pending.pop(token, None)
        if p is not None:
            self._inflight -= 1
            if self._inflight <= self.window // 2:
                self._space.set()
        return p

    def _on_reply(self, subject: bytes, reply: bytes, data: bytes, headers: bytes) -> None:
        token = subject[self._inbox_len :]
        p = self._pending.get(token)
        if p is None:
            return
        if not data and status_of(headers) == b"503":
            # No responders: the stream is missing or electing a leader; retry until deadline.
            if p.attempts < self.attempts:
                p.deadline = time.monotonic() + min(0.25 * p.attempts, self.timeout)
                p.attempts = -p.attempts  # marked for resend by the sweeper
                return
            self._finish(token)
            metrics.PUBLISHED.labels("no_stream").inc()
            p.sink.settle(p.index, NoStream(f"no stream answered for {p.subject}"))
            return
        self._finish(token)
        try:
            r = _reply_decoder.decode(data)
        except msgspec.DecodeError:
            p.sink.settle(p.index, PublishError(0, 0, f"bad reply {data[:200]!r}", p.subject))
            return
        if r.error is not None:
            _REFUSED()
            cls = WrongExpectedSequence if r.error.err_code == WRONG_LAST_SEQUENCE else PublishError
            p.sink.settle(
                p.index, cls(r.error.code, r.error.err_code, r.error.description, p.subject)
            )
            return
        (_DUPLICATE if r.duplicate else _STORED)()
        p.sink.settle(p.index, PubAck(r.stream, r.seq, r.duplicate))

    async def _sweep(self) -> None:
        """Resend timed-out (and no-responder) messages with the same id, or give up."""
        while True:
            checkpoint()
            await asyncio.sleep(0.05)
            if not self._pending:
                continue
            now = time.monotonic()
            expired = [(t, p) for t, p in self._pending.items() if p.deadline <= now]
            for token, p in expired:
                delayed_no_stream = p.attempts < 0
                attempts = -p.attempts if delayed_no_stream else p.attempts
                if not delayed_no_stream and attempts >= self.attempts:
                    self._finish(token)
                    metrics.PUBLISHED.labels("timeout").inc()
                    p.sink.settle(
                        p.index,
                        PublishTimeout(
                            f"no acknowledgement for {p.subject} after {attempts} attempts"
                        ),
                    )
                    continue
                p.attempts = attempts + 1
                p.deadline = now + self.timeout
                metrics.PUBLISH_RETRIES.inc()
                try:
                    await self.nc.publish_hpub(
                        p.subject, f"{self._inbox}.{token.decode()}", p.header, p.data
                    )
                except Exception as exc:  # connection closed: fail this message, keep sweeping
                    self._finish(token)
                    p.sink.settle(p.index, exc)
