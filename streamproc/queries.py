"""The questions one role asks another over NATS (:mod:`streamproc.bus.services`): which
service answers, on which endpoint, and the request and response bodies as msgspec Structs.

Every question names the tenant it is about; the service answers for that tenant only (the
gateway fills it in from the caller's token, never from the request body).

- ``planner.preview`` (for ``POST /preview/impact``): :class:`PreviewQuery` → ``PreviewResult``
- ``auditor.verify`` (for ``GET /chain/verify``): :class:`VerifyQuery` → :class:`ChainVerification`
"""

from __future__ import annotations

import msgspec

from streamproc.gateway.models import PreviewRequest

PLANNER = "planner"
PREVIEW = "preview"
AUDITOR = "auditor"
VERIFY = "verify"


class PreviewQuery(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    tenant: str
    request: PreviewRequest


class VerifyQuery(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    tenant: str
    log_view: bool = False
    """Also compare the HLC-ordered log view with the chain (slower)."""


class ChainVerification(msgspec.Struct, kw_only=True):
    """A tenant's chain verification. A broken chain is an answer (``verified: false`` and
    where it breaks), not an error."""

    tenant_id: str = msgspec.field(name="tenantId")
    verified: bool
    entries: int
    """Entries verified (the whole chain when verified)."""
    head_chain_link: str | None
    head_hlc: str | None
    snapshots: int
    """Signed snapshots whose signature and Merkle root verified."""
    snapshotted: int
    """Chain positions covered by those snapshots."""
    broken_position: int | None = None
    field: str | None = None
    expected: str | None = None
    found: str | None = None
    reason: str = ""
