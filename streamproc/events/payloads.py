"""Payload Structs, one per event kind: the schema of the event log.

Field names are snake_case in Python and camelCase on the wire (``rename="camel"``), matching
the REST and webhook contract. Validation that msgspec can express (lengths, ranges,
patterns) lives in the annotations, so a payload that decodes is a payload that validates.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from functools import lru_cache
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec
from cronsim import CronSim, CronSimError
from msgspec import UNSET, Meta, UnsetType

MAX_KEYS = 100_000

Str = Annotated[str, Meta(min_length=1, max_length=512)]
Name = Annotated[str, Meta(min_length=1, max_length=200)]
Digest = Annotated[str, Meta(pattern=r"^[a-z0-9]+:[a-f0-9]{32,128}(?!\n)$")]
SbomKey = Annotated[str, Meta(pattern=r"^sha256:[a-f0-9]{64}(?!\n)$")]
"""An SBOM's name in the SBOM store: ``sha256:`` and the hex SHA-256 of its bytes."""
Count = Annotated[int, Meta(ge=0)]
KeyList = Annotated[list[Str], Meta(max_length=MAX_KEYS)]
Mode = Literal["analysis-only", "content-refresh"]
Trigger = Literal["cron", "feedser", "vexer", "manual"]
Severity = Literal["low", "medium", "high", "critical"]
SEVERITY_RANK: dict[str, int] = {"low": 1, "medium": 2, "high": 3, "critical": 4}
VEX_STATUSES = frozenset(
    {"not_affected", "affected", "fixed", "under_investigation", "false_positive"}
)
VEX_DOCUMENT_SOURCE = "vex-documents"
"""The source of the exports that ``PUT /vex/{documentId}`` records (no webhook source may
take this name): their ref is ``vex-documents:<documentId>@<version>``."""
_EPOCH = datetime(2000, 1, 1)
_TRANSITION = re.compile(r"^([a-z_]+)\s*(?:→|->)\s*([a-z_]+)$")


