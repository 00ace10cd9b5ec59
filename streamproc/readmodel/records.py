"""Stored records of the read model (msgpack via msgspec); the API renders views of them."""

from __future__ import annotations

from typing import Literal

import msgspec

from streamproc.events.payloads import (
    Coverage,
    Finding,
    Mode,
    NotifyRule,
    RunReason,
    RunStats,
    Selection,
    Trigger,
)
from streamproc.projections.schedule import ScheduleBase

RunState = Literal["requested", "planned", "queued", "running", "completed", "cancelled", "error"]
TERMINAL: frozenset[str] = frozenset({"completed", "cancelled", "error"})
SegmentStateName = Literal["planned", "enqueued", "running", "completed", "failed"]


class ScheduleRecord(ScheduleBase, kw_only=True):
    """A schedule as the API shows it: the shared record plus what only the read model keeps
    (name, notify rule, authors, times and the version that is the ETag)."""

    name: str
    notify: NotifyRule
    created_by: str | None = None
    updated_by: str | None = None
    created_ms: int = 0
    updated_ms: int = 0
    deleted_ms: int | None = None
    version: int = 0
    """Stream sequence of the last event applied to this schedule (the ETag / If-Match)."""


class SegmentState(msgspec.Struct, array_like=True):
    images: int = 0
    state: SegmentStateName = "planned"
    attempts: int = 0


class RunRecord(msgspec.Struct, kw_only=True):
    id: str
    tenant: str
    trigger: Trigger
    state: RunState = "requested"
    schedule_id: str | None = None
    schedule_ids: list[str] = []
    mode: Mode = "analysis-only"
    selection: Selection | None = None
    reason: RunReason = msgspec.field(default_factory=RunReason)
    requested_by: str | None = None
    cancel_requested: bool = False
    cancel_reason: str | None = None
    stats: RunStats = msgspec.field(default_factory=RunStats)
    segments: dict[str, SegmentState] = {}
    degraded: bool = False
    degraded_reason: str | None = None
    coverage: Coverage | None = None
    error: str | None = None
    requested_ms: int = 0
    started_ms: int | None = None
    finished_ms: int | None = None
    updated_ms: int = 0
    requested_seq: int = 0
    version: int = 0


class DeltaRecord(msgspec.Struct, kw_only=True):
    """A verdict of a run that got worse (new criticals/highs or KEV hits)."""

    digest: str
    segment_id: str
    status: Literal["ok", "failed"] = "ok"
    new_criticals: int = 0
    new_high: int = 0
    kev_hits: list[str] = []
    top_findings: list[Finding] = []
    report_url: str | None = None
    seq: int = 0


class BacklogRecord(msgspec.Struct, kw_only=True):
    """A run's surplus over its ``maxJobs``, spilled to the next window: the continuation
    the planner will request for it (``continuation_id``), until it is requested."""

    run_id: str
    """The run that spilled it."""
    root_run_id: str
    """The first run of the chain (a continuation's surplus spills again)."""
    continuation_id: str
    offset: int
    """The image of the cause the continuation starts from."""
    spilled: int
    planned_ms: int
    requested: bool = False
    """The continuation is requested: no longer backlog (kept until it is planned, for its
    own surplus's chain)."""


class ExportRecord(msgspec.Struct, kw_only=True):
    """One recorded export per (tenant, source kind, export ref), as of its latest revision:
    what the webhook compares a delivery with (a repeat, or the next revision)."""

    export_id: str
    """As the sender named it (the key holds the ref, ``<source>:<exportId>``)."""
    kind: Literal["feedser", "vexer"]
    event_id: str
    """Of the latest revision's event."""
    seq: int
    """Its stream sequence: the subject's last, which the next revision expects."""
    payload_sha256: str
    """Its body's digest."""
    recorded_ms: int
    """When the first revision was recorded."""
    revision: int = 1


_enc = msgspec.msgpack.Encoder()
encode = _enc.encode
decode_schedule = msgspec.msgpack.Decoder(ScheduleRecord).decode
decode_run = msgspec.msgpack.Decoder(RunRecord).decode
decode_delta = msgspec.msgpack.Decoder(DeltaRecord).decode
decode_export = msgspec.msgpack.Decoder(ExportRecord).decode
decode_backlog = msgspec.msgpack.Decoder(BacklogRecord).decode
