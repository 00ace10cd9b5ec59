"""What the planner's projections store, and how it is keyed.

Records are msgpack (compact, fast) and are only ever written by folds; the reactors read
them, never write. Keys start with the tenant and a NUL so one tenant's keys form one range.
"""

from __future__ import annotations

import struct
from typing import Literal

import msgspec
from msgspec import UNSET, UnsetType

from streamproc.events import payloads as p
from streamproc.projections.cursor import CursorBase
from streamproc.projections.schedule import ScheduleBase

SEP = b"\x00"
Source = Literal["feedser", "vexer"]
RunState = Literal["requested", "planned", "cancelled"]
"""``cancelled``: cancelled before its plan was recorded; the planner then records an empty
plan, which lets the runner end the run ``cancelled`` (``planned`` from then on)."""
UNPLANNED: frozenset[str] = frozenset({"requested", "cancelled"})
"""The states of a run whose ``run.planned`` the planner has still to record."""

KEV = 1
CRITICAL = 2
"""Flag bits of a vuln (from Feedser advisories) and of an image's last report."""


def key(tenant: str, *parts: str) -> bytes:
    return SEP.join([tenant.encode(), *(x.encode() for x in parts)])


def split(k: bytes) -> list[str]:
    return [x.decode() for x in k.split(SEP)]


def physical_ms(hlc: str) -> int:
    """Wall-clock part of an HLC stamp: the event's own time, so folds stay pure."""
    return int(hlc.split(":", 1)[0])


class ScheduleView(ScheduleBase, kw_only=True):
    """A schedule as the planner needs it: the shared record (what to select, limits) and the
    cron anchor, which only the planner keeps (it folds ``run.requested`` for it); name,
    notify rule, authors and versions are the read model's business, not stored here."""

    active_since_ms: int = 0
    """Cron ticks at or before this are never fired: creation, resume, cron or zone change."""
    last_fired_ms: int | None = None
    """The latest cron tick (UTC ms) a ``run.requested`` was folded for."""

    @property
    def active(self) -> bool:
        return not (self.paused or self.deleted)


class EpssKeys(msgspec.Struct, array_like=True, frozen=True):
    """Product keys whose changed findings have this EPSS (score to three decimals)."""

    score: float
    percentile: float
    keys: list[str]


class ExportRecord(msgspec.Struct, kw_only=True):
    """One revision of an export of a tenant and source kind, with its change normalised to
    keys. The first revision's record is the export's head: it also holds the latest
    revision folded and what the export's claimed revisions covered."""

    export_id: str
    """Its ref, ``<source>:<exportId>`` (the bare id for exports recorded before refs)."""
    source: Source
    tenant: str
    ms: int
    """HLC ms that places it in a coalescing window: its own, or, for a revision that
    replaced a pending one, that one's (it takes its place)."""
    hlc: str
    event_id: str
    keys: list[str] = []
    kev_keys: list[str] = []
    critical_keys: list[str] = []
    kev_vulns: list[str] = []
    """KEV vuln ids, mapped to product keys through the index's vuln map at plan time."""
    epss: list[EpssKeys] | UnsetType = UNSET
    """The EPSS of the changed findings, by product key: the order of the work (left out of
    the record when there is none, so records of exports without EPSS keep their bytes)."""
    run_id: str | None = None
    """The run that claimed it (its ``run.requested`` was folded); None while pending."""
    released: bool = False
    """Planned completely: keys dropped, only the id is kept (so a re-delivery is ignored)."""
    revision: int = 1
    superseded: bool = False
    """A later revision arrived while this one was pending: that one is planned instead."""
    latest: int = 1
    """(Head only.) The latest revision folded."""
    covered: bytes = b""
    """(Head only.) What the export's claimed revisions named, as sorted 8-byte hashes of
    their keys and KEV vuln ids (:func:`~streamproc.planner.changes.coverage`): a later
    revision's follow-up run plans only what is not in it."""


class Cursor(CursorBase, kw_only=True):
    """The latest export of each source that a planned run covers (``impact_cursors``, as
    :mod:`streamproc.projections.cursor` folds it), and when each source's latest coalescing
    window opened."""

    feedser_window_ms: int | None = None
    """HLC ms of the latest ``run.requested`` that claimed Feedser exports: the exports
    stamped within the debounce after it coalesce into the next run (None: none yet)."""
    vexer_window_ms: int | None = None

    def window_ms(self, source: Source) -> int | None:
        return self.feedser_window_ms if source == "feedser" else self.vexer_window_ms


class RunRecord(msgspec.Struct, kw_only=True):
    """A requested run and whether it is planned: the marker that makes planning once-only."""

    run_id: str
    tenant: str
    event_id: str
    hlc: str
    ms: int
    state: RunState = "requested"
    request: p.RunRequested | None = None
    offset: int = 0
    """Images of the cause that earlier runs of the spill chain already queued."""
    root_run_id: str | None = None
    cause_ms: int = 0
    """The "now" its plan uses: this request's HLC ms, or its spill chain root's."""
    stats: p.RunStats | None = None
    planned_ms: int = 0
    segments: list[p.SegmentRef] = []
    """The plan's segment refs."""


class Backlog(msgspec.Struct, kw_only=True):
    """A run's surplus over ``maxJobs``, waiting to be planned as a continuation run."""

    run_id: str
    """The continuation's id: ``derive_id(root, "spill", offset)``."""
    tenant: str
    parent_run_id: str
    root_run_id: str
    request: p.RunRequested
    """The root request: the continuation plans the same cause from ``offset`` on."""
    offset: int
    spilled: int
    planned_ms: int
    cause_ms: int


_EPSS = struct.Struct(">ff")


def encode_vuln(flags: int, epss: p.Epss | None) -> bytes:
    """A vuln's record: its flag byte, then its EPSS score and percentile when known."""
    head = bytes([flags])
    return head if epss is None else head + _EPSS.pack(epss.score, epss.percentile)


def decode_vuln(raw: bytes | None) -> tuple[int, p.Epss | None]:
    if not raw:
        return 0, None
    if len(raw) < 1 + _EPSS.size:
        return raw[0], None
    score, percentile = _EPSS.unpack_from(raw, 1)
    return raw[0], p.Epss(score=round(score, 5), percentile=round(percentile, 5))


_enc = msgspec.msgpack.Encoder()
encode = _enc.encode
decode_schedule = msgspec.msgpack.Decoder(ScheduleView).decode
decode_export = msgspec.msgpack.Decoder(ExportRecord).decode
decode_cursor = msgspec.msgpack.Decoder(Cursor).decode
decode_run = msgspec.msgpack.Decoder(RunRecord).decode
decode_backlog = msgspec.msgpack.Decoder(Backlog).decode
decode_strs = msgspec.msgpack.Decoder(list[str]).decode
decode_findings = msgspec.msgpack.Decoder(list[tuple[str, int, bool]]).decode
