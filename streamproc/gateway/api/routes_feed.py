"""The Notify HTTP feed's operations (:mod:`streamproc.notify.feed_http`), one literal route
pair per kind: read the caller's tenant's events of that kind, and register or report the
configured consumer's durable position. The tenant always comes from the token."""

from __future__ import annotations

from typing import Any

import msgspec
from aiohttp import web

from streamproc.gateway.api.operations import Handler, Operation, Param
from streamproc.gateway.api.writes import json_response
from streamproc.gateway.auth.callers import READ, Principal
from streamproc.gateway.context import GatewayContext
from streamproc.notify import messages as nm
from streamproc.notify.feed_http import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    CheckpointAnswer,
    CheckpointBody,
    FeedPage,
    unavailable,
)
from streamproc.notify.registrations import RegistryUnavailable

_checkpoint = msgspec.json.Decoder(CheckpointBody)
PAGES: dict[str, Any] = {
    "rescan.delta": FeedPage[nm.RescanDelta],
    "report.ready": FeedPage[nm.ReportReady],
    "run.summary": FeedPage[nm.RunSummary],
}
"""Each kind's page type (its payloads that kind's message), for the OpenAPI document."""


def _events(kind: str) -> Handler:
    async def handler(
        gw: GatewayContext, request: web.Request, who: Principal | None
    ) -> web.Response:
        assert who is not None
        try:
            page = await gw.feed.events(who, kind, dict(request.query))
        except RegistryUnavailable as exc:
            raise unavailable(exc) from None
        return json_response(page)

    return handler


def _checkpoint_handler(kind: str) -> Handler:
    async def handler(
        gw: GatewayContext, request: web.Request, who: Principal | None
    ) -> web.Response:
        assert who is not None
        gw.feed.may_report(who)  # 403 before the body is read
        body = await gw.json_body(request, _checkpoint)
        try:
            answer = await gw.feed.checkpoint(who, kind, body)
        except RegistryUnavailable as exc:
            raise unavailable(exc) from None
        return json_response(answer)

    return handler


def _camel(kind: str) -> str:
    return "".join(part.title() for part in kind.split("."))


EPOCH_DOC = (
    "the stream's epoch as the previous page or checkpoint answer gave it; 409 "
    "`epoch-mismatch` when the stream was recreated since"
)
FEED_PARAMS = (
    Param("afterSeq", "query", {"type": "integer", "minimum": 0, "default": 0},
          "the last sequence the consumer has (0: from the oldest held)"),
    Param("limit", "query",
          {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT}),
    Param("streamEpoch", "query", {"type": "integer", "minimum": 1}, EPOCH_DOC),
)  # fmt: skip
OPERATIONS: list[Operation] = []
for _kind in nm.KINDS:
    OPERATIONS += [
        Operation(
            "GET",
            f"/feeds/{_kind}/events",
            _events(_kind),
            f"get{_camel(_kind)}FeedEvents",
            f"Read the caller's tenant's retained {_kind} events after a position",
            "notify feed",
            READ,
            params=FEED_PARAMS,
            responses={200: (PAGES[_kind], "the page (`complete`: nothing follows)")},
            errors=(404, 409, 503),
            description=(
                "The tenant comes from the token. 404 `stream-missing`; 409 `epoch-mismatch`, "
                "`beyond-head` (afterSeq past the stream's end) or `retention-gap` (messages "
                "after afterSeq may have been removed and no live registration held or vouches "
                "for them); 503 `feed-unavailable` (`Retry-After`) when JetStream cannot be "
                "read: never a page that claims to be complete."
            ),
        ),
        Operation(
            "POST",
            f"/feeds/{_kind}/consumer-checkpoint",
            _checkpoint_handler(_kind),
            f"report{_camel(_kind)}FeedCheckpoint",
            f"Register or report the {_kind} consumer's durable position",
            "notify feed",
            READ,
            body=CheckpointBody,
            responses={200: (CheckpointAnswer, "the registration, renewed for its lease")},
            errors=(404, 409, 503),
            description=(
                "Only the configured consumer client (`notify.consumer_client_ids`, matched "
                "against the token's `client_id`, `azp` or `sub`) may: anyone else 403 "
                "`not-the-feed-consumer`. `streamEpoch` and `seq` both null register (or "
                "reset) at zero; both set report a position, which holds the tenant's messages "
                "of this kind after it until reported (up to `notify.max_retention_s`) while "
                "the registration lives (`notify.feed_lease_s` after the last report). 409 for "
                "another epoch or a position past the stream's end."
            ),
        ),
    ]
