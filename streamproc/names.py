"""Every reserved name, defined once: streams, subjects, consumers, KV buckets, column
families, projections, scopes and the API's base path.

The bottom of the layer order (docs/architecture.md): it imports nothing of streamproc, so
every module can take its names from here and none spells one itself. A name changed here
changes what is on the wire or on disk: streams, subjects and buckets must then be recreated,
column families and projection names replayed.
"""

from __future__ import annotations

import re
from typing import Final

DEFAULT_PREFIX: Final = "scheduler"
"""The subject prefix, and from it the stream and bucket names (``STREAMPROC_PREFIX``)."""

# ---------------------------------------------------------------- streams and subjects

EVENTS: Final = "events"
WORK: Final = "work"
NOTIFY: Final = "notify"
SERVICES: Final = "svc"
"""The second subject token: ``<prefix>.<token>.…`` — the event log, the work queue, what
Notify consumes, and queries between roles."""


def stream_names(prefix: str) -> tuple[str, str, str]:
    """The event log, the work queue and the Notify stream of ``prefix``."""
    base = prefix.upper().replace(".", "_").replace("-", "_")
    return base, f"{base}_WORK", f"{base}_NOTIFY"


def events_subjects(prefix: str) -> str:
    """What every event's subject starts with: ``<prefix>.events.``."""
    return f"{prefix}.{EVENTS}."


def event_subject(prefix: str, tenant: str, aggregate: str, token: str) -> str:
    """``<prefix>.events.<tenant>.<aggregate>.<id token>``: one subject per aggregate."""
    return f"{prefix}.{EVENTS}.{tenant}.{aggregate}.{token}"


EXPORT_SHARDS: Final = 16
"""Subjects the exports of one tenant and source kind are spread over
(``<prefix>.events.<tenant>.<feedser|vexer>.s<NN>``, by a hash of the export's ref): a subject
per export grew nats-server's memory with every export ever recorded. Part of the subject
layout: every process that records exports must agree on it (streamproc/recording/exportlog.py)."""


def tenant_events(prefix: str, tenant: str) -> str:
    """Every event of one tenant (a filter subject)."""
    return f"{prefix}.{EVENTS}.{tenant}.>"


PLAN: Final = "plan"
"""The second subject token of a partitioned planners' stream: ``<prefix>.plan.<k>.…``."""


def plan_stream(events_stream: str, partitions: int) -> str:
    """``<EVENTS>_PLAN<N>``: the event log again, each subject carrying its tenant's partition
    (only with ``planner.partitions`` > 1; a different N is a different stream)."""
    return f"{events_stream}_PLAN{partitions}"


def plan_subjects(prefix: str, partition: int) -> str:
    """What every subject of one partition starts with: ``<prefix>.plan.<k>.``."""
    return f"{prefix}.{PLAN}.{partition}."


def partition_lease(partition: int, partitions: int) -> str:
    """``planner-p<k>-of-<N>``: the lease key of one planner partition."""
    return f"planner-p{partition}-of-{partitions}"


PLANNER_MEMBERS: Final = "planner-member-"
"""Lease-bucket keys by which partitioned planners count each other (one per process)."""


def partition_state(partition: int, partitions: int) -> str:
    """The state directory name of one planner partition (under ``<data>/state/``)."""
    return f"planner-p{partition}-of-{partitions}"


def work_subject(prefix: str, tenant: str, priority: int | str) -> str:
    """``<prefix>.work.<tenant>.segment.<priority>``: a segment on the work queue."""
    return f"{prefix}.{WORK}.{tenant}.segment.{priority}"


def notify_subject(prefix: str, tenant: str, kind: str) -> str:
    """``<prefix>.notify.<tenant>.<kind>``: one Notify message kind of one tenant."""
    return f"{prefix}.{NOTIFY}.{tenant}.{kind}"


def all_of(prefix: str, token: str) -> str:
    """Every subject under ``<prefix>.<token>`` (a stream's subjects, a filter)."""
    return f"{prefix}.{token}.>"


def service_subject(prefix: str, service: str, endpoint: str) -> str:
    """``<prefix>.svc.<service>.<endpoint>``: one query endpoint (``bus/services.py``)."""
    return f"{prefix}.{SERVICES}.{service}.{endpoint}"


