"""The write half of a handler: HLC-stamp, publish, and answer 202 — or, with ``?wait=true``,
the resource as the read model has it once the event is applied (read-your-writes)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import msgspec
from aiohttp import web
from nats.errors import ConnectionClosedError, OutboundBufferLimitError

from streamproc.bus import jsapi
from streamproc.bus.fastclient import PayloadTooLarge
from streamproc.bus.publisher import (
    STREAM_STORE_FULL,
    NoStream,
    PubAck,
    PublishError,
    PublishTimeout,
    WrongExpectedSequence,
)
from streamproc.events.envelope import Envelope, new_event
from streamproc.events.payloads import Payload
from streamproc.gateway.accesslog import RID
from streamproc.gateway.api.models import Accepted
from streamproc.gateway.api.query import bool_param
from streamproc.gateway.context import GatewayContext
from streamproc.problems import ProblemError

MESSAGE_TOO_LARGE = 10054
_enc = msgspec.json.Encoder()
UNAVAILABLE_HEADERS = {"Retry-After": "1"}


def json_response(
    body: Any, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    return web.Response(
        status=status, body=_enc.encode(body), content_type="application/json", headers=headers
    )


def stamp(
    gw: GatewayContext,
    request: web.Request,
    kind: str,
    tenant: str,
    payload: Payload,
    event_id: str | None = None,
) -> Envelope:
    return new_event(
        kind, tenant, payload, gw.ctx.clock.now(), event_id=event_id, correlation_id=request[RID]
    )


def publish_failure(exc: BaseException) -> ProblemError:
    """A publish that did not succeed, as the problem the caller should see."""
    if isinstance(exc, PayloadTooLarge) or (
        isinstance(exc, PublishError) and exc.err_code == MESSAGE_TOO_LARGE
    ):
        return ProblemError(413, "event-too-large", "the event exceeds the event log's size limit")
    if isinstance(exc, PublishError) and exc.err_code == STREAM_STORE_FULL:
        return ProblemError(503, "log-full", "the event log is full", headers=UNAVAILABLE_HEADERS)
    if isinstance(
        exc,
        PublishTimeout
        | NoStream
        | PublishError
        | ConnectionClosedError
        | OutboundBufferLimitError
        | OSError,
    ):
        return ProblemError(
            503,
            "log-unavailable",
            "the event log did not acknowledge the write; retrying is safe",
            headers=UNAVAILABLE_HEADERS,
        )
    raise exc


async def publish(gw: GatewayContext, event: Envelope, expected: int | None = None) -> PubAck:
    """Publish one event; WrongExpectedSequence is left to the caller, the rest mapped."""
    try:
        # No shield needed for one event: a cancel before sending publishes nothing, a cancel
        # after it loses only the answer (a retry is then a duplicate or a 409/412).
        return await gw.ctx.publisher.publish_event(event, expected_last_subject_seq=expected)
    except WrongExpectedSequence:
        raise
    except (
        PayloadTooLarge,
        PublishError,
        PublishTimeout,
        NoStream,
        ConnectionClosedError,
        OutboundBufferLimitError,
        OSError,
    ) as exc:
        raise publish_failure(exc) from None


def wants_wait(request: web.Request) -> bool:
    return bool(bool_param(request, "wait"))


async def caught_up(gw: GatewayContext) -> bool:
    """Before answering ``404``: whether the read model now holds what the log held (it had
    it, applied it meanwhile, or applied it within the wait timeout), so a second read is
    worth making. A run created by a ``202`` a moment ago, or through another gateway, is
    then found by that read, as a client written from the specification expects."""
    info = await jsapi.stream_info(gw.ctx.publisher.nc, gw.ctx.settings.events_stream)
    if info is None:
        return False
    if gw.ctx.applied() >= info.state.last_seq:
        return True  # it may have applied them while we asked: read again
    return await applied(gw, info.state.last_seq)


async def applied(gw: GatewayContext, seq: int) -> bool:
    """Whether the read model reached ``seq`` within the wait timeout."""
    try:
        await gw.ctx.wait_for(seq, gw.s.wait_timeout_s)
    except TimeoutError:
        return False
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        return False  # the projector stopped (shutdown): the write itself is recorded
    except Exception:
        return False
    return True


async def waited(
    gw: GatewayContext, request: web.Request, event_id: str, seq: int, projection: str
) -> bool:
    """With ``?wait=true``: whether the read model applied ``seq`` in time (409 if it
    recorded the event as rejected by ``projection``). Without it: False."""
    if not (wants_wait(request) and await applied(gw, seq)):
        return False
    rejected = gw.rm.rejection(seq, projection)
    if rejected is not None:
        raise ProblemError(
            409,
            "rejected",
            f"event {event_id} (seq {seq}) was recorded but did not apply: {rejected.reason}",
            reason=rejected.reason,
        )
    return True


async def answer(
    gw: GatewayContext,
    request: web.Request,
    event: Envelope,
    ack: PubAck,
    *,
    resource_id: str,
    projection: str,
    load: Callable[[], Any | None],
    wait_status: int = 200,
    headers: dict[str, str] | None = None,
) -> web.Response:
    headers = dict(headers or {})
    if await waited(gw, request, event.id, ack.seq, projection):
        view = load()
        if view is not None:
            version = getattr(view, "version", None)
            if version is not None:
                headers["ETag"] = f'"{version}"'
            return json_response(view, wait_status, headers)
    return json_response(
        Accepted(event_id=event.id, seq=ack.seq, id=resource_id, applied=False), 202, headers
    )
