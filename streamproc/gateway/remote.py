"""The gateway's questions to the roles that hold the state, over NATS
(:mod:`streamproc.queries`): one code path whether the planner and auditor run in this
process (``up``) or on other machines.

An answer about the question is passed through (the service's 4xx become the same problem
here; 429 with ``Retry-After``); a service that cannot answer (5xx) is 503 or 502 in the
gateway's own words, so no internals reach the caller; nobody answering — no instance runs,
or none within the deadline — is 503 with ``Retry-After``. Never a 500.
"""

from __future__ import annotations

import re

import msgspec
from nats.aio.client import Client

from streamproc.bus import services
from streamproc.bus.services import ServiceFailure, ServiceUnavailable
from streamproc.problems import ProblemError
from streamproc.queries import (
    AUDITOR,
    PLANNER,
    VERIFY,
    ChainReport,
    ExportAt,
    PreviewQuery,
    PreviewRequest,
    PreviewResult,
    VerifyQuery,
    preview_endpoint,
)

RETRY_AFTER_S = 5
_SLUG = re.compile(r"[a-z][a-z-]{0,63}")
_encode = msgspec.json.Encoder().encode
_preview = msgspec.json.Decoder(PreviewResult)
_verification = msgspec.json.Decoder(ChainReport)


class Remote:
    def __init__(
        self,
        nc: Client,
        prefix: str,
        *,
        preview_timeout_s: float,
        verify_timeout_s: float,
        partitions: int = 1,
    ) -> None:
        """``partitions``: ``planner.partitions``; with more than one, a tenant's previews go
        to the planner holding its partition."""
        self.nc = nc
        self.partitions = partitions
        self.prefix = prefix
        self.preview_timeout_s = preview_timeout_s
        self.verify_timeout_s = verify_timeout_s

    async def preview(
        self, tenant: str, request: PreviewRequest, export_at: ExportAt | None = None
    ) -> PreviewResult:
        body = _encode(PreviewQuery(tenant=tenant, request=request, export_at=export_at))
        endpoint = preview_endpoint(tenant, self.partitions)
        data = await self._ask(PLANNER, endpoint, body, self.preview_timeout_s, "impact preview")
        return _preview.decode(data)

    async def verify(self, tenant: str, log_view: bool) -> ChainReport:
        body = _encode(VerifyQuery(tenant=tenant, log_view=log_view))
        data = await self._ask(AUDITOR, VERIFY, body, self.verify_timeout_s, "chain verification")
        return _verification.decode(data)

    async def _ask(
        self, service: str, endpoint: str, body: bytes, timeout: float, what: str
    ) -> bytes:
        subject = services.subject(self.prefix, service, endpoint)
        try:
            return await services.call(self.nc, subject, body, timeout)
        except ServiceUnavailable as exc:
            raise ProblemError(
                503,
                f"{service}-unavailable",
                f"no {service} answered the {what} ({exc}); retry",
                headers={"Retry-After": str(RETRY_AFTER_S)},
            ) from None
        except ServiceFailure as exc:
            retry = {"Retry-After": str(RETRY_AFTER_S)}
            if 400 <= exc.status < 500:  # about the question: the service's own words
                headers = retry if exc.status == 429 else None
                raise ProblemError(
                    exc.status, exc.slug, exc.detail, field=exc.field, headers=headers
                ) from None
            # The service's trouble: said in our words, whatever its answer carried.
            if exc.status == 503:
                slug = exc.slug if _SLUG.fullmatch(exc.slug) else f"{service}-unavailable"
                raise ProblemError(
                    503, slug, f"the {service} cannot answer the {what} now; retry", headers=retry
                ) from None
            raise ProblemError(
                502, "service-error", f"the {service} failed to answer the {what} (see its log)"
            ) from None
