"""A lean HTTP/1.1 keep-alive client for the scanner hot path (``POST /reports``).

aiohttp's client costs a few hundred microseconds of Python per request (request and
response objects, cookie jar, tracing hooks), which on a 2-core machine caps a runner below
the scanner's capacity. Scanner calls need none of that: a bounded pool of persistent
connections, one request at a time per connection, a ``Content-Length`` (or chunked) body.
Any protocol surprise closes the connection and raises :class:`HttpError`, which the caller
treats like a dropped connection (retried with the same idempotency key). A kept-alive
connection the server closed while it was idle is found out only by using it: a request on
a reused connection that gets no answer at all is sent once more on a new one.

aiohttp's client stays for ``https://`` scanners; docs/performance-notebook.md ("The
scanner's HTTP client") has the measurement behind keeping this one for plain HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import cast
from urllib.parse import urlsplit


class HttpError(ConnectionError):
    """The connection broke or the answer was not parseable HTTP/1.1."""


class _NoAnswer(HttpError):
    """The connection ended before any byte of an answer (an idle one the server closed)."""


MAX_HEAD = 64 * 1024
"""Most bytes of an answer's status line and headers."""


class _Conn(asyncio.Protocol):
    """One connection: the answer is parsed from what arrives, as it arrives, and handed
    over whole (no stream reader: one wake-up per answer, not one per read)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.ended = False
        """The server closed its side (or the connection is gone)."""
        self.lost: BaseException | None = None
        self.waiter: asyncio.Future[tuple[int, dict[str, str], bytes, bool]] | None = None
        self.method = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self._check()

    def eof_received(self) -> bool:
        self.ended = True
        self._check()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended = True
        self.lost = exc
        self._check()

    def at_eof(self) -> bool:
        return self.ended

    def close(self) -> None:
        if self.transport is not None:
            with contextlib.suppress(Exception):
                self.transport.close()

    async def exchange(
        self, method: str, request: bytes
    ) -> tuple[int, dict[str, str], bytes, bool]:
        assert self.transport is not None
        self.method = method
        self.waiter = asyncio.get_running_loop().create_future()
        if self.ended:
            raise _NoAnswer("connection closed before an answer")
        self.transport.write(request)
        if self.buf:  # bytes the server sent unasked (as a stream reader would hand over)
            self._check()
        try:
            return await self.waiter
        finally:
            self.waiter = None

    def _check(self) -> None:
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        try:
            answer = self._parse()
        except HttpError as exc:
            waiter.set_exception(exc)
            return
        if answer is not None:
            waiter.set_result(answer)

    def _parse(self) -> tuple[int, dict[str, str], bytes, bool] | None:
        """The whole answer in the buffer (taken out of it), None until it is there."""
        buf = self.buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEAD:
                raise HttpError(f"answer head too large: over {MAX_HEAD} bytes")
            if not self.ended:
                return None
            if not buf:
                why = f": {self.lost}" if self.lost is not None else ""
                raise _NoAnswer(f"connection closed before an answer{why}")
            raise HttpError(f"connection closed in an answer's head: {bytes(buf[:80])!r}")
        status_line, *rest = bytes(buf[:end]).split(b"\r\n")
        parts = status_line.split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise HttpError(f"not an HTTP/1.1 answer: {status_line[:80]!r}")
        head: dict[str, str] = {}
        for line in rest:
            name, _, value = line.partition(b":")
            head[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
        status = int(parts[1])
        keep = head.get("connection", "").lower() != "close" and parts[0] != b"HTTP/1.0"
        start = end + 4
        if head.get("transfer-encoding", "").lower() == "chunked":
            got = self._chunked(start)
            if got is None:
                return None
            data, used = got
        elif "content-length" in head:
            try:
                n = int(head["content-length"])
            except ValueError as exc:
                raise HttpError(f"truncated answer: {exc}") from None
            if len(buf) < start + n:
                if self.ended:
                    raise HttpError(
                        f"truncated answer: {len(buf) - start} of {n} bytes before the end"
                    )
                return None
            data, used = bytes(buf[start : start + n]), start + n
        elif status in (204, 304) or status < 200 or self.method == "HEAD":
            data, used = b"", start
        else:  # no length given: the body ends with the connection
            if not self.ended:
                return None
            data, used, keep = bytes(buf[start:]), len(buf), False
        del buf[:used]
        return status, head, data, keep

    def _chunked(self, pos: int) -> tuple[bytes, int] | None:
        buf = self.buf
        out = bytearray()
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                self._short()
                return None
            try:
                size = int(bytes(buf[pos:eol]).split(b";")[0], 16)
            except ValueError as exc:
                raise HttpError(f"truncated answer: {exc}") from None
            if size == 0:
                last = buf.find(b"\r\n", eol + 2)
                if last < 0:
                    self._short()
                    return None
                return bytes(out), last + 2
            if len(buf) < eol + 2 + size + 2:
                self._short()
                return None
            out += buf[eol + 2 : eol + 2 + size]
            pos = eol + 2 + size + 2

    def _short(self) -> None:
        """A chunked body not all here yet: wait for more, unless no more will come."""
        if self.ended:
            raise HttpError("truncated answer: the connection ended in a chunked body")


class Http1Pool:
    def __init__(self, base_url: str, size: int = 64) -> None:
        u = urlsplit(base_url)
        if u.scheme != "http" or not u.hostname:
            raise ValueError(f"Http1Pool speaks plain http://, not {base_url!r}")
        self.host = u.hostname
        self.port = u.port or 80
        self.prefix = u.path.rstrip("/")
        self.size = size
        self._idle: deque[_Conn] = deque()
        self._open = 0
        self._free = asyncio.Semaphore(size)
        self._host_header = f"Host: {self.host}:{self.port}\r\n".encode()

    async def _get(self, fresh: bool = False) -> _Conn:
        while self._idle and not fresh:
            conn = self._idle.pop()
            if not conn.at_eof():
                return conn
            conn.close()
            self._open -= 1
        _, conn = await asyncio.get_running_loop().create_connection(_Conn, self.host, self.port)
        self._open += 1
        return conn

    async def request(
        self, method: str, path: str, headers: dict[str, str], body: bytes = b""
    ) -> tuple[int, dict[str, str], bytes]:
        async with self._free:
            reused = bool(self._idle)
            conn = await self._get()
            try:
                status, head, data, keep = await self._exchange(conn, method, path, headers, body)
            except _NoAnswer:
                self._discard(conn)
                if not reused:
                    raise
                conn = await self._get(fresh=True)  # the server had closed the idle one
                try:
                    status, head, data, keep = await self._exchange(
                        conn, method, path, headers, body
                    )
                except BaseException:
                    self._discard(conn)
                    raise
            except BaseException:
                self._discard(conn)
                raise
            if keep:
                self._idle.append(conn)
            else:
                self._discard(conn)
            return status, head, data

    def _discard(self, conn: _Conn) -> None:
        conn.close()
        self._open -= 1

    async def _exchange(
        self, conn: _Conn, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes, bool]:
        lines = [f"{method} {self.prefix}{path} HTTP/1.1\r\n".encode(), self._host_header]
        for k, v in headers.items():
            lines.append(f"{k}: {v}\r\n".encode())
        lines.append(b"Content-Length: %d\r\n\r\n" % len(body))
        lines.append(body)
        return await conn.exchange(method, b"".join(lines))

    async def close(self) -> None:
        """Close the idle connections (those in use close when their request ends)."""
        while self._idle:
            self._discard(self._idle.pop())
