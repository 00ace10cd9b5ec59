"""The operational HTTP surface every role serves: liveness, readiness, Prometheus metrics."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

ReadyCheck = Callable[[], Awaitable[tuple[bool, dict[str, object]]]]


def add_ops_routes(app: web.Application, ready: ReadyCheck) -> None:
    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(_: web.Request) -> web.Response:
        ok, detail = await ready()
        return web.json_response(
            {"status": "ready" if ok else "not ready", **detail}, status=200 if ok else 503
        )

    async def metrics(_: web.Request) -> web.Response:
        body = generate_latest()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
