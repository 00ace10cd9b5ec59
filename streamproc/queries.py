"""The questions one role asks another over NATS (:mod:`streamproc.bus.services`): which
service answers, on which endpoint, and the request and response bodies as msgspec Structs.

Every question names the tenant it is about; the service answers for that tenant only (the
gateway fills it in from the caller's token, never from the request body), and refuses a
question that does not decode or names no valid tenant (:func:`read_query`, 400).

- ``planner.preview`` (for ``POST /preview/impact``): :class:`PreviewQuery` → ``PreviewResult``
- ``auditor.verify`` (for ``GET /chain/verify``): :class:`VerifyQuery` → :class:`ChainReport`

With ``planner.partitions`` = N > 1 a tenant's previews go to the endpoint of its partition,
``preview-p<k>`` (:func:`preview_endpoint`), which only the planner holding partition k
serves.
"""

from __future__ import annotations

from typing import Annotated, Literal, TypeVar

import msgspec
from msgspec import Meta

from streamproc.bus.services import ServiceFailure
from streamproc.events.payloads import (
    MAX_KEYS,
    FeedserExportBody,
    Selection,
    SourceName,
    Str,
    VexerExportBody,
)
from streamproc.ids import InvalidTenant, partition_of, validate_tenant

__all__ = [
    "ChainReport",
    "ExportAt",
    "PreviewQuery",
    "PreviewRequest",
    "PreviewResult",
    "PreviewedExport",
    "VerifyQuery",
    "read_query",
]

PLANNER = "planner"
PREVIEW = "preview"
AUDITOR = "auditor"
VERIFY = "verify"


def preview_endpoint(tenant: str, partitions: int) -> str:
    """The endpoint answering ``tenant``'s previews: ``preview`` with one partition, else
    ``preview-p<k>``, k the partition NATS maps the tenant to (:func:`partition_of`)."""
    if partitions <= 1:
        return PREVIEW
    return partition_endpoint(partition_of(tenant, partitions))


def partition_endpoint(partition: int) -> str:
    return f"{PREVIEW}-p{partition}"


class PreviewRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    """What to preview: change keys (product keys or purls), or a Feedser/Vexer export — one
    recorded before (``exportId``, with ``source`` when several sources sent that id) or
    its body (``feedserExport``/``vexerExport``) — within ``selection``; with none of
    them, the whole selection."""

    product_keys: Annotated[list[Str], Meta(max_length=MAX_KEYS)] = []
    selection: Selection = msgspec.field(default_factory=Selection)
    usage_only: bool = True
    sample_size: Annotated[int, Meta(ge=0, le=100)] = 10
    export_id: Str | None = None
    """A Feedser or Vexer export recorded for the caller's tenant: its latest revision."""
    source: SourceName | None = None
    """The webhook source that sent ``exportId`` (needed when several did)."""
    feedser_export: FeedserExportBody | None = None
    """A Feedser export's body, as its webhook takes it (previewed, not recorded)."""
    vexer_export: VexerExportBody | None = None
    """A Vexer export's body, as its webhook takes it (previewed, not recorded)."""


class PreviewedExport(msgspec.Struct, kw_only=True, rename="camel", omit_defaults=True):
    """Which export a preview was of."""

    kind: Literal["feedser", "vexer"]
    export_id: str
    source: str | None = None
    """The source that sent it (a recorded export)."""
    revision: int | None = None
    """Its latest revision (a recorded export)."""


class PreviewResult(msgspec.Struct, kw_only=True, rename="camel"):
    count: int
    """Candidate images: those the change keys hit within the selection."""
    sample: list[str]
    unmatched: list[str]
    """Keys that match no image of the tenant (at most 100 shown)."""
    unmatched_count: int
    usage_unknown: int = 0
    """How many of the ``count`` images have no usage data: they count as using every
    component they contain, also with ``usageOnly``."""
    export: PreviewedExport | None = None
    projected_deltas: int | None = None
    """(An export's preview.) Images whose verdict its advisories would make worse — a new
    critical or high finding, or a new KEV one — judged against each image's last verdict
    (docs/api.md, "Preview", says how, and what it can get wrong)."""
    projected_kev: int | None = None
    """How many of ``projectedDeltas`` would carry a KEV finding."""
    projected_high_epss: int | None = None
    """(Additional field.) How many of ``projectedDeltas`` would carry a finding whose EPSS
    percentile is at least ``planner.epss_high_percentile`` (KEV ones included: the two
    counts are apart, not exclusive)."""
    unassessed: int | None = None
    """Candidates the export names no severity or KEV status for (a bare changed key, a VEX
    claim on a vulnerability no Feedser export described): not counted either way."""
    projected_from: int | None = None
    """How many candidates the projection read the last verdict of: all of them, or an
    even sample of a large set, whose counts are scaled up."""


class ExportAt(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A recorded export's latest revision, where the event log holds it."""

    kind: Literal["feedser", "vexer"]
    seq: int
    export_id: str
    source: str | None = None
    revision: int = 1


class PreviewQuery(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    tenant: str
    request: PreviewRequest
    export_at: ExportAt | None = None
    """The export ``request.exportId`` names, found by the gateway in its read model."""


class VerifyQuery(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    tenant: str
    log_view: bool = False
    """Also compare the HLC-ordered log view with the chain (slower)."""


class ChainReport(msgspec.Struct, kw_only=True):
    """A tenant's chain verification, as the API answers it (``GET /chain/verify``) and
    ``streamproc chain verify --json`` prints it. A broken chain is a report (``verified:
    false`` and where it breaks), not an error."""

    tenant: str = msgspec.field(name="tenantId")
    ok: bool = msgspec.field(name="verified")
    entries: int
    """Entries verified (the whole chain when ``ok``)."""
    head_chain_link: str | None
    head_hlc: str | None
    snapshots: int
    """Snapshots whose signature and Merkle root verified."""
    snapshotted: int
    """Positions covered by recorded snapshots."""
    broken_position: int | None = None
    field: str | None = None
    expected: str | None = None
    found: str | None = None
    reason: str = ""


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
