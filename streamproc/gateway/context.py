"""What every handler is given: the gateway's read model, verifiers, publisher paths and
caps, one per process and shared by its listeners.

It sits below the routes (``streamproc/gateway/api/``), which import it, and above the
authentication (``streamproc/gateway/auth/``); mounting the routes is ``app.py``'s."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec
from aiohttp import web

from streamproc.bus import jsapi
from streamproc.bus.streams import notify_retention_from
from streamproc.bus.ttlkv import TtlBucket
from streamproc.gateway.auth.callers import Authenticator, Principal
from streamproc.gateway.auth.replay import ReplayGuard, bucket_definition, bucket_name
from streamproc.gateway.auth.webhooks import WebhookVerifier
from streamproc.gateway.hardening import decode_json, read_body, require_json
from streamproc.gateway.remote import Remote
from streamproc.gateway.settings import GatewaySettings
from streamproc.notify.feed_http import Feed
from streamproc.notify.registrations import from_sections as feed_settings_from
from streamproc.notify.retention import WindowKeeper
from streamproc.planner import settings as planner_settings
from streamproc.readmodel.queries import ReadModel
from streamproc.recording.exportlog import ExportLog
from streamproc.runtime.reactor import RoleContext

R = TypeVar("R", bound=web.StreamResponse)


class GatewayContext:
    """Everything a handler needs; one per process, shared by its listeners."""

    def __init__(self, ctx: RoleContext, settings: GatewaySettings) -> None:
        self.ctx = ctx
        self.s = settings
        self.rm = ReadModel(ctx.store)
        prefix = ctx.settings.prefix
        bucket = TtlBucket(ctx.publisher, bucket_name(prefix), holder=ctx.settings.node_id)
        self.replay = ReplayGuard(bucket, settings.replay_per_client)
        conf = ctx.settings.configuration
        self.auth = Authenticator(settings, self.replay, env=conf.values)
        self.webhooks = WebhookVerifier(settings, self.replay, env=conf.values)
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
            partitions=conf.built(planner_settings.from_sections).partitions,
        )
        self.max_jobs_per_run = conf.built(planner_settings.from_sections).max_jobs_per_run
        """The planner's ceiling on ``limits.maxJobs``: a schedule asking more is refused."""
        process_cap = ctx.settings.http_max_body
        self.body_cap = min(settings.max_body or process_cap, process_cap)
        self.inflated_cap = settings.max_decompressed_body or self.body_cap
        self.feed = Feed(ctx.publisher.nc, prefix, conf.built(feed_settings_from))
        self.window = WindowKeeper(self.feed.holds, conf.built(notify_retention_from).max_age_s)
        """Moves the Notify stream's delivery window along; ``app.py`` runs it."""

    async def json_body(
        self,
        request: web.Request,
        decoder: msgspec.json.Decoder[Any],
        renamed: Mapping[tuple[str, str], str] | None = None,
    ) -> Any:
        require_json(request)
        return decode_json(await read_body(request, self.body_cap), decoder, renamed)

    def with_nonce(self, resp: R, who: Principal | None) -> R:
        """A fresh ``DPoP-Nonce`` on a DPoP caller's answer, when nonces are required."""
        if self._nonce and who is not None and who.mode == "dpop":
            resp.headers["DPoP-Nonce"] = self.auth.dpop.nonce()
        return resp

    async def open_replay_bucket(self) -> None:
        """Create the replay bucket if missing, replicated like the event stream."""
        nc = self.ctx.publisher.nc
        replicas = await jsapi.stream_replicas(nc, self.ctx.settings.events_stream)
        config = bucket_definition(
            self.ctx.settings.prefix, replicas=replicas, max_keys=self.s.replay_cache_size
        )
        await self.replay.open(nc, config)
