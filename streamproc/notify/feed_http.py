"""The Notify feed over HTTP, for consumers that cannot speak NATS (mounted by the gateway).

``GET  /api/v1/scheduler/feeds/{kind}/events?afterSeq=&limit=&streamEpoch=`` answers the
caller's tenant (from its token, via ``tenant_of`` — never a parameter), the kind, the stream,
its epoch (the Notify stream's creation time), head and retention horizon (first sequence
still held), and the ordered envelopes of that tenant and kind after ``afterSeq``.
``POST /api/v1/scheduler/feeds/{kind}/consumer-checkpoint {streamEpoch, seq}`` registers
(both null: reset to zero) or reports a consumer's durable position; a position outside the
current epoch or beyond the head is refused with 409. Sequences are Notify stream sequences,
so they only grow within an epoch; a consumer that is caught up may advance its checkpoint to
``head`` (nothing of its own lies below it), which keeps other tenants' expired messages
from looking like a gap.

    add_feed_routes(app, nc=ctx.publisher.nc, prefix=settings.prefix, tenant_of=tenant_of)
"""

from __future__ import annotations

import base64
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from aiohttp import web

from streamproc.bus import jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.bus.streams import stream_names
from streamproc.notify import messages as nm

BASE = "/api/v1/scheduler"
MAX_LIMIT = 500
DEFAULT_LIMIT = 100
TenantOf = Callable[[web.Request], "str | Awaitable[str]"]


class FeedEvent(msgspec.Struct, kw_only=True, rename="camel"):
    seq: int
    id: str
    kind: str
    schema_version: int
    payload: msgspec.Raw


class FeedPage(msgspec.Struct, kw_only=True, rename="camel"):
    tenant: str
    kind: str
    stream: str
    epoch: str
    head: int
    retention_horizon: int
    after_seq: int
    complete: bool
    """Fewer than ``limit`` events: nothing of this tenant and kind lies in (last, head]."""
    events: list[FeedEvent]


class CheckpointBody(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True):
    stream_epoch: str | None = None
    seq: int | None = None


class CheckpointAnswer(msgspec.Struct, kw_only=True, rename="camel"):
    tenant: str
    kind: str
    stream: str
    epoch: str
    head: int
    retention_horizon: int
    seq: int
    registered: bool


_enc = msgspec.json.Encoder()
_checkpoint = msgspec.json.Decoder(CheckpointBody)
_Envelope = msgspec.json.Decoder(dict[str, Any])


def _problem(status: int, title: str, detail: str, **extra: Any) -> web.Response:
    return web.Response(
        body=_enc.encode({"type": "about:blank", "title": title, "status": status,
                          "detail": detail, **extra}),
        status=status,
        content_type="application/problem+json",
    )  # fmt: skip


