"""The questions one role asks another over NATS (:mod:`streamproc.bus.services`): which
service answers, on which endpoint, and the request and response bodies as msgspec Structs.

Every question names the tenant it is about; the service answers for that tenant only (the
gateway fills it in from the caller's token, never from the request body), and refuses a
question that does not decode or names no valid tenant (:func:`read_query`, 400).

- ``planner.preview`` (for ``POST /preview/impact``): :class:`PreviewQuery` → ``PreviewResult``
- ``auditor.verify`` (for ``GET /chain/verify``): :class:`VerifyQuery` → ``ChainReport``
"""

from __future__ import annotations

from typing import Annotated, TypeVar

import msgspec
from msgspec import Meta

from streamproc.audit.verify import ChainReport as ChainVerification
from streamproc.bus.services import ServiceFailure
from streamproc.events.payloads import MAX_KEYS, Selection, Str
from streamproc.ids import InvalidTenant, validate_tenant

__all__ = [
    "ChainVerification",
    "PreviewQuery",
    "PreviewRequest",
    "PreviewResult",
    "VerifyQuery",
    "read_query",
]

PLANNER = "planner"
PREVIEW = "preview"
AUDITOR = "auditor"
VERIFY = "verify"


class PreviewRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    """Change keys (product keys or purls) and/or a selection; no keys = the whole selection."""

    product_keys: Annotated[list[Str], Meta(max_length=MAX_KEYS)] = []
    selection: Selection = msgspec.field(default_factory=Selection)
    usage_only: bool = True
    sample_size: Annotated[int, Meta(ge=0, le=100)] = 10


class PreviewResult(msgspec.Struct, kw_only=True, rename="camel"):
    count: int
    sample: list[str]
    unmatched: list[str]
    """Keys that match no image of the tenant (at most 100 shown)."""
    unmatched_count: int
    usage_unknown: int = 0
    """How many of the ``count`` images have no usage data: they count as using every
    component they contain, also with ``usageOnly``."""


class PreviewQuery(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    tenant: str
    request: PreviewRequest


class VerifyQuery(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    tenant: str
    log_view: bool = False
    """Also compare the HLC-ordered log view with the chain (slower)."""


Query = TypeVar("Query", PreviewQuery, VerifyQuery)


def read_query(decoder: msgspec.json.Decoder[Query], data: bytes) -> Query:
    """The question in ``data``, or :class:`ServiceFailure` 400."""
    try:
        query = decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise ServiceFailure(400, "invalid-body", str(exc)) from None
    try:
        validate_tenant(query.tenant)
    except InvalidTenant as exc:
        raise ServiceFailure(400, "invalid-tenant", str(exc)) from None
    return query
