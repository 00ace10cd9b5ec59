"""Request and response bodies of the API as msgspec Structs.

The same Structs decode and validate requests and generate ``/openapi.json``, so the
document cannot drift from what the server accepts. Requests refuse unknown fields.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from streamproc.events.payloads import (
    MAX_KEYS,
    Coverage,
    Finding,
    Limits,
    Mode,
    Name,
    NotifyRule,
    OnlyIf,
    RunStats,
    Selection,
    Str,
    Trigger,
    check_cron,
    check_timezone,
)
from streamproc.readmodel.records import RunState

ID_PATTERN = r"^[A-Za-z0-9_:-]{1,128}$"
ResourceId = Annotated[str, Meta(pattern=ID_PATTERN, description="letters, digits, _ : -")]
Text = Annotated[str, Meta(max_length=1000)]
Subscription = Literal["feedser", "vexer"]


class Request(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    """Base of request bodies: camelCase, unknown fields refused."""


class Response(msgspec.Struct, kw_only=True, rename="camel"):
    """Base of response bodies."""


# ------------------------------------------------------------------ schedules

RENAMED: dict[tuple[str, str], str] = {
    ("$", "cron"): "the schedule's cron expression is `whenCron`",
    ("$.notify", "includeKev"): "the notify rule's KEV switch is `includeKEV`",
}
"""Names earlier versions of this API took, by (JSON path, name): a body using one is 400
with a problem that names the specification's field (docs/conformance.md, §3)."""


class ScheduleCreate(Request, kw_only=True):
    id: ResourceId | None = None
    """Client-chosen id (409 if taken); omitted: the server assigns a UUIDv7."""
    tenant_id: Annotated[str, Meta(max_length=128)] | None = None
    """Optional: when given, the token's tenant (the only one a schedule can be made for)."""
    name: Name
    enabled: bool = True
    cron: Str = msgspec.field(name="whenCron")
    timezone: Str
    mode: Mode = "analysis-only"
    selection: Selection = msgspec.field(default_factory=Selection)
    only_if: OnlyIf = msgspec.field(default_factory=OnlyIf)
    notify: NotifyRule = msgspec.field(default_factory=NotifyRule)
    limits: Limits = msgspec.field(default_factory=Limits)
    subscriptions: list[Subscription] = msgspec.field(default_factory=lambda: ["feedser", "vexer"])

    def __post_init__(self) -> None:
        check_cron(self.cron)
        check_timezone(self.timezone)


class SchedulePatch(Request, kw_only=True):
    """Fields present change. ``enabled: false`` pauses and ``enabled: true`` resumes
    (``paused`` is the same switch, inverted); a pause or resume is a change of its own:
    with other changes only when it leaves the schedule as it is."""

    name: Name | UnsetType = UNSET
    cron: Str | UnsetType = msgspec.field(default=UNSET, name="whenCron")
    timezone: Str | UnsetType = UNSET
    mode: Mode | UnsetType = UNSET
    selection: Selection | UnsetType = UNSET
    only_if: OnlyIf | UnsetType = UNSET
    notify: NotifyRule | UnsetType = UNSET
    limits: Limits | UnsetType = UNSET
    subscriptions: list[Subscription] | UnsetType = UNSET
    enabled: bool | UnsetType = UNSET
    paused: bool | UnsetType = UNSET
    reason: Text | UnsetType = UNSET
    """Recorded with a pause or resume."""

    def __post_init__(self) -> None:
        if self.cron is not UNSET:
            check_cron(self.cron)
        if self.timezone is not UNSET:
            check_timezone(self.timezone)


# Not the stored record: why is said in :func:`streamproc.gateway.api.views.schedule_view` (a
# docstring here would become the schema's description and change the published OpenAPI).
class ScheduleView(Response, kw_only=True):
    id: str
    tenant_id: str
    name: str
    enabled: bool
    """False while the schedule is paused: the same switch as ``paused``, inverted."""
    cron: str = msgspec.field(name="whenCron")
    timezone: str
    mode: Mode
    selection: Selection
    only_if: OnlyIf
    notify: NotifyRule
    limits: Limits
    created_at: str
    updated_at: str
    created_by: str | None
    updated_by: str | None
    paused: bool
    subscriptions: list[str]
    version: int
    """Stream sequence of the schedule's last event: send it back in ``If-Match``."""
    deleted: bool = False
    deleted_at: str | None = None
    next_fire_times: list[str] = []
    """Next fire times in the schedule's time zone (ISO 8601 with offset)."""


