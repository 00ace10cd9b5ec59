"""The Notify contract: the messages on ``SCHEDULER_NOTIFY`` and how they are identified.

Three kinds, one subject each per tenant: ``<prefix>.notify.<tenant>.rescan.delta`` (an
image's verdict got worse and matched the schedule's notify rule), ``….report.ready`` (an
image was re-evaluated and nothing notable changed), ``….run.summary`` (once per finished
run: per vulnerability, the images newly affected, KEV first). Every message carries ``id``,
which is also its ``Nats-Msg-Id``, derived from its cause (the verdict, or the run), so a
re-emission is dropped by JetStream and recognisable by consumers. JSON Schemas in
``schemas/notify/`` are generated from these Structs (``python -m streamproc.notify.schemas``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal, Protocol

import msgspec
from msgspec import Meta

from streamproc.ids import derive_id
from streamproc.names import notify_subject

SCHEMA_VERSION = 1
KINDS = ("rescan.delta", "report.ready", "run.summary")
Kind = Literal["rescan.delta", "report.ready", "run.summary"]
Count = Annotated[int, Meta(ge=0)]
Severity = Literal["low", "medium", "high", "critical"]


class Message(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True):
    """Base: every message says what it is, whose it is and which contract version."""

    id: str
    schema: int = SCHEMA_VERSION
    tenant: str
    run_id: str
    ts: str
    """RFC 3339 UTC time of the cause (the verdict's or the run's HLC physical time)."""


class Epss(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """FIRST's EPSS of a vulnerability: probability of exploitation in the next 30 days,
    its percentile among all scored CVEs, and the day the scores were computed."""

    score: float
    percentile: float
    date: str | None = None


class _HasEpss(Protocol):
    score: float
    percentile: float
    date: str | None


def epss_of(e: _HasEpss | None) -> Epss | None:
    return None if e is None else Epss(score=e.score, percentile=e.percentile, date=e.date)


class TopFinding(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True):
    purl: str
    vuln_id: str
    severity: Severity
    kev: bool = False
    link: str | None = None
    epss: Epss | None = None
    """Additional field: the vulnerability's EPSS, when the advisory data has it."""


class Attestation(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True):
    uuid: str
    verified: bool = False


class RescanDelta(Message, kw_only=True, tag="rescan.delta", tag_field="kind"):
    image_digest: str
    verdict_id: str
    schedule_ids: list[str] = []
    new_criticals: Count = 0
    new_high: Count = 0
    kev_hits: list[str] = []
    top_findings: list[TopFinding] = []
    report_url: str | None = None
    attestation: Attestation | None = None


class SeverityCounts(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    critical: Count = 0
    high: Count = 0
    medium: Count = 0
    low: Count = 0


class ReportReady(Message, kw_only=True, tag="report.ready", tag_field="kind"):
    image_digest: str
    verdict_id: str
    findings: SeverityCounts = msgspec.field(default_factory=SeverityCounts)
    new_findings: Count = 0
    """New findings below the notify rule's threshold (0 for a true no-change report)."""
    report_url: str | None = None


class VulnImages(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True):
    vuln_id: str
    severity: Severity
    kev: bool = False
    epss: Epss | None = None
    """Additional field: the vulnerability's EPSS (the highest of its findings')."""
    image_count: Count = 0
    images: list[str] = []
    truncated: bool = False


class RunTotals(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True):
    candidates: Count = 0
    completed: Count = 0
    failed: Count = 0
    cancelled: Count = 0
    deltas: Count = 0
    new_criticals: Count = 0
    resolved: Count = 0
    """Additional field: findings of the images' previous verdicts that a VEX claim now
    drops (``not_affected``, ``false_positive``, ``fixed``): resolved, no delta."""


class RunSummary(Message, kw_only=True, tag="run.summary", tag_field="kind"):
    state: Literal["completed", "cancelled", "error"]
    totals: RunTotals = msgspec.field(default_factory=RunTotals)
    vulnerabilities: list[VulnImages] = []
    """KEV first, then by EPSS (highest first), then by severity, then by the number of
    images."""


AnyMessage = RescanDelta | ReportReady | RunSummary
_encoder = msgspec.json.Encoder()
_decoder: msgspec.json.Decoder[AnyMessage] = msgspec.json.Decoder(AnyMessage)


def encode(msg: AnyMessage) -> bytes:
    return _encoder.encode(msg)


def decode(data: bytes) -> AnyMessage:
    return _decoder.decode(data)


def kind_of(msg: AnyMessage) -> str:
    return msg.__struct_config__.tag  # type: ignore[return-value]  # every message Struct is tagged with a str


def subject(prefix: str, tenant: str, kind: str) -> str:
    return notify_subject(prefix, tenant, kind)


def image_message_id(verdict_id: str) -> str:
    """Per-image messages (``rescan.delta`` or ``report.ready``) derive from the verdict."""
    return derive_id(verdict_id, "notify")


def summary_id(run_id: str) -> str:
    return derive_id(run_id, "summary")


_iso_second: list[tuple[int, str]] = [(0, "1970-01-01T00:00:00")]
"""The last second formatted (a run stamps thousands of messages within one)."""


def iso(ms: int) -> str:
    """``2026-12-06T21:28:01.123Z``: UTC, milliseconds."""
    second, milli = divmod(ms, 1000)
    last, text = _iso_second[0]
    if second != last:
        text = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        _iso_second[0] = (second, text)
    return f"{text}.{milli:03d}Z"
