"""The Notify feed over HTTP, for consumers that cannot speak NATS (the gateway serves it:
``gateway/api/routes_feed.py`` mounts one pair of operations per kind).

``GET …/feeds/<kind>/events?afterSeq=&limit=&streamEpoch=`` answers the caller's tenant (from
its token — never a parameter), the kind, the stream and subject, its ``epoch`` (a positive
integer: the Notify stream's creation time in microseconds, so it changes when the stream is
recreated), the ``head`` and ``retentionHorizon`` *of that tenant and kind* (the sequences of
its last and first message still held; 0 when none), and its envelopes after ``afterSeq`` in
order — read with one batched direct get, so a page costs the same few JetStream requests
whatever its size. ``complete`` is true only when the read reached the end: any JetStream
error (a timeout, no responders, a stream between leaders) answers 503 with ``Retry-After``
and never a page that claims to be complete.

``POST …/feeds/<kind>/consumer-checkpoint {streamEpoch, seq}`` registers (both null: at
zero) or reports the consumer's durable position; only the configured consumer client
identities may. The report holds retention (:mod:`.retention`): the tenant's messages of the
kind after the reported position stay until reported, up to ``notify.max_retention_s``, for
as long as the registration lives. A position outside the current epoch or beyond the
stream's end is refused with 409.

A page after a position whose following messages retention may have removed is refused with
409 ``retention-gap`` — unless the registration held them all along, or vouches that none of
its messages lay there. Sequences are stream sequences (they have gaps: other tenants and
kinds); a consumer's checkpoint only ever moves to a sequence it has read.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Annotated, Generic, Protocol, TypeVar

import msgspec
from msgspec import Meta

from streamproc.bus import direct, jsapi
from streamproc.bus.fastclient import FastClient
from streamproc.ids import ascii_int
from streamproc.names import PAGE_BYTES, stream_names
from streamproc.notify import messages as nm
from streamproc.notify.registrations import (
    FeedSettings,
    Registration,
    Registrations,
)
from streamproc.notify.retention import Holds
from streamproc.problems import ProblemError

MAX_LIMIT = 500
DEFAULT_LIMIT = 100
RETRY_AFTER_S = 1
TIMEOUT_S = 5.0
_EPOCH0 = datetime(1970, 1, 1, tzinfo=UTC)

P = TypeVar("P")


class Caller(Protocol):
    """Who is asking (the gateway's ``Principal``): the tenant and the token's client ids."""

    @property
    def tenant(self) -> str: ...
    @property
    def client_ids(self) -> frozenset[str]: ...


class FeedEvent(msgspec.Struct, Generic[P], kw_only=True, rename="camel"):
    """One versioned envelope; ``payload`` is the Notify message itself (its ``id`` the
    envelope's, its ``tenant`` the page's)."""

    seq: int
    id: str
    kind: str
    schema_version: int
    payload: P


def _within(messages: list[direct.DirectMsg], max_bytes: int) -> int:
    """How many of ``messages`` a page holds within ``max_bytes`` (at least one: a page
    always moves); the next page asks from the last one held."""
    size = 1_000  # the page's own fields
    for i, m in enumerate(messages):
        size += len(m.data) + 200  # the event's own fields around its payload
        if i and size > max_bytes:
            return i
    return len(messages)


class FeedPage(msgspec.Struct, Generic[P], kw_only=True, rename="camel"):
    tenant: str
    kind: str
    stream: str
    epoch: int
    """The stream's epoch: its creation time in microseconds since 1970 (a positive integer
    that changes when the stream is recreated)."""
    head: int
    """Sequence of this tenant and kind's last message still held (0: none)."""
    retention_horizon: int
    """Sequence of this tenant and kind's first message still held (0: none)."""
    after_seq: int
    complete: bool
    """The read reached the end: nothing of this tenant and kind follows the last event."""
    events: list[FeedEvent[P]]


class CheckpointBody(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True):
    """Both null: register (or reset) at zero. Both set: report the durable position."""

    stream_epoch: Annotated[int, Meta(ge=1)] | None
    seq: Annotated[int, Meta(ge=0)] | None


class CheckpointAnswer(msgspec.Struct, kw_only=True, rename="camel"):
    tenant: str
    kind: str
    stream: str
    epoch: int
    head: int
    retention_horizon: int
    seq: int
    registered: bool
    """True for a registration at zero (both null), false for a reported position."""
    lease_seconds: float
    """How long the feed keeps this position, and holds what follows it, without a new report."""


class _Meta(msgspec.Struct):
    id: str = ""
    kind: str = ""
    schema: int = nm.SCHEMA_VERSION


_meta = msgspec.json.Decoder(_Meta)


def epoch_of(created: str) -> int:
    """A stream's ``created`` time as the feed's epoch: microseconds since 1970."""
    return (datetime.fromisoformat(created) - _EPOCH0) // timedelta(microseconds=1)


