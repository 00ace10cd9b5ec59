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
from urllib.parse import urlsplit


class HttpError(ConnectionError):
    """The connection broke or the answer was not parseable HTTP/1.1."""


class _NoAnswer(HttpError):
    """The connection ended before any byte of an answer (an idle one the server closed)."""


class _Conn:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


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
            if not conn.reader.at_eof():
                return conn
            conn.close()
            self._open -= 1
        reader, writer = await asyncio.open_connection(self.host, self.port)
        self._open += 1
        return _Conn(reader, writer)

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
        conn.writer.write(b"".join(lines))
        try:
            raw = await conn.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if not exc.partial:
                raise _NoAnswer("connection closed before an answer") from None
            raise HttpError(f"connection closed in an answer's head: {exc}") from None
        except asyncio.LimitOverrunError as exc:
            raise HttpError(f"answer head too large: {exc}") from None
        except ConnectionError as exc:
            raise _NoAnswer(f"connection lost before an answer: {exc}") from None
        status_line, *rest = raw[:-4].split(b"\r\n")
        parts = status_line.split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise HttpError(f"not an HTTP/1.1 answer: {status_line[:80]!r}")
        head: dict[str, str] = {}
        for line in rest:
            name, _, value = line.partition(b":")
            head[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
        status = int(parts[1])
        keep = head.get("connection", "").lower() != "close" and parts[0] != b"HTTP/1.0"
        try:
            if head.get("transfer-encoding", "").lower() == "chunked":
                data = await self._chunked(conn.reader)
            elif "content-length" in head:
                data = await conn.reader.readexactly(int(head["content-length"]))
            elif status in (204, 304) or status < 200 or method == "HEAD":
                data = b""
            else:  # no length given: the body ends with the connection
                data = await conn.reader.read()
                keep = False
        except (asyncio.IncompleteReadError, ValueError) as exc:
            raise HttpError(f"truncated answer: {exc}") from None
        return status, head, data, keep

    @staticmethod
    async def _chunked(reader: asyncio.StreamReader) -> bytes:
        out = bytearray()
        while True:
            size = int((await reader.readuntil(b"\r\n"))[:-2].split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                return bytes(out)
            out += await reader.readexactly(size)
            await reader.readexactly(2)

    async def close(self) -> None:
        """Close the idle connections (those in use close when their request ends)."""
        while self._idle:
            self._discard(self._idle.pop())
