"""The operational HTTP surface every role serves: liveness, readiness, Prometheus metrics.

Metrics carry tenant labels (chain entries, backlogs, dead letters per tenant), so they are
served only on an ops listener: the HTTP port of a role without the API, or the separate
``ops_port`` listener (loopback unless configured) of a process that serves the API — never
where API callers reach. ``/healthz`` and ``/readyz`` stay on the API port too, for load
balancers; they name no tenant.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from streamproc.state import memory

ReadyCheck = Callable[[], Awaitable[tuple[bool, dict[str, object]]]]


def add_ops_routes(app: web.Application, ready: ReadyCheck, *, metrics: bool = True) -> None:
    """``/healthz`` and ``/readyz``; ``/metrics`` too unless ``metrics`` is False (the API's
    listener)."""

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(_: web.Request) -> web.Response:
        ok, detail = await ready()
        return web.json_response(
            {"status": "ready" if ok else "not ready", **detail}, status=200 if ok else 503
        )

    async def serve_metrics(_: web.Request) -> web.Response:
        memory.refresh()
        body = generate_latest()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    if metrics:
        app.router.add_get("/metrics", serve_metrics)


def ops_app(ready: ReadyCheck) -> web.Application:
    """The ops listener's application: nothing but the three routes."""
    app = web.Application()
    add_ops_routes(app, ready)
    return app