class ScheduleList(Response, kw_only=True):
    items: list[ScheduleView]
    next_cursor: str | None = None


# ------------------------------------------------------------------ runs

OLD_STATES: dict[str, str] = {"requested": "planning", "planned": "queued"}
"""Run states earlier versions showed, and the specification's state each became."""


class RunCreate(Request, kw_only=True):
    mode: Mode = "analysis-only"
    selection: Selection = msgspec.field(default_factory=Selection)
    reason: Text | None = None


class RunCancel(Request, kw_only=True):
    reason: Text | None = None


class SegmentCounts(Response, kw_only=True):
    total: int = 0
    planned: int = 0
    enqueued: int = 0
    running: int = 0
    completed: int = 0
    failed: int = 0


class RunLinks(Response, kw_only=True):
    self_: str = msgspec.field(name="self")
    deltas: str
    exports: str


class RunReasonView(Response, kw_only=True):
    feedser_export_id: str | None = None
    """The run's first Feedser export, as its sender named it."""
    vexer_export_id: str | None = None
    """The run's first Vexer export, as its sender named it."""
    cursor: str | None = None
    """The exportId the run moves its tenant's impact cursor to once planned: the export it
    covers that was recorded last."""
    export_count: int = 0
    """How many exports the run covers (all of them: ``GET /runs/{id}/exports``)."""
    exports: list[str] = []
    """The first few of them, by ref (``<source>:<exportId>``)."""
    revisions: dict[str, int] = {}
    """Of ``exports``, each the run plans at a revision past its first (a corrected
    re-export: docs/planning.md, "Coalescing exports")."""
    scheduled_for: str | None = None
    """A cron run's fire time (UTC)."""
    text: str | None = None


class RunView(Response, kw_only=True):
    id: str
    schedule_id: str | None
    tenant_id: str
    trigger: Trigger
    reason: RunReasonView
    state: RunState
    stats: RunStats
    started_at: str | None
    finished_at: str | None
    error: str | None
    schedule_ids: list[str]
    mode: Mode
    selection: Selection | None
    requested_by: str | None
    requested_at: str
    cancel_requested: bool
    cancel_reason: str | None
    segments: SegmentCounts
    degraded: bool
    degraded_reason: str | None
    coverage: Coverage | None
    updated_at: str
    version: int
    links: RunLinks


class RunList(Response, kw_only=True):
    items: list[RunView]
    next_cursor: str | None = None


class RunExportView(Response, kw_only=True):
    ref: str
    """``<source>:<exportId>``: how the run names it."""
    kind: Literal["feedser", "vexer"]
    source: str | None
    """The webhook source that delivered it (None for exports recorded before sources)."""
    export_id: str
    """As its sender named it."""
    recorded_at: str | None
    revision: int = 1
    """The revision of the export the run plans."""


class RunExportList(Response, kw_only=True):
    items: list[RunExportView]
    next_cursor: str | None = None


class ImpactCursorView(Response, kw_only=True):
    tenant_id: str
    feedser_last_export_id: str | None
    vexer_last_export_id: str | None
    updated_at: str | None
    feedser_last_export_ref: str | None
    """``<source>:<exportId>`` of the Feedser export (its source: several may be configured)."""
    vexer_last_export_ref: str | None


class DeltaAcknowledge(Request, kw_only=True):
    """Take charge of a delta: a note and the ticket that tracks the work, both optional."""

    note: Text | None = None
    ticket: Annotated[str, Meta(min_length=1, max_length=200)] | None = None


class AcknowledgementView(Response, kw_only=True):
    run_id: str
    digest: str
    acknowledged_by: str | None
    """The token's subject of whoever acknowledged it."""
    acknowledged_at: str
    note: str | None
    ticket: str | None
    event_id: str


class DeltaView(Response, kw_only=True):
    digest: str
    segment_id: str
    status: Literal["ok", "failed"]
    new_criticals: int
    new_high: int
    kev_hits: list[str]
    top_findings: list[Finding]
    report_url: str | None
    acknowledgement: AcknowledgementView | None = None
    """Who took charge of it (``PUT …/acknowledgement``); null while nobody has."""


class DeltaList(Response, kw_only=True):
    items: list[DeltaView]
    next_cursor: str | None = None


# ------------------------------------------------------------------ preview


# PreviewRequest and PreviewResult are the planner's query (streamproc/queries.py), which
# the gateway passes on: defined there, below both.


# ------------------------------------------------------------------ images