def unavailable(exc: Exception) -> ProblemError:
    return ProblemError(
        503, "feed-unavailable",
        f"the feed cannot be read right now ({exc or type(exc).__name__}); nothing was "
        "skipped: retry", headers={"Retry-After": str(RETRY_AFTER_S)},
    )  # fmt: skip


def _parameter(name: str, raw: str | None, default: int | None, low: int, high: int) -> int | None:
    if raw is None:
        return default
    value = ascii_int(raw)
    if value is None or not low <= value <= high:
        bounds = f"{low}..{high}" if high < 2**63 else f">= {low}"
        raise ProblemError(400, "invalid-parameter", f"{name} must be an integer {bounds}",
                           field=name)  # fmt: skip
    return value


class Feed:
    def __init__(self, nc: FastClient, prefix: str, settings: FeedSettings) -> None:
        self.nc = nc
        self.prefix = prefix
        events, _, self.stream = stream_names(prefix)
        self.settings = settings
        self.registrations = Registrations(nc, prefix, events, self.settings.lease_s)
        self.holds = Holds(nc, prefix, self.stream)

    async def _info(self) -> jsapi.StreamInfo:
        try:
            info = await jsapi.stream_info(self.nc, self.stream)
        except jsapi.JsApiError as exc:
            raise unavailable(exc) from None
        if info is None:
            raise ProblemError(404, "stream-missing", f"stream {self.stream} does not exist")
        return info

    async def _bounds(self, subject: str) -> tuple[int, int]:
        """(head, horizon) of one subject: its last and first message still held."""
        last = await direct.last_of(self.nc, self.stream, subject, TIMEOUT_S)
        first = await direct.after(self.nc, self.stream, subject, 0, 1, TIMEOUT_S)
        head = last.messages[0].seq if last.messages else 0
        return head, first.messages[0].seq if first.messages else 0

    # ------------------------------------------------------------------ GET events

    async def events(
        self, caller: Caller, kind: str, query: dict[str, str]
    ) -> FeedPage[msgspec.Raw]:
        after = _parameter("afterSeq", query.get("afterSeq"), 0, 0, 2**63 - 1)
        limit = _parameter("limit", query.get("limit"), DEFAULT_LIMIT, 1, MAX_LIMIT)
        want = _parameter("streamEpoch", query.get("streamEpoch"), None, 1, 2**63 - 1)
        assert after is not None and limit is not None
        subject = nm.subject(self.prefix, caller.tenant, kind)
        try:
            page = await direct.after(self.nc, self.stream, subject, after, limit, TIMEOUT_S)
            head, horizon = await self._bounds(subject)
        except jsapi.JsApiError as exc:
            await self._info()  # a missing stream is a 404, not a 503
            raise unavailable(exc) from None
        # The leader's view, read after the page: retention only ever moves forward.
        info = await self._info()
        epoch = epoch_of(info.created)
        if want is not None and want != epoch:
            raise ProblemError(409, "epoch-mismatch", f"the stream's epoch is {epoch}, not {want}",
                               epoch=epoch)  # fmt: skip
        if after > info.state.last_seq:
            raise ProblemError(409, "beyond-head", f"afterSeq {after} is beyond the stream's end")
        try:
            await self._check_gap(caller.tenant, kind, epoch, after, info.state.first_seq)
        except jsapi.JsApiError as exc:
            raise unavailable(exc) from None
        events = [self._event(m, kind) for m in page.messages]
        kept = _within(page.messages, PAGE_BYTES)  # a byte bound, as every API list has
        complete = page.pending == 0 and kept == len(events)
        events = events[:kept]
        if events:
            head = max(head, events[-1].seq)
        return FeedPage(
            tenant=caller.tenant, kind=kind, stream=f"{self.stream}:{subject}", epoch=epoch,
            head=head, retention_horizon=horizon, after_seq=after, complete=complete,
            events=events,
        )  # fmt: skip

    def _event(self, m: direct.DirectMsg, kind: str) -> FeedEvent[msgspec.Raw]:
        try:
            meta = _meta.decode(m.data)
        except msgspec.DecodeError as exc:  # never skipped: the consumer would lose it
            raise ProblemError(500, "malformed-message",
                               f"stored message {m.seq} is not a Notify message: {exc}",
                               seq=m.seq) from None  # fmt: skip
        return FeedEvent(seq=m.seq, id=meta.id, kind=meta.kind or kind,
                         schema_version=meta.schema, payload=msgspec.Raw(m.data))  # fmt: skip

    async def _check_gap(self, tenant: str, kind: str, epoch: int, after: int, first: int) -> None:
        """After ``after``, may retention have removed messages of this tenant and kind?

        Past the window (``window``: the last sequence it let go) only held messages are
        left; past the stream's ``max_age`` (below ``first``) none. A live registration whose
        hold has been unbroken since at or before ``after`` has kept every message after it
        but those ``max_age`` took; a registration that vouches no message of the subject lay
        in the range answers for the rest."""
        if after == 0:
            return  # no position yet: start at the oldest message held
        unheld = max(await self.holds.window_floor(), first - 1)
        if after >= unheld:
            return
        reg = await self.registrations.get(tenant, kind)
        live = reg is not None and reg.epoch == epoch
        bound = unheld
        if (
            live and reg is not None and reg.held_after <= after
            and await self.holds.created(tenant, kind) == reg.hold_created
        ):  # fmt: skip
            bound = first - 1
        if after >= bound:
            return
        if live and reg is not None and reg.seq <= after and reg.vouched >= bound:
            return
        raise ProblemError(
            409, "retention-gap",
            f"messages after afterSeq {after} may have been removed by retention (the delivery "
            f"window or the registration's hold ended) and no live registration vouches for "
            f"them; rebuild from the event log, then register again",
        )  # fmt: skip

    @staticmethod
    def _trimming(info: jsapi.StreamInfo, margin_s: float = 60.0) -> bool:
        """Is ``max_age`` taking messages at the stream's front now? Its oldest message held
        (or, with none held, its last one) is about as old as ``max_age``. Interest
        retention removes messages nobody holds at any sequence; only ``max_age`` — or a
        purge — takes held ones, oldest first."""
        max_age_s = int(info.config.get("max_age") or 0) / 1e9
        st = info.state
        oldest = st.first_ts if st.messages else st.last_ts
        if not max_age_s or not oldest or oldest.startswith("0001-"):
            return False
        return datetime.fromisoformat(oldest).timestamp() <= time.time() - max_age_s + margin_s

    # ------------------------------------------------------------------ POST checkpoint

    def may_report(self, caller: Caller) -> None:
        allowed = self.settings.consumer_client_ids
        if not caller.client_ids & set(allowed):
            raise ProblemError(
                403, "not-the-feed-consumer",
                f"only the configured feed consumer (token client_id, azp or sub: "
                f"{', '.join(allowed)}) may register or report a position",
            )  # fmt: skip

    async def checkpoint(self, caller: Caller, kind: str, body: CheckpointBody) -> CheckpointAnswer:
        self.may_report(caller)
        info = await self._info()
        epoch, last = epoch_of(info.created), info.state.last_seq
        if body.stream_epoch is None and body.seq is None:
            seq, registered = 0, True
        elif body.stream_epoch is None or body.seq is None:
            missing = "streamEpoch" if body.stream_epoch is None else "seq"
            raise ProblemError(400, "invalid-body",
                               "streamEpoch and seq go together (both null registers at zero)",
                               field=missing)  # fmt: skip
        elif body.stream_epoch != epoch:
            raise ProblemError(409, "epoch-mismatch",
                               f"position is in epoch {body.stream_epoch}; the stream's is {epoch}",
                               epoch=epoch)  # fmt: skip
        elif body.seq > last:
            raise ProblemError(409, "beyond-head", f"seq {body.seq} is beyond the stream's end")
        else:
            seq, registered = body.seq, False
        subject = nm.subject(self.prefix, caller.tenant, kind)
        prior = await self.registrations.get(caller.tenant, kind)
        if prior is not None and prior.epoch != epoch:
            prior = None
        try:
            window = await self.holds.window_floor()
            created = await self.holds.hold(caller.tenant, kind, seq, self.settings.lease_s)
            if prior is not None and prior.hold_created == created:  # held all along
                held_after = seq if seq >= prior.seq else max(seq, min(prior.seq, window))
            else:  # a new hold: what the window let go before it may be gone
                held_after = max(seq, window)
            vouched = await self._vouch(subject, seq, held_after, info, prior)
            head, horizon = await self._bounds(subject)
        except jsapi.JsApiError as exc:
            raise unavailable(exc) from None
        reg = Registration(
            consumer=sorted(caller.client_ids & set(self.settings.consumer_client_ids))[0],
            epoch=epoch, seq=seq, held_after=held_after, hold_created=created, vouched=vouched,
            reported_ms=time.time_ns() // 1_000_000,
        )  # fmt: skip
        await self.registrations.put(caller.tenant, kind, reg)
        return CheckpointAnswer(
            tenant=caller.tenant, kind=kind, stream=f"{self.stream}:{subject}", epoch=epoch,
            head=head, retention_horizon=horizon, seq=seq, registered=registered,
            lease_seconds=self.settings.lease_s,
        )  # fmt: skip

    async def _vouch(
        self,
        subject: str,
        seq: int,
        held_after: int,
        info: jsapi.StreamInfo,
        prior: Registration | None,
    ) -> int:
        """How far past ``seq`` the subject certainly has no message (``seq``: no further),
        for when ``max_age`` later removes the stream's oldest messages while the consumer is
        caught up. Asked of the stream leader (``STREAM.MSG.GET``), never of a replica."""
        first, last = info.state.first_seq, info.state.last_seq
        covered = held_after <= seq and (
            seq >= first - 1
            or (prior is not None and prior.seq <= seq and prior.vouched >= first - 1)
        )
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
        now = await jsapi.stream_info(self.nc, self.stream)
        if now is None or (now.state.first_seq > start and self._trimming(now)):
            return seq  # max_age may have reached the range while we looked: vouch for nothing
        return max(seq, vouched)