class Feed:
    def __init__(self, nc: FastClient, prefix: str, tenant_of: TenantOf) -> None:
        self.nc = nc
        self.prefix = prefix
        self.stream = stream_names(prefix)[2]
        self.tenant_of = tenant_of
        self.registrations: dict[tuple[str, str], tuple[str, int]] = {}
        """(tenant, kind) → (epoch, seq) last registered or reported (advisory: the
        consumer owns its durable checkpoint)."""

    async def _tenant(self, request: web.Request) -> str:
        got = self.tenant_of(request)
        return await got if inspect.isawaitable(got) else got  # type: ignore[return-value]

    def _kind(self, request: web.Request) -> str:
        kind = request.match_info["kind"]
        if kind not in nm.KINDS:
            raise web.HTTPNotFound(text=f"unknown feed kind {kind!r}; kinds: {', '.join(nm.KINDS)}")
        return kind

    async def _info(self) -> jsapi.StreamInfo | None:
        return await jsapi.stream_info(self.nc, self.stream)

    async def events(self, request: web.Request) -> web.Response:
        tenant = await self._tenant(request)
        kind = self._kind(request)
        q = request.query
        try:
            after = int(q.get("afterSeq", "0"))
            limit = int(q.get("limit", str(DEFAULT_LIMIT)))
        except ValueError:
            return _problem(400, "invalid-parameter", "afterSeq and limit are integers")
        if after < 0:
            return _problem(400, "invalid-parameter", "afterSeq must be >= 0")
        if not 1 <= limit <= MAX_LIMIT:
            return _problem(400, "invalid-parameter", f"limit must be 1..{MAX_LIMIT}")
        info = await self._info()
        if info is None:
            return _problem(404, "stream-missing", f"stream {self.stream} does not exist")
        epoch, head, horizon = info.created, info.state.last_seq, info.state.first_seq
        want = q.get("streamEpoch")
        if want is not None and want != epoch:
            return _problem(409, "epoch-mismatch", f"the stream's epoch is {epoch}, not {want}",
                            epoch=epoch)  # fmt: skip
        if after > head:
            return _problem(409, "beyond-head", f"afterSeq {after} is beyond the head {head}",
                            head=head)  # fmt: skip
        subject = nm.subject(self.prefix, tenant, kind)
        out: list[FeedEvent] = []
        seq = max(after + 1, horizon)
        while len(out) < limit and seq <= head:
            try:
                doc = await jsapi.request(
                    self.nc, f"STREAM.MSG.GET.{self.stream}", {"seq": seq, "next_by_subj": subject}
                )
            except jsapi.JsApiError:
                break  # no further message of this subject
            m = doc["message"]
            if m["seq"] > head:
                break
            data = base64.b64decode(m.get("data") or "")
            meta = _Envelope.decode(data)
            out.append(
                FeedEvent(
                    seq=m["seq"],
                    id=str(meta.get("id", "")),
                    kind=str(meta.get("kind", kind)),
                    schema_version=int(meta.get("schema", nm.SCHEMA_VERSION)),
                    payload=msgspec.Raw(data),
                )
            )
            seq = m["seq"] + 1
        page = FeedPage(
            tenant=tenant, kind=kind, stream=f"{self.stream}:{subject}", epoch=epoch, head=head,
            retention_horizon=horizon, after_seq=after, complete=len(out) < limit, events=out,
        )  # fmt: skip
        return web.Response(body=_enc.encode(page), content_type="application/json")

    async def checkpoint(self, request: web.Request) -> web.Response:
        tenant = await self._tenant(request)
        kind = self._kind(request)
        try:
            body = _checkpoint.decode(await request.read() or b"{}")
        except msgspec.DecodeError as exc:
            return _problem(400, "invalid-body", str(exc))
        info = await self._info()
        if info is None:
            return _problem(404, "stream-missing", f"stream {self.stream} does not exist")
        epoch, head = info.created, info.state.last_seq
        if body.stream_epoch is None and body.seq is None:
            seq, registered = 0, True
        elif body.stream_epoch is None or body.seq is None:
            return _problem(400, "invalid-body", "streamEpoch and seq go together (or both null)")
        elif body.seq < 0:
            return _problem(400, "invalid-body", "seq must be >= 0")
        elif body.stream_epoch != epoch:
            return _problem(409, "epoch-mismatch",
                            f"position is in epoch {body.stream_epoch}; the stream's is {epoch}",
                            epoch=epoch)  # fmt: skip
        elif body.seq > head:
            return _problem(409, "beyond-head", f"seq {body.seq} is beyond the head {head}",
                            head=head)  # fmt: skip
        else:
            seq, registered = body.seq, False
        self.registrations[(tenant, kind)] = (epoch, seq)
        subject = nm.subject(self.prefix, tenant, kind)
        answer = CheckpointAnswer(
            tenant=tenant, kind=kind, stream=f"{self.stream}:{subject}",
            epoch=epoch, head=head, retention_horizon=info.state.first_seq, seq=seq,
            registered=registered,
        )  # fmt: skip
        return web.Response(body=_enc.encode(answer), content_type="application/json")


def add_feed_routes(
    app: web.Application,
    *,
    nc: FastClient,
    prefix: str,
    tenant_of: TenantOf,
    base: str = BASE,
) -> Feed:
    """Mount the feed; ``tenant_of(request)`` returns (or awaits) the authenticated tenant
    and raises an HTTP error for an unauthenticated caller."""
    feed = Feed(nc, prefix, tenant_of)
    app.router.add_get(f"{base}/feeds/{{kind}}/events", feed.events)
    app.router.add_post(f"{base}/feeds/{{kind}}/consumer-checkpoint", feed.checkpoint)
    return feed
