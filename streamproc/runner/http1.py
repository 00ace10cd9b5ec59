"""A lean HTTP/1.1 keep-alive client for the scanner hot path (``POST /reports``).

aiohttp's client costs a few hundred microseconds of Python per request (request and
response objects, cookie jar, tracing hooks), which on a 2-core machine caps a runner below
the scanner's capacity. Scanner calls need none of that: a bounded pool of persistent
connections, one request at a time per connection, a ``Content-Length`` (or chunked) body.
Any protocol surprise closes the connection and raises :class:`HttpError`, which the caller
treats like a dropped connection (retried with the same idempotency key).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from urllib.parse import urlsplit


class HttpError(ConnectionError):
    """The connection broke or the answer was not parseable HTTP/1.1."""


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

    async def _get(self) -> _Conn:
        while self._idle:
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
            conn = await self._get()
            try:
                status, head, data, keep = await self._exchange(conn, method, path, headers, body)
            except BaseException:
                conn.close()
                self._open -= 1
                raise
            if keep:
                self._idle.append(conn)
            else:
                conn.close()
                self._open -= 1
            return status, head, data

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
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            raise HttpError(f"connection closed before an answer: {exc}") from None
        status_line, *rest = raw[:-4].split(b"\r\n")
        parts = status_line.split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise HttpError(f"not an HTTP/1.1 answer: {status_line[:80]!r}")
        head: dict[str, str] = {}
        for line in rest:
            k, _, v = line.partition(b":")
            head[k.strip().lower().decode("latin-1")] = v.strip().decode("latin-1")
        try:
            if head.get("transfer-encoding", "").lower() == "chunked":
                data = await self._chunked(conn.reader)
            else:
                data = await conn.reader.readexactly(int(head.get("content-length", "0")))
        except (asyncio.IncompleteReadError, ValueError) as exc:
            raise HttpError(f"truncated answer: {exc}") from None
        keep = head.get("connection", "").lower() != "close" and parts[0] != b"HTTP/1.0"
        return int(parts[1]), head, data, keep

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

    def close_now(self) -> None:
        """Close idle connections (synchronous: usable from a done callback)."""
        while self._idle:
            self._idle.pop().close()
        self._open = 0

    async def close(self) -> None:
        self.close_now()