SbomDocument = Annotated[
    msgspec.Raw,
    Meta(
        description="the SBOM itself, as JSON: CycloneDX 1.4-1.7 or SPDX 2.2/2.3",
        extra_json_schema={"type": "object"},
    ),
]


class ImagePut(Request, kw_only=True):
    """An image and its SBOM, as CI pipelines and scanners hand them over."""

    repository: Annotated[
        str,
        Meta(
            min_length=1,
            max_length=512,
            description="[registry/]path, without tag or digest (read as docker does: "
            "'nginx' is docker.io/library/nginx)",
        ),
    ]
    namespace: Str | None = None
    tags: list[Str] = []
    labels: dict[Str, Annotated[str, Meta(max_length=1024)]] = {}
    used_purls: Annotated[list[Str], Meta(max_length=MAX_KEYS)] | None = None
    """Purls of the SBOM that the image's entrypoint uses (usage information). Given, even
    empty, the image's usage is known; absent, every package of the SBOM counts."""
    sbom: SbomDocument


class ImageView(Response, kw_only=True):
    digest: str
    tenant: str
    registry: str
    repository: str
    namespace: str | None
    tags: list[str]
    labels: dict[str, str]
    purl_count: int
    product_key_count: int
    used_purl_count: int
    usage_known: bool
    """The image's event carries usage information (``usedPurls`` was given); without it
    the image counts as using every package it contains."""
    content_digest: str
    """sha256:<hex> of the indexed content: equal for the same SBOM and metadata."""
    indexed_at: str
    indexed_hlc: str
    event_id: str
    version: int
    """Stream sequence of the image.indexed event."""
    sbom: str | None = None
    """sha256:<hex> of the SBOM as it was sent, kept in the SBOM store and answered by
    ``GET /images/{digest}/sbom``; null when it was not kept."""


class ImageList(Response, kw_only=True):
    items: list[ImageView]
    next_cursor: str | None = None


# ------------------------------------------------------------------ writes and webhooks


class Accepted(Response, kw_only=True):
    """A write was recorded in the event log; the read model applies it shortly."""

    event_id: str
    seq: int
    id: str | None = None
    applied: bool = False


class ImageAccepted(Accepted, kw_only=True):
    duplicate: bool = False
    """The image is already indexed with this content: nothing new was recorded, and
    ``eventId``/``seq`` are those of the event that indexed it."""


class ExportEvent(Response, kw_only=True):
    """What became of the export for one tenant it was recorded for."""

    tenant: str
    outcome: Literal["recorded", "duplicate"]
    """``recorded``: its event is new (the export's first body, or its next revision);
    ``duplicate``: the export's latest revision has this very body (nothing was recorded)."""
    event_id: str
    seq: int
    duplicate: bool
    """``outcome == "duplicate"``."""
    revision: int = 1
    """The revision of the export this body is for the tenant: 1 for its first body, one
    more for each later body under the same ``exportId`` (the last one counts)."""


class WebhookAccepted(Response, kw_only=True):
    export_id: str
    source: str
    revision: int
    """The revision this body is (the highest over ``events``, should tenants differ)."""
    duplicate: bool
    """True when every tenant's latest revision already had this body."""
    events: list[ExportEvent]
    """One per tenant it was recorded for: the token's, or, for a source that takes no
    token, each of the source's tenants in its configured order."""


class VexSkipped(Response, kw_only=True):
    count: int = 0
    """Products of the document that could not become claims (no purl, …)."""
    reasons: list[str] = []
    """The first reasons, each naming where in the document."""


class VexAccepted(Response, kw_only=True):
    """What a VEX document became: its claims, and the export of the ones that changed."""

    document_id: str
    format: Literal["openvex", "cyclonedx", "csaf"]
    version: str
    statements: int
    claims: int
    changed_claims: int
    """Claims that changed since the version held (0 for an identical re-send)."""
    skipped: VexSkipped = msgspec.field(default_factory=VexSkipped)
    export_id: str | None = None
    """The recorded ``export.vexer``'s ref (``vex-documents:<documentId>@<version>``)."""
    event_id: str | None = None
    seq: int | None = None
    unchanged: bool = False
    """The same document was recorded before: nothing new was recorded."""
    applied: bool = False


class VexDocumentView(Response, kw_only=True):
    document_id: str
    format: str
    version: str
    sha256: str
    statements: int
    claims: int
    export_id: str
    updated_at: str


class VexDocumentList(Response, kw_only=True):
    items: list[VexDocumentView]
    next_cursor: str | None = None
