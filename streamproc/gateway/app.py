"""The gateway object a process mounts: its read model, verifiers and publisher, the
routes, middlewares, an optional TLS listener, and draining on shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec
from aiohttp import web

from streamproc.bus import jsapi
from streamproc.bus.streams import configured_notify_retention
from streamproc.bus.ttlkv import TtlBucket
from streamproc.gateway import accesslog
from streamproc.gateway.auth import Authenticator, Principal
from streamproc.gateway.exportlog import ExportLog
from streamproc.gateway.hardening import decode_json, read_body, require_json
from streamproc.gateway.openapi import openapi_handler
from streamproc.gateway.operations import BASE, Operation
from streamproc.gateway.remote import Remote
from streamproc.gateway.replay import ReplayGuard, bucket_definition, bucket_name
from streamproc.gateway.routes import OPERATIONS
from streamproc.gateway.settings import GatewaySettings
from streamproc.gateway.tls import server_context
from streamproc.gateway.webhooks import WebhookVerifier
from streamproc.notify.feed_http import Feed
from streamproc.notify.retention import WindowKeeper
from streamproc.planner import settings as planner_settings
from streamproc.problems import ProblemError
from streamproc.reactor import RoleContext
from streamproc.readmodel.queries import ReadModel

log = logging.getLogger("streamproc.gateway")
SHUTDOWN_TIMEOUT = 30.0
GATEWAY = web.AppKey("gateway", object)
R = TypeVar("R", bound=web.StreamResponse)


class Gateway:
    """Everything a handler needs; one per process, shared by its listeners."""

    def __init__(self, ctx: RoleContext, settings: GatewaySettings) -> None:
        self.ctx = ctx
        self.s = settings
        self.rm = ReadModel(ctx.store)
        prefix = ctx.settings.prefix
        bucket = TtlBucket(ctx.publisher, bucket_name(prefix), holder=ctx.settings.node_id)
        self.replay = ReplayGuard(bucket, settings.replay_per_client)
        self.auth = Authenticator(settings, self.replay)
        self.webhooks = WebhookVerifier(settings, self.replay)
        self.exports = ExportLog(
            ctx.publisher,
            ctx.settings.events_stream,
            ctx.applied,
            ctx.wait_for,
            wait_s=settings.wait_timeout_s,
        )
        self._nonce = "dpop" in self.auth.modes and settings.dpop.require_nonce
        self.remote = Remote(
            ctx.publisher.nc,
            prefix,
            preview_timeout_s=settings.preview_timeout_s,
            verify_timeout_s=settings.verify_timeout_s,
        )
        self.max_jobs_per_run = planner_settings.load().max_jobs_per_run
        """The planner's ceiling on ``limits.maxJobs``: a schedule asking more is refused."""
        process_cap = ctx.settings.http_max_body
        self.body_cap = min(settings.max_body or process_cap, process_cap)
        self.inflated_cap = settings.max_decompressed_body or self.body_cap
        self.draining = False
        self.feed = Feed(ctx.publisher.nc, prefix)
        self.window = WindowKeeper(self.feed.holds, configured_notify_retention().max_age_s)
        self._keeper: asyncio.Task[None] | None = None
        self.tls_runner: web.AppRunner | None = None
        self.tls_url = ""
        self._apps: list[web.Application] = []

    async def json_body(
        self,
        request: web.Request,
        decoder: msgspec.json.Decoder[Any],
        renamed: Mapping[tuple[str, str], str] | None = None,
    ) -> Any:
        require_json(request)
        return decode_json(await read_body(request, self.body_cap), decoder, renamed)

    # ------------------------------------------------------------------ mounting

    def _bind(self, op: Operation) -> Any:
        scope = op.scope
        handler = op.handler
        auth = self.auth

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
            return self.with_nonce(await handler(self, request, who), who)

        return route

    def with_nonce(self, resp: R, who: Principal | None) -> R:
        """A fresh ``DPoP-Nonce`` on a DPoP caller's answer, when nonces are required."""
        if self._nonce and who is not None and who.mode == "dpop":
            resp.headers["DPoP-Nonce"] = self.auth.dpop.nonce()
        return resp

    def install(self, app: web.Application) -> None:
        """Add the API routes, /openapi.json and the middleware to ``app``."""
        self._apps.append(app)
        app[GATEWAY] = self
        app.middlewares.append(accesslog.observe_request((BASE, "/openapi.json")))
        for op in OPERATIONS:
            app.router.add_route(op.method, op.full_path, self._bind(op), name=op.operation_id)
        app.router.add_get("/openapi.json", openapi_handler)
        app.on_shutdown.append(self._on_shutdown)
        app.on_cleanup.append(self._on_cleanup)

    async def open_replay_bucket(self) -> None:
        """Create the replay bucket if missing, replicated like the event stream."""
        nc = self.ctx.publisher.nc
        replicas = await jsapi.stream_replicas(nc, self.ctx.settings.events_stream)
        config = bucket_definition(
            self.ctx.settings.prefix, replicas=replicas, max_keys=self.s.replay_cache_size
        )
        await self.replay.open(nc, config)

    def start_window_keeper(self) -> None:
        """Move the Notify stream's delivery window along while the gateway runs (every
        gateway does: a move is idempotent and only ever forward)."""
        if self._keeper is None:
            self._keeper = asyncio.create_task(self.window.run(), name="notify-window-keeper")

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
        cfg = self.s.tls
        if cfg is None:
            return
        extra = [s.mtls.ca_file for s in self.s.webhooks if s.mtls and s.mtls.ca_file]
        ctx: ssl.SSLContext = server_context(cfg, extra)
        app = web.Application(
            client_max_size=self.body_cap, handler_args={"auto_decompress": False}
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
    lingering read and refuse zstd before any handler runs. ``streamproc/app.py`` creates its
    application with ``handler_args={"auto_decompress": False}``; this covers applications
    built elsewhere (tests, embedding), read by the runner when it starts.
    """
    args = dict(getattr(app, "_handler_args", None) or {})
    if args.get("auto_decompress") is not False:
        args["auto_decompress"] = False
        app._handler_args = args


def mount_gateway(app: web.Application, ctx: RoleContext, settings: GatewaySettings) -> Gateway:
    """Install the gateway on the process's app; the replay bucket is opened and the TLS
    listener started with the app."""
    accesslog.configure(settings.access_log)
    pass_bodies_through(app)
    gw = Gateway(ctx, settings)
    gw.install(app)

    async def open_replay(_app: web.Application) -> None:
        await gw.open_replay_bucket()
        gw.start_window_keeper()

    async def start_tls(_app: web.Application) -> None:
        await gw.start_tls()

    app.on_startup.append(open_replay)

    if settings.tls is not None:
        app.on_startup.append(start_tls)
    return gw
