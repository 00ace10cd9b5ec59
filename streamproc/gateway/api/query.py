"""Query-string and precondition parsing with problem answers naming the parameter."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import msgspec
from aiohttp import web

from streamproc import names
from streamproc.configfile.typed import flag
from streamproc.events.payloads import Digest
from streamproc.ids import ascii_int
from streamproc.problems import ProblemError
from streamproc.readmodel.keys import CursorError
from streamproc.readmodel.queries import Page

T = TypeVar("T")
DEFAULT_LIMIT = 50
MAX_LIMIT = 500
PAGE_BYTES = names.PAGE_BYTES
"""A page ends early, before the item that would take it past this (``nextCursor`` goes on
from there). A page always holds at least one item."""
_CURSOR_ROOM = 3_000
"""Bytes kept for ``nextCursor`` (a cursor is at most 2,048 bytes, base64url)."""
_enc = msgspec.json.Encoder()

ANY = -1
"""``If-Match: *``: any current version."""


def int_param(request: web.Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    value = ascii_int(raw)
    if value is None or not lo <= value <= hi:
        raise ProblemError(
            400, "invalid-parameter", f"{name} must be an integer {lo}..{hi}", field=f"query.{name}"
        )
    return value


def digest_param(request: web.Request) -> str:
    """The ``{digest}`` of the path, checked as the events check an image digest."""
    raw = request.match_info["digest"]
    try:
        return msgspec.convert(raw, Digest)
    except msgspec.ValidationError:
        raise ProblemError(
            400,
            "invalid-parameter",
            f"{raw[:200]!r} is not an image digest (algorithm:hex, e.g. sha256:<64 hex>)",
            field="path.digest",
        ) from None


def paged(request: web.Request, listing: Callable[..., T], *args: Any, **filters: Any) -> T:
    """``listing(*args, limit=, cursor=, **filters)`` with the page's ``limit`` (1-500,
    default 50) and ``cursor`` from the query; a cursor this server did not issue is 400."""
    limit = int_param(request, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    try:
        return listing(*args, limit=limit, cursor=request.query.get("cursor"), **filters)
    except CursorError as exc:
        raise ProblemError(400, "invalid-parameter", str(exc), field="query.cursor") from None


def bool_param(request: web.Request, name: str) -> bool | None:
    """A boolean query parameter: ``None`` when absent, 400 for a word that is neither true
    nor false (the words of a true/false setting, :func:`streamproc.configfile.typed.flag`)."""
    raw = request.query.get(name)
    if raw is None:
        return None
    value = flag(raw)
    if value is None:
        raise ProblemError(
            400, "invalid-parameter", f"{name} must be true or false", field=f"query.{name}"
        )
    return value


def set_param(request: web.Request, name: str, allowed: frozenset[str]) -> frozenset[str]:
    """Comma-separated and/or repeated values, each from ``allowed``."""
    values = {
        v.strip() for raw in request.query.getall(name, []) for v in raw.split(",") if v.strip()
    }
    bad = values - allowed
    if bad:
        raise ProblemError(
            400,
            "invalid-parameter",
            f"{name}: unknown value(s) {sorted(bad)}; allowed {sorted(allowed)}",
            field=f"query.{name}",
        )
    return frozenset(values)


def if_match(request: web.Request) -> int | None:
    """The version in ``If-Match`` (``ANY`` for ``*``), or None when absent."""
    raw = request.headers.get("If-Match")
    if raw is None:
        return None
    v = raw.strip()
    if v == "*":
        return ANY
    if v.startswith("W/"):
        raise ProblemError(412, "stale-version", "weak entity tags never match If-Match")
    version = ascii_int(v.strip('"'))
    if version is None:
        raise ProblemError(
            400, "invalid-precondition", 'If-Match must be a version such as "42"', field="If-Match"
        )
    return version


def page_body(page: Page[T], render: Callable[[T], Any], max_bytes: int = PAGE_BYTES) -> bytes:
    """``{"items": [...], "nextCursor": ...}`` of ``page``, each item rendered and encoded
    once, ended early so that the whole stays within ``max_bytes``."""
    parts: list[bytes] = []
    size = len(b'{"items":[],"nextCursor":}') + _CURSOR_ROOM
    cursor = page.next_cursor
    for i, item in enumerate(page.items):
        data = _enc.encode(render(item))
        if parts and size + len(data) + 1 > max_bytes:
            cursor = page.cursor_after(i - 1)
            break
        parts.append(data)
        size += len(data) + 1
    return b'{"items":[' + b",".join(parts) + b'],"nextCursor":' + _enc.encode(cursor) + b"}"


def page_response(page: Page[T], render: Callable[[T], Any]) -> web.Response:
    return web.Response(body=page_body(page, render), content_type="application/json")