class Payload(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    """Base of every payload: unknown fields are refused, names are camelCase on the wire."""


@lru_cache(maxsize=4096)
def check_cron(expr: str) -> None:
    try:
        CronSim(expr, _EPOCH)
    except (CronSimError, ValueError, KeyError, IndexError) as exc:
        raise ValueError(f"invalid cron expression {expr!r}: {exc}") from None


@lru_cache(maxsize=1024)
def check_timezone(name: str) -> None:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown IANA time zone {name!r}") from exc


# ---------------------------------------------------------------- schedule parts


class Selection(Payload, kw_only=True):
    """Which images a schedule or run covers; filters AND together, values within one OR."""

    scope: Literal["all-images", "by-namespace", "by-repo", "by-digest", "by-labels"] = "all-images"
    namespaces: list[Str] = []
    repositories: list[Str] = []
    digests: list[Digest] = []
    labels: list[Annotated[str, Meta(pattern=r"^[^=]+=.*$", max_length=512)]] = []
    include_tags: list[Str] = []
    resolves_tags: bool = False


class OnlyIf(Payload, kw_only=True):
    last_report_older_than_days: Annotated[int, Meta(ge=0)] | None = None
    policy_revision: Str | None = None


class NotifyRule(Payload, kw_only=True):
    on_new_findings: bool = True
    min_severity: Severity = "high"
    include_kev: bool = msgspec.field(default=True, name="includeKEV")
    """The specification's name: ``includeKEV`` (the camel rename alone would say
    ``includeKev``)."""


class Limits(Payload, kw_only=True):
    max_jobs: Annotated[int, Meta(ge=1)] | None = None
    rate_per_second: Annotated[int, Meta(ge=1)] | None = None
    parallelism: Annotated[int, Meta(ge=1, le=1024)] | None = None


class ScheduleCreated(Payload, kw_only=True):
    schedule_id: Str
    name: Name
    enabled: bool = True
    cron: Str = msgspec.field(name="whenCron")
    timezone: Str
    mode: Mode = "analysis-only"
    selection: Selection = msgspec.field(default_factory=Selection)
    only_if: OnlyIf = msgspec.field(default_factory=OnlyIf)
    notify: NotifyRule = msgspec.field(default_factory=NotifyRule)
    limits: Limits = msgspec.field(default_factory=Limits)
    subscriptions: list[Literal["feedser", "vexer"]] = msgspec.field(
        default_factory=lambda: ["feedser", "vexer"]
    )
    created_by: Str | None = None

    def __post_init__(self) -> None:
        check_cron(self.cron)
        check_timezone(self.timezone)


class ScheduleUpdated(Payload, kw_only=True):
    """A patch: only the fields present change; an update never creates a schedule."""

    schedule_id: Str
    name: Name | UnsetType = UNSET
    cron: Str | UnsetType = msgspec.field(default=UNSET, name="whenCron")
    timezone: Str | UnsetType = UNSET
    mode: Mode | UnsetType = UNSET
    selection: Selection | UnsetType = UNSET
    only_if: OnlyIf | UnsetType = UNSET
    notify: NotifyRule | UnsetType = UNSET
    limits: Limits | UnsetType = UNSET
    subscriptions: list[Literal["feedser", "vexer"]] | UnsetType = UNSET
    updated_by: Str | None = None

    def __post_init__(self) -> None:
        if self.cron is not UNSET:
            check_cron(self.cron)
        if self.timezone is not UNSET:
            check_timezone(self.timezone)


SCHEDULE_PATCHABLE: tuple[str, ...] = tuple(
    f for f in ScheduleUpdated.__struct_fields__ if f not in ("schedule_id", "updated_by")
)
"""The schedule fields an update may change (the API's PATCH and every fold use these)."""


class ScheduleStateChange(Payload, kw_only=True):
    """``schedule.paused``, ``schedule.resumed`` and ``schedule.deleted``."""

    schedule_id: Str
    by: Str | None = None
    reason: Annotated[str, Meta(max_length=1000)] | None = None


# ---------------------------------------------------------------- exports


class Window(Payload, kw_only=True):
    from_: Annotated[str, Meta(max_length=64)] | None = msgspec.field(default=None, name="from")
    to: Annotated[str, Meta(max_length=64)] | None = None


class Epss(Payload, kw_only=True):
    """FIRST's Exploit Prediction Scoring System: the probability of exploitation in the
    next 30 days (``score``), its rank among all scored CVEs (``percentile``), and the day
    the scores were computed (``date``)."""

    score: Annotated[float, Meta(ge=0.0, le=1.0)]
    percentile: Annotated[float, Meta(ge=0.0, le=1.0)]
    date: Annotated[str, Meta(max_length=64)] | None = None


class AdvisoryChange(Payload, kw_only=True):
    """Feeds the vuln → product-key map used by ``resolve_by_vulns``."""

    vuln_id: Str
    product_keys: KeyList
    severity: Severity | None = None
    kev: bool = False
    epss: Epss | UnsetType = UNSET
    """Additional field: the advisory's EPSS (its CVE's), ranking the work it causes.
    Additional fields are left out when unset, so events recorded before them keep their
    bytes (the audit chain hashes payloads)."""


SourceName = Annotated[str, Meta(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}(?!\n)$")]
ExportRef = Annotated[str, Meta(min_length=1, max_length=600)]
"""``<source>:<exportId>`` (see :func:`export_ref`): a source name, a colon, an export id."""


def export_ref(source: str | None, export_id: str) -> str:
    """How an export is known to every view, subject and run: ``<source>:<exportId>``.

    Export ids are the sender's own, so two configured sources may well use the same one;
    neither may stand in for the other. Events recorded before exports were scoped by
    source (schema 1) name no source, and their ref is the bare export id."""
    return export_id if source is None else f"{source}:{export_id}"


class FeedserExportBody(Payload, kw_only=True):
    """What a Feedser source posts to the webhook."""

    export_id: Str
    changed_product_keys: KeyList = []
    kev: KeyList = []
    window: Window | None = None
    advisories: Annotated[list[AdvisoryChange], Meta(max_length=MAX_KEYS)] = []


Revision = Annotated[int, Meta(ge=1)]


class FeedserExport(FeedserExportBody, kw_only=True):
    """``export.feedser``: the body as delivered, the source that delivered it, and which
    revision of the export it is."""

    source: SourceName | None = None
    """The authenticated webhook source (set by the gateway, never by the body); None in
    events recorded before exports were scoped by source."""
    revision: Revision = 1
    """1 for the export's first body; each later delivery of the same ``exportId`` by the
    same source with another body is the next revision (keep last)."""

    @property
    def ref(self) -> str:
        return export_ref(self.source, self.export_id)


DocumentId = Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:~-]{0,199}(?!\n)$")]


class ChangedClaim(Payload, kw_only=True):
    product_key: Str
    """The purl the claim names (with its version and qualifiers when the claim has them)."""
    vuln_id: Str
    status: Annotated[str, Meta(max_length=64)]
    """``from→to``: the claim's status before and after (``affected`` where there was or is
    no claim: a finding without one stands)."""
    justification: Annotated[str, Meta(max_length=512)] | UnsetType = UNSET
    """Additional field: why, for the new status (a VEX justification or impact statement)."""
    document_id: Str | UnsetType = UNSET
    """Additional field: the VEX document the claim belongs to (absent: the export's
    source speaks for itself)."""
    image_digest: Digest | UnsetType = UNSET
    """Additional field: the claim holds inside this image only."""
    removed: bool | UnsetType = UNSET
    """Additional field: the document no longer makes this claim (``to`` is ``affected``)."""

    @property
    def before(self) -> str:
        return self.status.replace("->", "→").split("→", 1)[0].strip()

    @property
    def after(self) -> str:
        return self.status.replace("->", "→").split("→", 1)[1].strip()

    def __post_init__(self) -> None:
        m = _TRANSITION.match(self.status)
        if not m or m.group(1) not in VEX_STATUSES or m.group(2) not in VEX_STATUSES:
            raise ValueError(
                f"status {self.status!r} is not a VEX transition 'from→to' of "
                f"{sorted(VEX_STATUSES)}"
            )


class VexDocument(Payload, kw_only=True):
    """The VEX document an export carries the changed claims of."""

    document_id: Str
    format: Literal["openvex", "cyclonedx", "csaf"]
    version: Annotated[str, Meta(max_length=64)]
    sha256: Annotated[str, Meta(pattern=r"^[0-9a-f]{64}(?!\n)$")]
    """Of the document's bytes as received: an identical re-send changes nothing."""
    statements: Count = 0
    claims: Count = 0
    """Claims the document makes now (all of them, not only the changed ones)."""


class VexerExportBody(Payload, kw_only=True):
    """What a Vexer source posts to the webhook."""

    export_id: Str
    changed_claims: Annotated[list[ChangedClaim], Meta(max_length=MAX_KEYS)] = []
    window: Window | None = None
    documents: Annotated[list[VexDocument], Meta(max_length=10_000)] | UnsetType = UNSET
    """Additional field: the documents whose claims changed (``streamproc vexer export``,
    ``PUT /vex/{documentId}``)."""


class VexerExport(VexerExportBody, kw_only=True):
    """``export.vexer``: the body as delivered, the source that delivered it, and which
    revision of the export it is."""

    source: SourceName | None = None
    """As :attr:`FeedserExport.source`."""
    revision: Revision = 1
    """As :attr:`FeedserExport.revision`."""

    @property
    def ref(self) -> str:
        return export_ref(self.source, self.export_id)

    @property
    def subject_id(self) -> str:
        """The export's subject: its ref, except for a document recorded through the API,
        whose versions share one subject (``vex-documents/<documentId>``) so that a stale
        version cannot be recorded after a newer one (expected last subject sequence)."""
        if self.source == VEX_DOCUMENT_SOURCE and self.documents and len(self.documents) == 1:
            return f"{VEX_DOCUMENT_SOURCE}/{self.documents[0].document_id}"
        return self.ref


def export_body(payload: FeedserExport | VexerExport) -> FeedserExportBody | VexerExportBody:
    """The export as its sender posted it: what tells a repeat from a conflicting body
    (the same for events of either schema)."""
    body = FeedserExportBody if isinstance(payload, FeedserExport) else VexerExportBody
    return body(**{f: getattr(payload, f) for f in body.__struct_fields__})


def sourced_export(
    body: FeedserExportBody | VexerExportBody, source: str, revision: int = 1
) -> FeedserExport | VexerExport:
    """The event payload of a delivered ``body``: the same fields, its source and revision."""
    kind = FeedserExport if isinstance(body, FeedserExportBody) else VexerExport
    fields = {f: getattr(body, f) for f in body.__struct_fields__}
    return kind(**fields, source=source, revision=revision)


# ---------------------------------------------------------------- images


class Component(Payload, kw_only=True, array_like=True):
    """One package of an image, already normalised (array-like: compact on the wire)."""

    purl: Str
    product_key: Str
    used: bool = False


class ImageIndexed(Payload, kw_only=True):
    digest: Digest
    registry: Str
    repository: Str
    namespace: Str | None = None
    tags: list[Str] = []
    labels: dict[Str, Annotated[str, Meta(max_length=1024)]] = {}
    components: Annotated[list[Component], Meta(max_length=MAX_KEYS)] = []
    usage_known: bool | None = None
    """True: the producer knows which components the entrypoint uses (the ``used`` flags,
    possibly all false); false: it does not, and the image counts as using every component.
    Absent (events from before this field): known when any component is used."""
    sbom: SbomKey | None = None
    """The SBOM exactly as it was sent, stored in the SBOM store (the ``<prefix>_sboms``
    object store) under this name before the event was published; what the scanner
    backends evaluate. Absent: not kept (events from before SBOMs were, or a producer that
    does not store them)."""


class ImageRemoved(Payload, kw_only=True):
    digest: Digest
    reason: Annotated[str, Meta(max_length=1000)] | None = None


class SbomDeleted(Payload, kw_only=True):
    """The SBOM store deleted an SBOM that no image used any more, once ``sboms.retention_s``
    had passed since the last image using it went (and since it was last stored)."""

    sbom: SbomKey
    released_by: Str
    """The id of the event that removed its last use (an ``image.removed``, or an
    ``image.indexed`` that changed the image's SBOM): the release this deletion ends."""


# ---------------------------------------------------------------- runs


class RunReason(Payload, kw_only=True):
    feedser_export_ids: list[ExportRef] = []
    """The exports the run plans, by :func:`export_ref` (``<source>:<exportId>``)."""
    vexer_export_ids: list[ExportRef] = []
    revisions: dict[ExportRef, Revision] | UnsetType = UNSET
    """The revision the run plans of each export it names, when not the first (a follow-up
    of a late revision: docs/planning.md, "Coalescing exports"). Absent when every export
    is at its first: a request's encoding — and the audit chain's hash of it — is then what
    it was before revisions existed."""

    def revision_of(self, ref: str) -> int:
        """The revision the run plans of export ``ref``."""
        return 1 if isinstance(self.revisions, UnsetType) else self.revisions.get(ref, 1)

    @property
    def later_revisions(self) -> dict[str, int]:
        return {} if isinstance(self.revisions, UnsetType) else dict(self.revisions)

    scheduled_for: Annotated[str, Meta(max_length=64)] | None = None
    text: Annotated[str, Meta(max_length=1000)] | None = None


class RunStats(Payload, kw_only=True):
    candidates: Count = 0
    deduped: Count = 0
    queued: Count = 0
    spilled: Count = 0
    completed: Count = 0
    failed: Count = 0
    cancelled: Count = 0
    deltas: Count = 0
    new_criticals: Count = 0


class RunRequested(Payload, kw_only=True):
    run_id: Str
    trigger: Trigger
    schedule_id: Str | None = None
    mode: Mode = "analysis-only"
    selection: Selection | None = None
    reason: RunReason = msgspec.field(default_factory=RunReason)
    requested_by: Str | None = None


class SegmentRef(Payload, kw_only=True):
    segment_id: Str
    shard: Count
    images: Count


class RunPlanned(Payload, kw_only=True):
    run_id: Str
    trigger: Trigger
    schedule_ids: list[Str] = []
    stats: RunStats = msgspec.field(default_factory=RunStats)
    segments: list[SegmentRef] = []
    degraded: bool = False
    degraded_reason: Annotated[str, Meta(max_length=1000)] | None = None


class RunCancelRequested(Payload, kw_only=True):
    run_id: Str
    by: Str | None = None
    reason: Annotated[str, Meta(max_length=1000)] | None = None


class RunCancelled(Payload, kw_only=True):
    run_id: Str
    reason: Annotated[str, Meta(max_length=1000)] | None = None
    stats: RunStats = msgspec.field(default_factory=RunStats)


class Coverage(Payload, kw_only=True):
    """Which images were not re-evaluated, and why (reason → count)."""

    evaluated: Count = 0
    not_evaluated: Count = 0
    reasons: dict[Str, Count] = {}


class RunCompleted(Payload, kw_only=True):
    run_id: Str
    state: Literal["completed", "error"] = "completed"
    stats: RunStats = msgspec.field(default_factory=RunStats)
    coverage: Coverage = msgspec.field(default_factory=Coverage)
    error: Annotated[str, Meta(max_length=2000)] | None = None


# ---------------------------------------------------------------- segments and verdicts


Rate = Annotated[int, Meta(ge=1)]


class SegmentEnqueued(Payload, kw_only=True):
    """A segment and the leaky buckets its scanner calls are paced by (runners share
    them, docs/planning.md "Pacing"): the run's rate over all its segments, the tenant's,
    and for content refresh its registry host's, each with a burst of ``burst_s`` seconds.
    The bucket fields are absent from segments of schema 1 (and stay absent when such an
    event is encoded again, so its audit digest does not change)."""

    segment_id: Str
    run_id: Str
    shard: Count
    digests: Annotated[list[Digest], Meta(min_length=1, max_length=10_000)]
    rate_per_second: Rate | None = None
    """Images/s of the whole run (schema 1: the segment's share, read as the run's)."""
    mode: Mode = "analysis-only"
    priority: Annotated[int, Meta(ge=0, le=9)] = 5
    tenant_rate: Rate | UnsetType = UNSET
    registry_host: Str | UnsetType = UNSET
    registry_rate: Rate | UnsetType = UNSET
    burst_s: Annotated[float, Meta(gt=0, le=3600)] | UnsetType = UNSET
    policy_revision: Annotated[str, Meta(max_length=512)] | UnsetType = UNSET
    """The policy revision the run's schedules ask the scanner to evaluate against
    (``onlyIf.policyRevision``): sent with every ``POST /reports`` of the segment. Absent
    when no schedule names one, or when they name different ones (the scanner's current
    policy then)."""


class SegmentStarted(Payload, kw_only=True):
    segment_id: Str
    run_id: Str
    runner: Str
    attempt: Annotated[int, Meta(ge=1)] = 1


class SegmentUsage(Payload, kw_only=True):
    wall_ms: Count = 0
    scanner_p50_ms: float = 0.0
    scanner_p95_ms: float = 0.0
    scanner_p99_ms: float = 0.0
    retries: Count = 0


class SegmentCompleted(Payload, kw_only=True):
    segment_id: Str
    run_id: Str
    completed: Count = 0
    failed: Count = 0
    cancelled: Count = 0
    usage: SegmentUsage = msgspec.field(default_factory=SegmentUsage)


SEGMENT_UNRECOVERABLE = "unrecoverable_segment"
"""How the ``reason`` of a ``segment.failed`` starts that the planner emits for a segment
whose event a crash lost and that no plan derives any more (docs/planning.md)."""


class SegmentFailed(Payload, kw_only=True):
    segment_id: Str
    run_id: Str
    reason: Annotated[str, Meta(min_length=1, max_length=2000)]
    deliveries: Count = 0
    dead_lettered: bool = False


class Finding(Payload, kw_only=True):
    purl: Str
    vuln_id: Str
    severity: Severity
    kev: bool = False
    link: Annotated[str, Meta(max_length=2048)] | None = None
    epss: Epss | UnsetType = UNSET
    fixed_version: Annotated[str, Meta(max_length=512)] | None = None
    """The version that fixes it, as the scanner says (absent: none known)."""


class Suppressed(Payload, kw_only=True):
    """A finding the scanner reported that a VEX claim drops, and why."""

    purl: Str
    vuln_id: Str
    severity: Severity
    status: Literal["not_affected", "false_positive", "fixed"]
    justification: Annotated[str, Meta(max_length=512)] | None = None
    document_id: Str


class VexApplied(Payload, kw_only=True):
    """A VEX document whose claims a verdict applied, at the version it applied."""

    document_id: Str
    version: Annotated[str, Meta(max_length=64)] | None = None


class VerdictRecorded(Payload, kw_only=True):
    run_id: Str
    segment_id: Str
    digest: Digest
    status: Literal["ok", "failed"] = "ok"
    error: Annotated[str, Meta(max_length=2000)] | None = None
    new_criticals: Count = 0
    new_high: Count = 0
    kev_hits: list[Str] = []
    top_findings: Annotated[list[Finding], Meta(max_length=100)] = []
    findings: Annotated[list[Finding], Meta(max_length=MAX_KEYS)] = []
    report_url: Annotated[str, Meta(max_length=2048)] | None = None
    policy_verdict: Literal["PASS", "FAIL"] | None = None
    """The policy's decision on the findings (absent on failed verdicts and on verdicts
    recorded before it was kept)."""
    revision: Annotated[str, Meta(max_length=512)] | None = None
    """What the scanner evaluated against: the reference scanner's advisory revision, or a
    tool's vulnerability DB version or build."""
    policy_revision: Annotated[str, Meta(max_length=512)] | None = None
    """The policy the verdict was decided by: the backend's, or ``failOn=<severity>;kev=<KEV
    catalog version>``."""
    scanner: Annotated[str, Meta(max_length=64)] | None = None
    """The backend kind that answered (``stella``, ``trivy``, ``grype``, ``osv-scanner``)."""
    suppressed: Annotated[list[Suppressed], Meta(max_length=MAX_KEYS)] | UnsetType = UNSET
    """Findings of the scanner's report that VEX claims dropped (not in ``findings``)."""
    vex_documents: Annotated[list[VexApplied], Meta(max_length=10_000)] | UnsetType = UNSET
    """The VEX documents whose claims matched a finding of the report (any status)."""


class DeltaAcknowledged(Payload, kw_only=True):
    """Someone took charge of an image's delta in a run (triage): who, with what note and
    ticket. A later acknowledgement of the same delta replaces the earlier one."""

    run_id: Str
    digest: Digest
    by: Str | None = None
    note: Annotated[str, Meta(max_length=1000)] | None = None
    ticket: Annotated[str, Meta(min_length=1, max_length=200)] | None = None
    """The issue or ticket that tracks the work (``SEC-1234``, a URL)."""


# ---------------------------------------------------------------- audit


class DsseSignature(Payload, kw_only=True):
    keyid: Annotated[str, Meta(max_length=256)] = ""
    sig: Annotated[str, Meta(min_length=1, max_length=4096)]


class DsseEnvelope(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """DSSE wire form: its field names are fixed by the DSSE spec."""

    payloadType: Str
    payload: Annotated[str, Meta(max_length=1_000_000)]
    signatures: Annotated[list[DsseSignature], Meta(min_length=1)]


class AuditSnapshot(Payload, kw_only=True):
    from_chain_link: Annotated[str, Meta(pattern=r"^[0-9a-f]{64}(?!\n)$")]
    to_chain_link: Annotated[str, Meta(pattern=r"^[0-9a-f]{64}(?!\n)$")]
    from_position: Count
    to_position: Count
    entry_count: Annotated[int, Meta(ge=1)]
    merkle_root: Annotated[str, Meta(pattern=r"^[0-9a-f]{64}(?!\n)$")]
    snapshot_hlc: Str
    envelope: DsseEnvelope


def payload_digest(payload: msgspec.Struct) -> str:
    """SHA-256 (hex) of the payload's canonical encoding: what "the same content" means (a
    true repeat of an export or an image, as opposed to a conflicting one)."""
    return hashlib.sha256(msgspec.json.encode(payload)).hexdigest()