# ---------------------------------------------------------------- consumers


def projector_consumer(role: str, *where: str) -> str:
    """``proj_<role>[_<node>_<state dir hash>]``: a projector's durable consumer, distinct
    for every process hosting the role (``runtime/app.py``); letters, digits, ``_`` and ``-``
    only."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", "_".join(["proj", role, *where]))


NOTIFY_TAIL: Final = "notify-tail"
"""The default durable consumer (and HTTP checkpoint) of ``streamproc notify tail``."""

NOTIFY_WINDOW: Final = "notify-window"
"""The Notify stream's delivery window: a durable consumer that holds every message until it
is older than ``notify.max_age_s`` (the stream keeps messages while a consumer needs them)."""


def feed_hold_consumer(tenant: str, kind: str) -> str:
    """``feed-<kind>-<tenant>``: the durable consumer by which an HTTP feed registration holds
    its tenant's messages of one kind until it reports them (one of three fixed kinds leads,
    so the name is unique)."""
    return f"feed-{kind.replace('.', '-')}-{tenant}"


# ---------------------------------------------------------------- KV buckets


def replay_bucket(prefix: str) -> str:
    """Webhook delivery ids and DPoP ``jti``s the gateways have seen."""
    return f"{prefix.replace('.', '_')}_replay"


def lease_bucket(prefix: str) -> str:
    """Leases of the roles that run one active instance (planner, auditor)."""
    return f"{prefix}_leases"


def status_bucket(prefix: str) -> str:
    """Role heartbeats for ``streamproc status``."""
    return f"{prefix}_status"


def rate_bucket(prefix: str) -> str:
    """The runners' shared leaky buckets (per run, tenant and registry host)."""
    return f"{prefix.replace('.', '_')}_rates"


def sbom_bucket(prefix: str) -> str:
    """The object store holding every indexed SBOM as sent, by ``sha256:<hex>``."""
    return f"{prefix.replace('.', '_')}_sboms"


def feed_bucket(prefix: str) -> str:
    """Registrations and checkpoints of the Notify HTTP feed's consumers."""
    return f"{prefix}_feed"


# ---------------------------------------------------------------- projections

ACTIVITY: Final = "activity"
AUDIT: Final = "audit"
IMPACT: Final = "impact"
RUNNER: Final = "runner"
RUNNER_VEX: Final = "runner_vex"
"""The runner's VEX claims (one column family named after it)."""
RM_VEX: Final = "rm_vex"
"""The read model's VEX documents and their claims."""
PL_EPSS: Final = "pl_epss"
"""The planner's EPSS score per vulnerability (from Feedser advisories)."""
SCANNER_IMAGES: Final = "scanner_images"
FEEDS: Final = "feeds"
"""The ``feeds`` role's ledger of the exports it recorded."""
FEEDS_SOURCE: Final = "feeds"
"""The source the ``feeds`` role records its exports as (their ref: ``feeds:<exportId>``);
no webhook source may take its name."""
RM_EXPORTS: Final = "rm_exports"
RM_IMAGES: Final = "rm_images"
RM_RUNS: Final = "rm_runs"
RM_SCHEDULES: Final = "rm_schedules"
RM_DELTA_ACKS: Final = "rm_delta_acks"
"""Who acknowledged each delta of a run (triage), with their note and ticket."""
PL_EXPORTS: Final = "pl_exports"
PL_OPEN: Final = "pl_open"
PL_REPORTS: Final = "pl_reports"
PL_RUNS: Final = "pl_runs"
PL_SCHEDULES: Final = "pl_schedules"


def work_consumer(tenant: str, priority: int, group: str = RUNNER) -> str:
    """The runners' durable consumer of one (tenant, priority): work-queue consumers must not
    overlap, so there is exactly one per filter subject."""
    return f"{group}_{tenant}_p{priority}"


# ---------------------------------------------------------------- column families
# A projection without ``families`` keeps its state in one column family named after it
# (the read model's, ``activity``, ``scanner_images``); these are the others.

META_CF: Final = "__meta__"
"""What the runtime keeps: checkpoint, state format, quarantine, rejections."""

