"""Query-string and precondition parsing with problem answers naming the parameter."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from aiohttp import web

from streamproc.ids import ascii_int
from streamproc.problems import ProblemError
from streamproc.readmodel.keys import CursorError

T = TypeVar("T")

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


def paged(request: web.Request, listing: Callable[..., T], *args: Any, **filters: Any) -> T:
    """``listing(*args, limit=, cursor=, **filters)`` with the page's ``limit`` (1-500,
    default 50) and ``cursor`` from the query; a cursor this server did not issue is 400."""
    limit = int_param(request, "limit", 50, 1, 500)
    try:
        return listing(*args, limit=limit, cursor=request.query.get("cursor"), **filters)
    except CursorError as exc:
        raise ProblemError(400, "invalid-parameter", str(exc), field="query.cursor") from None


def bool_param(request: web.Request, name: str) -> bool | None:
    raw = request.query.get(name)
    if raw is None:
        return None
    low = raw.lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise ProblemError(
        400, "invalid-parameter", f"{name} must be true or false", field=f"query.{name}"
    )


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
