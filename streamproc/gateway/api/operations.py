"""Operations as data: each route's method, path, scope, body and responses, declared once
and used both to mount the route and to generate the OpenAPI document."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

from streamproc.gateway.auth.callers import Principal
from streamproc.gateway.context import GatewayContext
from streamproc.names import API_BASE

BASE = API_BASE
Handler = Callable[[GatewayContext, web.Request, Principal | None], Awaitable[web.StreamResponse]]
"""A route's handler: given the gateway's context, the request and the authenticated caller
(``None`` where the operation has no scope and the handler authenticates itself)."""


@dataclass(frozen=True)
class Param:
    name: str
    where: Literal["path", "query", "header"]
    schema: dict[str, Any]
    description: str = ""
    required: bool = False


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    """Relative to :data:`BASE`."""
    handler: Handler
    operation_id: str
    summary: str
    tag: str
    scope: str | None
    """Token scope required; ``None``: the handler authenticates itself (webhooks: a signature
    or certificate, plus a token with ``scheduler.webhook`` unless the source takes none)."""
    body: type | None = None
    body_required: bool = True
    responses: dict[int, tuple[type | None, str]] = field(default_factory=dict)
    errors: tuple[int, ...] = ()
    params: tuple[Param, ...] = ()
    description: str = ""
    headers: dict[int, dict[str, str]] = field(default_factory=dict)

    @property
    def full_path(self) -> str:
        return BASE + self.path


def path_id(name: str = "id") -> Param:
    return Param(name, "path", {"type": "string", "maxLength": 512}, required=True)


DIGEST = Param(
    "digest",
    "path",
    {"type": "string", "pattern": "^[a-z0-9]+:[a-f0-9]{32,128}$"},
    "the image's manifest digest, e.g. sha256:<64 hex>",
    required=True,
)
WAIT = Param(
    "wait",
    "query",
    {"type": "boolean", "default": False},
    "answer once the gateway's read model has applied the event (read-your-writes)",
)
IF_MATCH = Param(
    "If-Match",
    "header",
    {"type": "string"},
    'the schedule\'s version (its ETag, e.g. "42"); 412 if it is no longer current',
)
LIMIT = Param("limit", "query", {"type": "integer", "minimum": 1, "maximum": 500, "default": 50})
CURSOR = Param("cursor", "query", {"type": "string"}, "nextCursor of the previous page")