RUNNER_RUNS_CF: Final = "runner_runs"
RUNNER_VERDICTS_CF: Final = "runner_verdicts"
RUNNER_IMAGES_CF: Final = "runner_images"
RUNNER_RULES_CF: Final = "runner_rules"
RUNNER_SUMMARY_CF: Final = "runner_summary"
RUNNER_OPEN_CF: Final = "runner_open"
"""Runs not yet completed or cancelled: what the runner's completion reactor looks at."""
RUNNER_SUMMARY_IMAGES_CF: Final = "runner_summary_images"
RUNNER_EXPORTS_CF: Final = "runner_exports"
RUNNER_SBOMS_CF: Final = "runner_sboms"
"""(tenant, digest) → the SBOM store name the image was indexed with (the tool backends)."""
SBOM_REFS_CF: Final = "sbom_refs"
"""The planner's count of images using each stored SBOM, and the SBOMs no image uses (their
retention)."""

PL_SCHEDULES_CF: Final = PL_SCHEDULES
PL_RUNS_CF: Final = PL_RUNS
PL_BACKLOG_CF: Final = "pl_backlog"
PL_REPORTS_CF: Final = PL_REPORTS
PL_FINDINGS_CF: Final = "pl_findings"
PL_EXPORTS_CF: Final = PL_EXPORTS
PL_CLAIMS_CF: Final = "pl_claims"
PL_CURSORS_CF: Final = "pl_cursors"
PL_VULNS_CF: Final = "pl_vulns"
PL_OPEN_CF: Final = PL_OPEN

IMPACT_GROUPS_CF: Final = "impact_groups"
IMPACT_OWNERS_CF: Final = "impact_owners"
IMPACT_IMAGES_CF: Final = "impact_images"
IMPACT_NAMES_CF: Final = "impact_names"

FEEDS_EXPORTS_CF: Final = "feeds_exports"
"""(tenant, kind, ref) → the ``feeds`` role's export as recorded (latest revision)."""
FEEDS_ADVISORIES_CF: Final = "feeds_advisories"
"""(tenant, vulnId) → the digest of the advisory as the ``feeds`` role last exported it."""

AUDIT_CHAIN_CF: Final = "audit_chain"
AUDIT_LOG_CF: Final = "audit_log"
AUDIT_HEADS_CF: Final = "audit_heads"
AUDIT_SNAPSHOTS_CF: Final = "audit_snapshots"

RM_RUNS_BY_TIME_CF: Final = "rm_runs_by_time"
RM_RUN_DELTAS_CF: Final = "rm_run_deltas"
RM_RUNS_EXPIRY_CF: Final = "rm_runs_expiry"
RM_RUN_EXPORTS_CF: Final = "rm_run_exports"
"""Every export a run covers, in order: what ``GET /runs/{id}/exports`` pages through."""
RM_CURSORS_CF: Final = "rm_cursors"
"""``impact_cursors``: per tenant, the latest export of each source a planned run covers."""
RM_BACKLOG_CF: Final = "rm_backlog"

# ---------------------------------------------------------------- HTTP API

API_BASE: Final = "/api/v1/scheduler"
"""Every REST operation's path starts here (docs/api.md)."""
PAGE_BYTES: Final = 256_000
"""The most a list response may weigh (docs/api.md): a page ends before the item that would
take it past this, and the next page goes on from there."""

AUDIENCE: Final = "scheduler"
"""The token audience the gateway expects unless configured (``gateway.audience``)."""
REALM: Final = "scheduler"
"""The realm of the gateway's ``WWW-Authenticate`` challenges."""

READ_SCOPE: Final = "scheduler.read"
ADMIN_SCOPE: Final = "scheduler.admin"
IMAGES_WRITE_SCOPE: Final = "scheduler.images.write"
"""Ingest only: index and remove images (CI pipelines, scanners); reads need READ."""
VEX_WRITE_SCOPE: Final = "scheduler.vex.write"
"""Ingest only: VEX documents of the token's tenant (``PUT /vex/{documentId}``)."""
WEBHOOK_SCOPE: Final = "scheduler.webhook"
"""Deliver Feedser/Vexer exports to the webhooks, and nothing else (admin implies it)."""
