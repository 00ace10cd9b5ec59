"""Mounting the gateway on a process: the routes bound to its context, the access-log
middleware, /openapi.json, an optional TLS listener, the Notify window keeper, and draining
on shutdown. What the handlers use is ``context.py``'s; the routes are ``api/``'s."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from typing import Any

from aiohttp import web

from streamproc.gateway import accesslog
from streamproc.gateway.api.openapi import openapi_handler
from streamproc.gateway.api.operations import BASE, Operation
from streamproc.gateway.api.query import bool_param
from streamproc.gateway.api.routes import OPERATIONS
from streamproc.gateway.auth.callers import Principal
from streamproc.gateway.auth.tls import server_context
from streamproc.gateway.context import GatewayContext
from streamproc.gateway.settings import GatewaySettings
from streamproc.problems import ProblemError
from streamproc.runtime.reactor import RoleContext

log = logging.getLogger("streamproc.gateway")
SHUTDOWN_TIMEOUT = 30.0
GATEWAY = web.AppKey("gateway", GatewayContext)
"""The context of the gateway mounted on an application."""


class Mount:
    """The gateway as mounted: one context, the applications serving it, draining."""

    def __init__(self, gw: GatewayContext) -> None:
        self.gw = gw
        self.draining = False
        self._keeper: asyncio.Task[None] | None = None
        self.tls_runner: web.AppRunner | None = None
        self.tls_url = ""

    def _bind(self, op: Operation) -> Any:
        scope = op.scope
        handler = op.handler
        gw = self.gw
        auth = gw.auth
        booleans = tuple(
            p.name for p in op.params if p.where == "query" and p.schema.get("type") == "boolean"
        )

        async def route(request: web.Request) -> web.StreamResponse:
            if self.draining:
                raise ProblemError(
                    503,
                    "shutting-down",
                    "the gateway is shutting down; retry on another instance",
                    headers={"Retry-After": "1", "Connection": "close"},
                )
            who: Principal | None = None
            if scope is not None:
                who = await auth.authenticate(request, scope)
                request[accesslog.TENANT] = who.tenant
            for name in booleans:  # refused before the handler writes anything
                bool_param(request, name)
            return gw.with_nonce(await handler(gw, request, who), who)

        return route

    def install(self, app: web.Application) -> None:
        """Add the API routes, /openapi.json and the middleware to ``app``."""
        app[GATEWAY] = self.gw
        app.middlewares.append(accesslog.observe_request((BASE, "/openapi.json")))
        for op in OPERATIONS:
            app.router.add_route(op.method, op.full_path, self._bind(op), name=op.operation_id)
        app.router.add_get("/openapi.json", openapi_handler)
        app.on_shutdown.append(self._on_shutdown)
        app.on_cleanup.append(self._on_cleanup)

    def start_window_keeper(self) -> None:
        """Move the Notify stream's delivery window along while the gateway runs (every
        gateway does: a move is idempotent and only ever forward)."""
        if self._keeper is None:
            self._keeper = asyncio.create_task(self.gw.window.run(), name="notify-window-keeper")

    async def _on_shutdown(self, _app: web.Application) -> None:
        """Stop taking new requests; aiohttp then lets in-flight ones finish."""
        self.draining = True
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
            self._keeper = None
        if self.tls_runner is not None:
            runner, self.tls_runner = self.tls_runner, None
            await runner.cleanup()

    async def _on_cleanup(self, _app: web.Application) -> None:
        accesslog.flush()

    async def start_tls(self) -> None:
        """Serve the same routes over HTTPS (client certificates: mTLS tokens, webhooks)."""
        s = self.gw.s
        cfg = s.tls
        if cfg is None:
            return
        extra = [w.mtls.ca_file for w in s.webhooks if w.mtls and w.mtls.ca_file]
        ctx: ssl.SSLContext = server_context(cfg, extra)
        app = web.Application(
            client_max_size=self.gw.body_cap, handler_args={"auto_decompress": False}
        )
        self.install(app)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT)
        await runner.setup()
        site = web.TCPSite(runner, cfg.host, cfg.port, ssl_context=ctx)
        await site.start()
        self.tls_runner = runner
        port = cfg.port
        with contextlib.suppress(Exception):
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]  # aiohttp's site._server is private and typed Optional[AbstractServer]
        self.tls_url = f"https://{cfg.host}:{port}"
        log.info("gateway HTTPS listener on %s", self.tls_url)


def pass_bodies_through(app: web.Application) -> None:
    """Make aiohttp hand request bodies over exactly as sent (no Content-Encoding decoding).

    The gateway decodes gzip/zstd itself, under its own caps and after checking webhook
    signatures over the bytes as sent; aiohttp would otherwise inflate gzip unbounded in its
    lingering read and refuse zstd before any handler runs. ``streamproc/runtime/app.py``
    creates its application with ``handler_args={"auto_decompress": False}``; this covers
    applications built elsewhere (tests, embedding), read by the runner when it starts.
    """
    args = dict(getattr(app, "_handler_args", None) or {})
    if args.get("auto_decompress") is not False:
        args["auto_decompress"] = False
        app._handler_args = args


def mount_gateway(app: web.Application, ctx: RoleContext, settings: GatewaySettings) -> Mount:
    """Install the gateway on the process's app; the replay bucket is opened and the TLS
    listener started with the app."""
    accesslog.configure(settings.access_log)
    pass_bodies_through(app)
    mount = Mount(GatewayContext(ctx, settings))
    mount.install(app)

    async def open_replay(_app: web.Application) -> None:
        await mount.gw.open_replay_bucket()
        mount.start_window_keeper()

    async def start_tls(_app: web.Application) -> None:
        await mount.start_tls()

    app.on_startup.append(open_replay)

    if settings.tls is not None:
        app.on_startup.append(start_tls)
    return mount
