"""Per-request observation: request id, RFC 9457 rendering of every error, Prometheus
timing and a structured JSON access log line.

The log line carries the request id, tenant, route template, method, status and latency —
never headers, tokens, signatures, query strings or bodies.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import re
import sys
import time
from collections.abc import Awaitable, Callable
from typing import BinaryIO

import msgspec
from aiohttp import web
from aiohttp.typedefs import Middleware

from streamproc import metrics
from streamproc.problems import ProblemError, from_http_exception, render

log = logging.getLogger("streamproc.gateway")
access = logging.getLogger("streamproc.gateway.access")
_RID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
RID = web.RequestKey("rid", str)
TENANT = web.RequestKey("tenant", str)
SOURCE = web.RequestKey("source", str)
_enc = msgspec.json.Encoder()
_next_id = itertools.count(1).__next__
_BOOT = os.urandom(6).hex()


_stamp = ["", -1]


def _now_text() -> str:
    """UTC time to the second, formatted once per second rather than per request."""
    sec = int(time.time())
    if _stamp[1] != sec:
        _stamp[0] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(sec))
        _stamp[1] = sec
    return _stamp[0]  # type: ignore[return-value]  # slot 0 of the cache is always the str stamp


def new_request_id() -> str:
    """Unique per process run and cheap (a random boot prefix and a counter)."""
    return f"{_BOOT}-{_next_id():x}"


class AccessRecord(msgspec.Struct, omit_defaults=True):
    ts: str
    requestId: str
    method: str
    route: str
    status: int
    latencyMs: float
    tenant: str | None = None
    source: str | None = None
    bytesIn: int | None = None


class AccessSink:
    """Buffered JSON lines: one write per 64 KiB or per half second, not one per request."""

    def __init__(self, stream: BinaryIO, target: str) -> None:
        self.target = target
        self._stream = stream
        self._buf = bytearray()
        self._last = time.monotonic()
        self._timer: asyncio.TimerHandle | None = None

    def write(self, line: bytes) -> None:
        self._buf += line
        self._buf += b"\n"
        if len(self._buf) >= 65536 or time.monotonic() - self._last > 0.5:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(0.5, self.flush)

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._last = time.monotonic()
        if self._buf:
            try:
                self._stream.write(self._buf)
                self._stream.flush()
            except (OSError, ValueError):
                log.warning("access log %s is not writable", self.target)
            self._buf.clear()


_sink: AccessSink | None = None
_via_logging = False


def configure(target: str) -> None:
    """Access lines go to ``stderr``, a file path, the ``logger`` (the logging module's
    ``streamproc.gateway.access``, for operators who route logs themselves), or ``off``."""
    global _sink, _via_logging
    if _sink is not None and _sink.target == target:
        return
    flush()
    _via_logging = target == "logger"
    if target in ("off", "logger"):
        _sink = None
    elif target == "stderr":
        _sink = AccessSink(sys.stderr.buffer, target)
    else:
        _sink = AccessSink(open(target, "ab"), target)  # noqa: SIM115 - lives as long as the process


def flush() -> None:
    if _sink is not None:
        _sink.flush()


def _route(request: web.Request) -> str:
    info = request.match_info
    if info.http_exception is not None:
        return "unmatched"
    resource = info.route.resource
    return resource.canonical if resource is not None else "unmatched"


_timers: dict[tuple[str, str, int], Callable[[float], None]] = {}


def observe_request(paths: tuple[str, ...]) -> Middleware:
    """The middleware; requests outside ``paths`` (ops routes) pass through untouched."""

    @web.middleware
    async def middleware(
        request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        path = request.path
        if not path.startswith(paths) and request.match_info.http_exception is None:
            return await handler(request)
        t0 = time.perf_counter()
        given = request.headers.get("X-Request-Id", "")
        rid = given if given and _RID.match(given) else new_request_id()
        request[RID] = rid
        try:
            resp = await handler(request)
        except ProblemError as exc:
            resp = render(exc, path, rid)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            resp = render(from_http_exception(exc), path, rid)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("unhandled error in %s %s (request %s)", request.method, path, rid)
            resp = render(ProblemError(500, "internal", "internal error"), path, rid)
        resp.headers["X-Request-Id"] = rid
        elapsed = time.perf_counter() - t0
        route = _route(request)
        key = (route, request.method, resp.status)
        timer = _timers.get(key)
        if timer is None:
            timer = _timers[key] = metrics.loop_histogram(
                metrics.HTTP_REQUEST_SECONDS.labels(route, request.method, str(resp.status))
            )
        timer(elapsed)
        if _sink is not None or (_via_logging and access.isEnabledFor(logging.INFO)):
            line = _enc.encode(
                AccessRecord(
                    ts=_now_text(),
                    requestId=rid,
                    method=request.method,
                    route=route,
                    status=resp.status,
                    latencyMs=round(elapsed * 1000, 3),
                    tenant=request.get(TENANT),
                    source=request.get(SOURCE),
                    bytesIn=request.content_length,
                )
            )
            if _sink is not None:
                _sink.write(line)
            else:
                access.info(line.decode())
        return resp

    return middleware
