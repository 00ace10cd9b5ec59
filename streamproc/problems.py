"""RFC 9457 problem details: the one error shape of the API, built in one place."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
from aiohttp import web

PROBLEM_TYPE = "urn:streamproc:problem:"
CONTENT_TYPE = "application/problem+json"

_TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    406: "Not Acceptable",
    409: "Conflict",
    411: "Length Required",
    412: "Precondition Failed",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    428: "Precondition Required",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


class Problem(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The problem document (``application/problem+json``)."""

    type: str
    title: str
    status: int
    detail: str = ""
    instance: str = ""
    request_id: str = msgspec.field(default="", name="requestId")
    field: str | None = None
    reason: str | None = None
    count: int | None = None
    limit: int | None = None
    current_version: int | None = msgspec.field(default=None, name="currentVersion")
    epoch: str | None = None
    """The stream's epoch, on a Notify feed ``epoch-mismatch``."""


class ProblemError(Exception):
    """Raise anywhere in a handler; the middleware renders it as problem+json."""

    def __init__(
        self,
        status: int,
        slug: str,
        detail: str = "",
        *,
        headers: Mapping[str, str] | list[tuple[str, str]] | None = None,
        **extra: Any,
    ) -> None:
        self.status = status
        self.slug = slug
        self.detail = detail
        self.headers = list(headers.items()) if isinstance(headers, Mapping) else headers or []
        self.extra = extra
        super().__init__(f"{status} {slug}: {detail}")

    def document(self, instance: str = "", request_id: str = "") -> Problem:
        return Problem(
            type=PROBLEM_TYPE + self.slug,
            title=_TITLES.get(self.status, "Error"),
            status=self.status,
            detail=self.detail,
            instance=instance,
            request_id=request_id,
            **self.extra,
        )


_enc = msgspec.json.Encoder()


def render(err: ProblemError, instance: str = "", request_id: str = "") -> web.Response:
    resp = web.Response(
        status=err.status,
        body=_enc.encode(err.document(instance, request_id)),
        content_type=CONTENT_TYPE,
    )
    for k, v in err.headers:
        resp.headers.add(k, v)
    return resp


_SLUGS = {
    404: "not-found",
    405: "method-not-allowed",
    413: "body-too-large",
    415: "unsupported-media-type",
}


def from_http_exception(exc: web.HTTPException) -> ProblemError:
    """aiohttp's own errors (unknown route, wrong method, too large) in the problem shape."""
    headers: list[tuple[str, str]] = []
    if exc.status == 405 and "Allow" in exc.headers:
        headers.append(("Allow", exc.headers["Allow"]))
    detail = exc.text if exc.text and not exc.text.startswith(f"{exc.status}:") else exc.reason
    return ProblemError(exc.status, _SLUGS.get(exc.status, "http-error"), detail, headers=headers)
