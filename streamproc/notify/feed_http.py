"""The Notify feed over HTTP, for consumers that cannot speak NATS (mounted by the gateway).

``GET  /api/v1/scheduler/feeds/{kind}/events?afterSeq=&limit=&streamEpoch=`` answers the
caller's tenant (from its token — never a parameter), the kind, the stream and subject, its
epoch (the Notify stream's creation time), the ``head`` and ``retentionHorizon`` *of that
tenant and kind* (the sequences of its last and first message still held; 0 when none), and
its envelopes after ``afterSeq`` in order — read with one batched direct get, so a page costs
the same few JetStream requests whatever its size. ``complete`` is true only when the read
reached the end: any JetStream error (a timeout, no responders, a stream between leaders)
answers 503 with ``Retry-After`` and never a page that claims to be complete.

``POST /api/v1/scheduler/feeds/{kind}/consumer-checkpoint {streamEpoch, seq}`` registers
(both null: at zero) or reports the consumer's durable position, kept for the lease in the
KV bucket every gateway shares (:mod:`.registrations`); only the configured consumer
identity or a write-scoped caller may. A position outside the current epoch or beyond the
stream's end is refused with 409.

A page after a position whose following messages retention may have removed is refused with
409 ``retention-gap`` — unless the tenant's live registration vouches that none of its
messages lay there. Sequences are stream sequences (they have gaps: other tenants and kinds);
a consumer's checkpoint only ever moves to a sequence it has read.

    add_feed_routes(app, nc=ctx.publisher.nc, prefix=settings.prefix, who=authenticate)
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

import msgspec
from aiohttp import web

from streamproc.bus import direct, jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.ids import ascii_int
from streamproc.names import ADMIN_SCOPE, API_BASE, PAGE_BYTES, stream_names
from streamproc.notify import messages as nm
from streamproc.notify.registrations import (
    FeedSettings,
    Registration,
    Registrations,
    RegistryUnavailable,
    load_settings,
)
from streamproc.problems import ProblemError, render

BASE = API_BASE
MAX_LIMIT = 500
DEFAULT_LIMIT = 100
WRITE_SCOPE = ADMIN_SCOPE
RETRY_AFTER_S = 1
TIMEOUT_S = 5.0


class Caller(Protocol):
    """Who is asking (the gateway's ``Principal``): the tenant, the token's subject, scopes."""

    @property
    def tenant(self) -> str: ...
    @property
    def subject(self) -> str | None: ...
    @property
    def scopes(self) -> frozenset[str]: ...


WhoIs = Callable[[web.Request], "Caller | Awaitable[Caller]"]


class FeedEvent(msgspec.Struct, kw_only=True, rename="camel"):
    seq: int
    id: str
    kind: str
    schema_version: int
    payload: msgspec.Raw


def _within(messages: list[direct.DirectMsg], max_bytes: int) -> int:
    """How many of ``messages`` a page holds within ``max_bytes`` (at least one: a page
    always moves); the next page asks from the last one held."""
    size = 1_000  # the page's own fields
    for i, m in enumerate(messages):
        size += len(m.data) + 200  # the event's own fields around its payload
        if i and size > max_bytes:
            return i
    return len(messages)


class FeedPage(msgspec.Struct, kw_only=True, rename="camel"):
    tenant: str
    kind: str
    stream: str
    epoch: str
    head: int
    """Sequence of this tenant and kind's last message still held (0: none)."""
    retention_horizon: int
    """Sequence of this tenant and kind's first message still held (0: none)."""
    after_seq: int
    complete: bool
    """The read reached the end: nothing of this tenant and kind follows the last event."""
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
    """True for a registration at zero (both null), false for a reported position."""
    lease_seconds: float
    """How long the feed keeps this position without a new report."""


class _Meta(msgspec.Struct):
    id: str = ""
    kind: str = ""
    schema: int = nm.SCHEMA_VERSION


_enc = msgspec.json.Encoder()
_checkpoint = msgspec.json.Decoder(CheckpointBody)
_meta = msgspec.json.Decoder(_Meta)


class FeedProblem(ProblemError):
    """The API's one problem shape (``urn:streamproc:problem:<slug>``), rendered here because
    the feed answers outside the gateway's error middleware."""

    def response(self) -> web.Response:
        if self.status == 503:
            self.headers = [("Retry-After", str(RETRY_AFTER_S))]
        return render(self)


def _unavailable(exc: Exception) -> FeedProblem:
    return FeedProblem(
        503, "feed-unavailable",
        f"the feed cannot be read right now ({exc}); nothing was skipped: retry",
    )  # fmt: skip


class Feed:
    def __init__(
        self, nc: FastClient, prefix: str, who: WhoIs, settings: FeedSettings | None = None
    ) -> None:
        self.nc = nc
        self.prefix = prefix
        events, _, self.stream = stream_names(prefix)
        self.who = who
        self.settings = settings or load_settings()
        self.registrations = Registrations(nc, prefix, events, self.settings.lease_s)

    async def _caller(self, request: web.Request) -> Caller:
        got = self.who(request)
        return await got if inspect.isawaitable(got) else got

    def _kind(self, request: web.Request) -> str:
        kind = request.match_info["kind"]
        if kind not in nm.KINDS:
            kinds = ", ".join(nm.KINDS)
            raise FeedProblem(404, "unknown-kind", f"unknown feed kind {kind!r}; kinds: {kinds}")
        return kind

    async def _info(self) -> jsapi.StreamInfo:
        try:
            info = await jsapi.stream_info(self.nc, self.stream)
        except jsapi.JsApiError as exc:
            raise _unavailable(exc) from None
        if info is None:
            raise FeedProblem(404, "stream-missing", f"stream {self.stream} does not exist")
        return info

    async def _bounds(self, subject: str) -> tuple[int, int]:
        """(head, horizon) of one subject: its last and first message still held."""
        last = await direct.last_of(self.nc, self.stream, subject, TIMEOUT_S)
        first = await direct.after(self.nc, self.stream, subject, 0, 1, TIMEOUT_S)
        head = last.messages[0].seq if last.messages else 0
        return head, first.messages[0].seq if first.messages else 0

    async def handle(self, request: web.Request) -> web.Response:
        try:
            if request.method == "GET":
                return await self.events(request)
            return await self.checkpoint(request)
        except FeedProblem as p:
            return p.response()
        except RegistryUnavailable as exc:
            return _unavailable(exc).response()

    # ------------------------------------------------------------------ GET events

    async def events(self, request: web.Request) -> web.Response:
        caller = await self._caller(request)
        kind = self._kind(request)
        q = request.query
        after = ascii_int(q.get("afterSeq", "0"))
        limit = ascii_int(q.get("limit", str(DEFAULT_LIMIT)))
        if after is None or limit is None:
            raise FeedProblem(400, "invalid-parameter", "afterSeq and limit are integers >= 0")
        if not 1 <= limit <= MAX_LIMIT:
            raise FeedProblem(400, "invalid-parameter", f"limit must be 1..{MAX_LIMIT}")
        subject = nm.subject(self.prefix, caller.tenant, kind)
        try:
            page = await direct.after(self.nc, self.stream, subject, after, limit, TIMEOUT_S)
            head, horizon = await self._bounds(subject)
        except jsapi.JsApiError as exc:
            await self._info()  # a missing stream is a 404, not a 503
            raise _unavailable(exc) from None
        # The leader's view, read after the page: retention only ever moves forward.
        info = await self._info()
        epoch = info.created
        want = q.get("streamEpoch")
        if want is not None and want != epoch:
            raise FeedProblem(409, "epoch-mismatch", f"the stream's epoch is {epoch}, not {want}",
                              epoch=epoch)  # fmt: skip
        if after > info.state.last_seq:
            raise FeedProblem(409, "beyond-head", f"afterSeq {after} is beyond the stream's end")
        await self._check_gap(caller.tenant, kind, epoch, after, info.state.first_seq)
        events = [self._event(m, kind) for m in page.messages]
        kept = _within(page.messages, PAGE_BYTES)
        complete = page.pending == 0 and kept == len(events)
        events = events[:kept]
        if events:
            head = max(head, events[-1].seq)
        body = FeedPage(
            tenant=caller.tenant, kind=kind, stream=f"{self.stream}:{subject}", epoch=epoch,
            head=head, retention_horizon=horizon, after_seq=after, complete=complete,
            events=events,
        )  # fmt: skip
        return web.Response(body=_enc.encode(body), content_type="application/json")

    def _event(self, m: direct.DirectMsg, kind: str) -> FeedEvent:
        try:
            meta = _meta.decode(m.data)
        except msgspec.DecodeError as exc:  # never skipped: the consumer would lose it
            raise FeedProblem(500, "malformed-message",
                              f"stored message {m.seq} is not a Notify message: {exc}",
                              seq=m.seq) from None  # fmt: skip
        return FeedEvent(seq=m.seq, id=meta.id, kind=meta.kind or kind,
                         schema_version=meta.schema, payload=msgspec.Raw(m.data))  # fmt: skip

    async def _check_gap(self, tenant: str, kind: str, epoch: str, after: int, first: int) -> None:
        """Retention removes the stream's oldest messages: after a position below the first
        one held, messages of this tenant and kind may be gone — unless the tenant's live
        registration vouches that it had none there."""
        if after == 0 or after >= first - 1:
            return
        reg = await self.registrations.get(tenant, kind)
        if reg is not None and reg.epoch == epoch and reg.seq <= after and reg.vouched >= first - 1:
            return
        raise FeedProblem(
            409, "retention-gap",
            f"messages after afterSeq {after} may have been removed by retention and no live "
            f"registration vouches for them; rebuild from the event log, then register again",
        )  # fmt: skip

    # ------------------------------------------------------------------ POST checkpoint

    async def checkpoint(self, request: web.Request) -> web.Response:
        caller = await self._caller(request)
        kind = self._kind(request)
        if caller.subject not in self.settings.consumers and WRITE_SCOPE not in caller.scopes:
            raise FeedProblem(
                403, "not-the-feed-consumer",
                f"only the configured feed consumer (token sub: "
                f"{', '.join(self.settings.consumers)}) or scope {WRITE_SCOPE} may register or "
                f"report a position",
            )  # fmt: skip
        try:
            body = _checkpoint.decode(await request.read() or b"{}")
        except msgspec.DecodeError as exc:
            raise FeedProblem(400, "invalid-body", str(exc)) from None
        info = await self._info()
        epoch, last = info.created, info.state.last_seq
        if body.stream_epoch is None and body.seq is None:
            seq, registered = 0, True
        elif body.stream_epoch is None or body.seq is None:
            raise FeedProblem(400, "invalid-body", "streamEpoch and seq go together (or both null)")
        elif body.seq < 0:
            raise FeedProblem(400, "invalid-body", "seq must be >= 0")
        elif body.stream_epoch != epoch:
            raise FeedProblem(409, "epoch-mismatch",
                              f"position is in epoch {body.stream_epoch}; the stream's is {epoch}",
                              epoch=epoch)  # fmt: skip
        elif body.seq > last:
            raise FeedProblem(409, "beyond-head", f"seq {body.seq} is beyond the stream's end")
        else:
            seq, registered = body.seq, False
        subject = nm.subject(self.prefix, caller.tenant, kind)
        prior = await self.registrations.get(caller.tenant, kind)
        try:
            vouched = await self._vouch(subject, epoch, seq, info, prior)
            head, horizon = await self._bounds(subject)
        except jsapi.JsApiError as exc:
            raise _unavailable(exc) from None
        reg = Registration(consumer=caller.subject or "", epoch=epoch, seq=seq, vouched=vouched,
                           reported_ms=time.time_ns() // 1_000_000)  # fmt: skip
        await self.registrations.put(caller.tenant, kind, reg)
        answer = CheckpointAnswer(
            tenant=caller.tenant, kind=kind, stream=f"{self.stream}:{subject}", epoch=epoch,
            head=head, retention_horizon=horizon, seq=seq, registered=registered,
            lease_seconds=self.settings.lease_s,
        )  # fmt: skip
        return web.Response(body=_enc.encode(answer), content_type="application/json")

    async def _vouch(
        self, subject: str, epoch: str, seq: int, info: jsapi.StreamInfo, prior: Registration | None
    ) -> int:
        """How far past ``seq`` the subject certainly has no message (``seq``: no further).
        Asked of the stream leader (``STREAM.MSG.GET``), never of a lagging replica."""
        first, last = info.state.first_seq, info.state.last_seq
        covered = seq >= first - 1 or (
            prior is not None and prior.epoch == epoch and prior.seq <= seq
            and prior.vouched >= first - 1
        )  # fmt: skip
        if not covered:
            return seq
        start = max(seq + 1, first)
        try:
            doc = await jsapi.request(
                self.nc, f"STREAM.MSG.GET.{self.stream}",
                {"seq": start, "next_by_subj": subject}, TIMEOUT_S,
            )  # fmt: skip
            vouched = min(last, int(doc["message"]["seq"]) - 1)
        except jsapi.JsApiError as exc:
            if exc.err_code != jsapi.NO_MESSAGE:
                raise
            vouched = last
        after = await jsapi.stream_info(self.nc, self.stream)
        if after is None or after.state.first_seq > start:
            return seq  # retention moved while we looked: vouch for nothing
        return max(seq, vouched)


def add_feed_routes(
    app: web.Application,
    *,
    nc: FastClient,
    prefix: str,
    who: WhoIs,
    settings: FeedSettings | None = None,
    base: str = BASE,
) -> Feed:
    """Mount the feed; ``who(request)`` returns (or awaits) the authenticated caller and
    raises an HTTP error for an unauthenticated one."""
    feed = Feed(nc, prefix, who, settings)
    app.router.add_get(f"{base}/feeds/{{kind}}/events", feed.handle)
    app.router.add_post(f"{base}/feeds/{{kind}}/consumer-checkpoint", feed.handle)
    return feed
