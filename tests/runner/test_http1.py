"""The runner's HTTP/1.1 client for the scanner, against real servers on loopback: aiohttp's
for well-formed answers, a raw asyncio one for what a broken or impolite server does."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web

from streamproc.runner.http1 import Http1Pool, HttpError

RawHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def serve_app(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


@pytest.fixture
async def scanner_like() -> AsyncIterator[tuple[str, dict[str, object]]]:
    """Echoes what it got; remembers the client connections it saw and the peak load."""
    seen: dict[str, object] = {"peers": set(), "busy": 0, "peak": 0}

    async def echo(request: web.Request) -> web.StreamResponse:
        seen["peers"].add(request.transport.get_extra_info("peername"))  # type: ignore[union-attr,attr-defined]
        seen["busy"] = int(seen["busy"]) + 1  # type: ignore[call-overload]
        seen["peak"] = max(int(seen["peak"]), int(seen["busy"]))  # type: ignore[call-overload]
        try:
            await asyncio.sleep(float(request.query.get("sleep", "0")))
            body = await request.read()
            doc = {
                "path": request.path,
                "key": request.headers.get("Idempotency-Key"),
                "host": request.headers.get("Host"),
                "body": body.decode(),
            }
            if request.query.get("chunked"):
                resp = web.StreamResponse()
                resp.enable_chunked_encoding()
                await resp.prepare(request)
                for part in (b'{"chunks":', b"[1,2,", b"3]}"):
                    await resp.write(part)
                await resp.write_eof()
                return resp
            headers = {"Connection": "close"} if request.query.get("close") else {}
            return web.json_response(doc, status=int(request.query.get("status", "200")),
                                     headers=headers)  # fmt: skip
        finally:
            seen["busy"] = int(seen["busy"]) - 1  # type: ignore[call-overload]

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", echo)
    runner, url = await serve_app(app)
    yield url, seen
    await runner.cleanup()


@contextlib.asynccontextmanager
async def pool_of(url: str, size: int) -> AsyncIterator[Http1Pool]:
    pool = Http1Pool(url, size=size)
    try:
        yield pool
    finally:
        await pool.close()


async def raw_server(handler: RawHandler) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


async def test_requests_reuse_one_kept_alive_connection(
    scanner_like: tuple[str, dict[str, object]],
) -> None:
    url, seen = scanner_like
    pool = Http1Pool(url + "/api", size=4)
    try:
        for i in range(3):
            status, head, body = await pool.request(
                "POST", "/reports", {"Idempotency-Key": f"k{i}"}, b'{"n":%d}' % i
            )
            assert status == 200 and head["content-type"].startswith("application/json")
            doc = json.loads(body)
            assert doc == {"path": "/api/reports", "key": f"k{i}", "host": doc["host"],
                           "body": f'{{"n":{i}}}'}  # fmt: skip
        assert len(seen["peers"]) == 1  # type: ignore[arg-type]
        status, _, body = await pool.request("GET", "/x?status=404", {})
        assert status == 404 and json.loads(body)["host"] == url.removeprefix("http://")
    finally:
        await pool.close()


async def test_chunked_answers_and_connection_close(
    scanner_like: tuple[str, dict[str, object]],
) -> None:
    url, seen = scanner_like
    async with pool_of(url, 4) as pool:
        status, _, body = await pool.request("GET", "/c?chunked=1", {})
        assert (status, body) == (200, b'{"chunks":[1,2,3]}')
        await pool.request("GET", "/c?close=1", {})
        await pool.request("GET", "/c", {})
        assert len(seen["peers"]) == 2, "a connection the server closes is not reused"  # type: ignore[arg-type]


async def test_the_pool_bounds_the_connections_in_use(
    scanner_like: tuple[str, dict[str, object]],
) -> None:
    url, seen = scanner_like
    async with pool_of(url, 3) as pool:
        answers = await asyncio.gather(
            *(pool.request("GET", "/s?sleep=0.05", {}) for _ in range(9))
        )
        assert all(a[0] == 200 for a in answers)
        assert seen["peak"] == 3 and len(seen["peers"]) == 3  # type: ignore[arg-type]


async def test_an_idle_connection_the_server_closed_is_replaced_transparently() -> None:
    served = 0

    async def one_answer_per_connection(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        nonlocal served
        await r.readuntil(b"\r\n\r\n")
        served += 1
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")  # says keep-alive…
        await w.drain()
        await r.readuntil(b"\r\n\r\n")  # …but its idle timeout strikes as the next one comes
        w.close()

    server, url = await raw_server(one_answer_per_connection)
    pool = Http1Pool(url, size=2)
    try:
        for _ in range(3):
            assert (await pool.request("POST", "/reports", {}, b"{}"))[2] == b"ok"
        assert served == 3
    finally:
        await pool.close()
        server.close()


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (b"HELLO THERE\r\n\r\n", "not an HTTP/1.1 answer"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", "truncated answer"),
        (b"HTTP/1.1 200 OK\r\nContent-Len", "in an answer's head"),
        (b"", "closed before an answer"),
    ],
)
async def test_broken_answers_raise_http_error(answer: bytes, message: str) -> None:
    async def broken(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await r.readuntil(b"\r\n\r\n")
        w.write(answer)
        await w.drain()
        w.close()

    server, url = await raw_server(broken)
    pool = Http1Pool(url, size=1)
    try:
        with pytest.raises(HttpError, match=message):
            await pool.request("GET", "/", {})
        assert pool._open == 0, "a broken connection is not kept"
    finally:
        await pool.close()
        server.close()


async def test_a_body_without_length_ends_with_the_connection() -> None:
    async def old_style(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await r.readuntil(b"\r\n\r\n")
        w.write(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{"a":1}')
        await w.drain()
        w.close()

    server, url = await raw_server(old_style)
    pool = Http1Pool(url, size=1)
    try:
        assert await pool.request("GET", "/", {}) == (
            200, {"content-type": "application/json"}, b'{"a":1}'
        )  # fmt: skip
    finally:
        await pool.close()
        server.close()


def test_only_plain_http_urls() -> None:
    with pytest.raises(ValueError, match="plain http"):
        Http1Pool("https://scanner.example")
