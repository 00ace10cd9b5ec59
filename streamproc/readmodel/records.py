"""Stored records of the read model (msgpack via msgspec); the API renders views of them."""

from __future__ import annotations

from typing import Literal, get_args

import msgspec

from streamproc.events.payloads import (
    Coverage,
    Finding,
    Mode,
    NotifyRule,
    RunStats,
    Selection,
    Trigger,
)
from streamproc.projections.cursor import CursorBase, Source
from streamproc.projections.schedule import ScheduleBase

RunState = Literal["planning", "queued", "running", "completed", "error", "cancelled"]
"""A run's state, exactly the specification's six (docs/conformance.md, §3): ``planning``
until its plan is recorded, ``queued`` once planned (or a segment is enqueued), ``running``
from its first started segment, then one of the three final states."""
RUN_STATES: tuple[str, ...] = get_args(RunState)
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


class ExportItem(msgspec.Struct, array_like=True):
    """One export a run covers (``rm_run_exports``): its source kind, its ref
    (``<source>:<exportId>``), the id as its sender named it, when it was recorded (HLC
    ms; None for an export this view never recorded), and the revision the run plans."""

    kind: Source
    ref: str
    export_id: str
    ms: int | None = None
    revision: int = 1


def sort_key(x: ExportItem) -> tuple[bool, int, str]:
    """A run's exports in the order they were recorded (unknown ones last), then by ref."""
    return (x.ms is None, x.ms or 0, x.ref)


class ReasonRecord(msgspec.Struct, kw_only=True):
    """A run's reason as this view keeps it: bounded, whatever the number of exports the run
    covers (they are in ``rm_run_exports``, one key each)."""

    text: str | None = None
    scheduled_for: str | None = None
    export_count: int = 0
    exports: list[str] = []
    """The refs of the first exports (``EXPORTS_SHOWN``), in the run's order."""
    feedser_export_id: str | None = None
    """The first Feedser export, as its sender named it."""
    vexer_export_id: str | None = None
    latest: dict[str, ExportItem] = {}
    """Per source kind, the export recorded last: where a planned run moves the cursor."""
    revisions: dict[str, int] = {}
    """Of ``exports``, those the run plans at a revision past the first (a follow-up)."""

    @property
    def cursor(self) -> str | None:
        """The exportId this run moves its tenant's impact cursor to once planned."""
        items = self.latest.values()
        return max(items, key=sort_key).export_id if items else None


class RunRecord(msgspec.Struct, kw_only=True):
    id: str
    tenant: str
    trigger: Trigger
    state: RunState = "planning"
    planned: bool = False
    """Its ``run.planned`` is folded (a second one is ``invalid_transition``)."""
    schedule_id: str | None = None
    schedule_ids: list[str] = []
    mode: Mode = "analysis-only"
    selection: Selection | None = None
    reason: ReasonRecord = msgspec.field(default_factory=ReasonRecord)
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


class CursorRecord(CursorBase, kw_only=True):
    """A tenant's ``impact_cursors`` document: the shared cursor (refs and times), each
    source's exportId as its sender named it, and when a run last moved it."""

    feedser_export_id: str | None = None
    vexer_export_id: str | None = None
    updated_ms: int | None = None


_enc = msgspec.msgpack.Encoder()
encode = _enc.encode
decode_schedule = msgspec.msgpack.Decoder(ScheduleRecord).decode
decode_run = msgspec.msgpack.Decoder(RunRecord).decode
decode_delta = msgspec.msgpack.Decoder(DeltaRecord).decode
decode_export = msgspec.msgpack.Decoder(ExportRecord).decode
decode_backlog = msgspec.msgpack.Decoder(BacklogRecord).decode
decode_export_item = msgspec.msgpack.Decoder(ExportItem).decode
decode_cursor = msgspec.msgpack.Decoder(CursorRecord).decode
