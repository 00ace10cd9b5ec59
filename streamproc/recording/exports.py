"""Recording an export for a list of tenants: what an accepted Feedser or Vexer webhook
delivery does once authenticated and decoded, and what the ``feeds`` role does with the
exports it builds — one path, so revisions, duplicates, cursors and the audit chain treat
both alike.

Per tenant, the export's latest revision in the log decides: none yet, revision 1; the same
body, a duplicate; another body, the next revision (id ``derive_id(source, exportId, tenant,
"revision", n)``). Tenants are appended all at once, shielded when there are several, so a
cancelled caller cannot stop between them; a payload is encoded once per revision however
many tenants share it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import msgspec

from streamproc.events.catalog import subject_for
from streamproc.events.envelope import encode, new_event
from streamproc.events.payloads import (
    FeedserExportBody,
    VexerExportBody,
    export_ref,
    sourced_export,
)
from streamproc.hlc import HybridLogicalClock
from streamproc.ids import derive_id
from streamproc.readmodel.exports import payload_digest
from streamproc.readmodel.records import ExportRecord
from streamproc.recording.exportlog import Append, ExportLog, Recorded

Body = FeedserExportBody | VexerExportBody
Lookup = Callable[[str, str, str], ExportRecord | None]
"""``(tenant, kind, key)`` → the folded record of the export (key: its ref, or the bare
export id of an export recorded before refs)."""


@dataclass(frozen=True)
class Recorder:
    """What recording needs of its process: the export log, the folded export records it
    answers from, the clock that stamps events and the subject prefix."""

    exports: ExportLog
    lookup: Lookup
    clock: HybridLogicalClock
    prefix: str


@dataclass(frozen=True)
class Outcome:
    """One tenant's outcome: the export as recorded, and whether it was appended now (False:
    a duplicate of its latest revision)."""

    tenant: str
    rec: Recorded
    recorded: bool


class NotRecorded(Exception):
    """An append failed (the first failure is ``cause``); tenants already stored are found on
    a retry (by the ref)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _own_legacy(
    lookup: Lookup, tenant: str, kind: str, export_id: str, event_id: str
) -> ExportRecord | None:
    """This source's record of the export from before refs (keyed by the bare id), if any:
    the event id, derived from the source, tells it from another source's."""
    rec = lookup(tenant, kind, export_id)
    return rec if rec is not None and rec.event_id == event_id else None


def _recorded(rec: ExportRecord) -> Recorded:
    return Recorded(rec.event_id, rec.seq, rec.payload_sha256, rec.revision)


def revision_event_id(source: str, export_id: str, tenant: str, revision: int) -> str:
    """The first revision keeps the id exports always had; later ones add their number."""
    if revision == 1:
        return derive_id(source, export_id, tenant)
    return derive_id(source, export_id, tenant, "revision", revision)


async def record(
    r: Recorder,
    source: str,
    kind: str,
    body: Body,
    tenants: list[str],
    correlation_id: str | None,
) -> list[Outcome]:
    """Record ``body`` of ``source`` for ``tenants``: each tenant's outcome, in order. Raises
    :class:`NotRecorded` when an append failed."""
    export_id = body.export_id
    ref = export_ref(source, export_id)
    digest = payload_digest(body)
    settled: dict[str, Outcome] = {}
    legacy: set[str] = set()
    """Tenants whose export was recorded before refs existed, with another body."""
    pending: list[str] = []
    for tenant in tenants:
        first_id = revision_event_id(source, export_id, tenant, 1)
        current = r.lookup(tenant, kind, ref)
        known = current or _own_legacy(r.lookup, tenant, kind, export_id, first_id)
        if known is not None and known.payload_sha256 == digest:
            settled[tenant] = Outcome(tenant, _recorded(known), recorded=False)
            continue
        if current is None and known is not None:
            legacy.add(tenant)
        pending.append(tenant)
    raws: dict[int, msgspec.Raw] = {}
    first = sourced_export(body, source, 1)
    """Names the export's shard subject (the same for every revision)."""

    def decide(tenant: str, latest: Recorded | None) -> Append | Recorded:
        if latest is not None and latest.digest == digest:
            return latest  # a repeat of the latest revision
        n = 1 if latest is None else latest.revision + 1
        if n == 1 and tenant in legacy:  # the old event has the first revision's id
            event_id = derive_id(source, export_id, tenant, "ref")
        else:
            event_id = revision_event_id(source, export_id, tenant, n)
        payload = first if n == 1 else sourced_export(body, source, n)
        event = new_event(
            f"export.{kind}",
            tenant,
            payload,
            r.clock.now(),
            event_id=event_id,
            correlation_id=correlation_id,
        )
        if n not in raws:
            raws[n] = msgspec.Raw(msgspec.json.encode(payload))
        return Append(encode(msgspec.structs.replace(event, payload=raws[n])), event_id, digest, n)

    def append(tenant: str) -> Awaitable[tuple[Recorded, bool]]:
        def lookup() -> Recorded | None:
            rec = r.lookup(tenant, kind, ref)
            return None if rec is None else _recorded(rec)

        return r.exports.append(
            subject_for(r.prefix, tenant, f"export.{kind}", first),
            (tenant, kind, ref),
            lookup,
            lambda latest: decide(tenant, latest),
        )

    outs: list[tuple[Recorded, bool] | BaseException]
    if len(pending) == 1:
        try:
            outs = [await append(pending[0])]
        except Exception as exc:
            outs = [exc]
    else:
        sends = [append(t) for t in pending]
        outs = list(await asyncio.shield(asyncio.gather(*sends, return_exceptions=True)))
    failure: BaseException | None = None
    for tenant, out in zip(pending, outs, strict=True):
        if isinstance(out, BaseException):
            failure = failure or out
            continue
        rec, appended = out
        settled[tenant] = Outcome(tenant, rec, recorded=appended)
    if failure is not None:
        raise NotRecorded(failure)
    return [settled[t] for t in tenants]
