"""Every operation of the API, in one list (routes and OpenAPI are built from it)."""

from __future__ import annotations

from aiohttp import web

from streamproc.gateway import (
    routes_audit,
    routes_images,
    routes_preview,
    routes_runs,
    routes_schedules,
    routes_webhooks,
)
from streamproc.gateway.operations import Operation

OPERATIONS: list[Operation] = [
    *routes_schedules.OPERATIONS,
    *routes_runs.OPERATIONS,
    *routes_preview.OPERATIONS,
    *routes_audit.OPERATIONS,
    *routes_webhooks.OPERATIONS,
    *routes_images.OPERATIONS,
]

_document: bytes | None = None


async def openapi_handler(_request: web.Request) -> web.Response:
    global _document
    if _document is None:
        from streamproc.gateway.openapi import render

        _document = render().encode()
    return web.Response(body=_document, content_type="application/json")
