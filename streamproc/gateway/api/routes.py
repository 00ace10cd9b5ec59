"""Every operation of the API, in one list (routes and OpenAPI are built from it)."""

from __future__ import annotations

from streamproc.gateway.api import (
    routes_acks,
    routes_audit,
    routes_backlog,
    routes_feed,
    routes_images,
    routes_preview,
    routes_runs,
    routes_schedules,
    routes_vex,
    routes_webhooks,
)
from streamproc.gateway.api.operations import Operation

OPERATIONS: list[Operation] = [
    *routes_schedules.OPERATIONS,
    *routes_runs.OPERATIONS,
    *routes_acks.OPERATIONS,
    *routes_backlog.OPERATIONS,
    *routes_preview.OPERATIONS,
    *routes_audit.OPERATIONS,
    *routes_webhooks.OPERATIONS,
    *routes_images.OPERATIONS,
    *routes_vex.OPERATIONS,
    *routes_feed.OPERATIONS,
]
