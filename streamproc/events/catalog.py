"""The catalog: every event kind, its payload type, schema version, aggregate and upcasters.

One entry per kind, in one place. Subjects are ``<prefix>.events.<tenant>.<aggregate>.<id>``:
one subject per aggregate instance gives per-entity history and optimistic concurrency.
Exports are the exception: they arrive without end, and nats-server keeps every distinct
subject of a stream in memory, so the exports of a tenant and source kind share
:data:`~streamproc.names.EXPORT_SHARDS` subjects (``…<feedser|vexer>.s<NN>``; events recorded
before stay where they are). A VEX document's versions keep one subject per document
(``…vexer.<vex-documents/id>``): as many as the documents a tenant keeps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from streamproc.events import payloads as p
from streamproc.ids import shard_token, subject_token
from streamproc.names import EXPORT_SHARDS, event_subject

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class KindSpec:
    kind: str
    payload: type[p.Payload]
    aggregate: str
    id_field: str
    version: int = 1
    emitted_by: str = ""
    upcasters: dict[int, Upcaster] = field(default_factory=dict)
    """``upcasters[v]`` turns a version-``v`` payload dict into version ``v + 1``."""
    subject_field: str = ""
    """Where the subject's id comes from when not ``id_field`` (a VEX document's versions
    share one subject). A payload whose subject id is not its ``id_field`` keeps that subject
    to itself, also in a sharded kind: a tenant's VEX documents are as many as it keeps, not
    an endless stream, and each document's versions are recorded one after the other on it."""
    downcasters: dict[int, Upcaster] = field(default_factory=dict)
    """``downcasters[v]`` turns a version-``v + 1`` payload dict back into version ``v``:
    only for versions that renamed fields and nothing else (see ``chain_form``)."""
    shards: int = 0
    """Nonzero: the kind's events share this many subjects per tenant (by a hash of the
    aggregate id) instead of one per aggregate."""
    chain_form: int | None = None
    """The version whose form the audit chain hashes this kind's payloads in (None: the
    current one). A rename of payload fields must not change the link of any entry already
    chained — nor make the chain of a replayed log differ from the one that was signed —
    so an audit entry keeps the form its kind had when the rename came."""
    chain_omits: tuple[str, ...] = ()
    """Optional fields added to the payload after its kind was first chained (``findings[].x``:
    in each item of a list): the chain leaves each out while it is null, so the link of an
    entry chained before the field existed — and of its event replayed now — never changes."""

    def aggregate_id(self, payload: p.Payload) -> str:
        return str(getattr(payload, self.subject_field or self.id_field))

    def decoder(self) -> msgspec.json.Decoder[Any]:
        return _DECODERS[self.kind]


def _schedule_v1_to_v2(d: dict[str, Any]) -> dict[str, Any]:
    """Version 1 schedules (the original Scheduler's model) said whenCron/timezone."""
    d = dict(d)
    if "whenCron" in d:
        d["cron"] = d.pop("whenCron")
    return d


Rename = tuple[tuple[str, ...], str, str]
"""Where (the path of objects from the payload down), the old name, the new name."""

SCHEDULE_V3_RENAMES: tuple[Rename, ...] = (
    ((), "cron", "whenCron"),
    (("notify",), "includeKev", "includeKEV"),
)
"""Version 3 schedules take the specification's names (docs/conformance.md, §3): the cron
expression is ``whenCron`` and the notify rule's KEV switch ``includeKEV``."""


def renamed(
    d: dict[str, Any], renames: tuple[Rename, ...], *, back: bool = False
) -> dict[str, Any]:
    """``d`` with each rename applied (old → new; ``back``: new → old), copied on the way
    down so the caller's dict is never changed. A document that already has a field's
    other name is not of the version it says (``msgspec.ValidationError``)."""
    out = dict(d)
    for path, old, new in renames:
        src, dst = (new, old) if back else (old, new)
        node = out
        for name in path:
            child = node.get(name)
            if not isinstance(child, dict):
                break
            node[name] = node = dict(child)
        else:
            if dst in node:
                where = ".".join(("$", *path, dst))
                raise msgspec.ValidationError(
                    f"`{dst}` is not a field of this version - at `{where}`"
                )
            if src in node:
                node[dst] = node.pop(src)
    return out


def _schedule_v2_to_v3(d: dict[str, Any]) -> dict[str, Any]:
    return renamed(d, SCHEDULE_V3_RENAMES)


def _schedule_v3_to_v2(d: dict[str, Any]) -> dict[str, Any]:
    return renamed(d, SCHEDULE_V3_RENAMES, back=True)


def _first_revision(d: dict[str, Any]) -> dict[str, Any]:
    """Version 2 exports had no revisions: each is its export's first (``revision`` 1, the
    default)."""
    return d


def _unscoped_export(d: dict[str, Any]) -> dict[str, Any]:
    """Version 1 exports were not scoped by source: they stay without one (``source``
    absent), so they keep the subject and the keys they were recorded under — the bare
    export id — and replaying an old log rebuilds exactly the state it had."""
    return d


def _share_as_run_rate(d: dict[str, Any]) -> dict[str, Any]:
    """Version 1 segments recorded their shard's share of the run's rate and no tenant or
    registry bucket. Read as the run's rate, an old segment still in the queue runs
    slower than it was planned, never faster; it is paced by its run's bucket only."""
    return d


_GATEWAY = "gateway"
KINDS: dict[str, KindSpec] = {
    s.kind: s
    for s in [
        KindSpec(
            "schedule.created",
            p.ScheduleCreated,
            "schedule",
            "schedule_id",
            version=3,
            emitted_by=_GATEWAY,
            upcasters={1: _schedule_v1_to_v2, 2: _schedule_v2_to_v3},
            downcasters={2: _schedule_v3_to_v2},
            chain_form=2,
        ),
        KindSpec(
            "schedule.updated",
            p.ScheduleUpdated,
            "schedule",
            "schedule_id",
            version=3,
            emitted_by=_GATEWAY,
            upcasters={1: _schedule_v1_to_v2, 2: _schedule_v2_to_v3},
            downcasters={2: _schedule_v3_to_v2},
            chain_form=2,
        ),
        *[
            KindSpec(
                f"schedule.{verb}",
                p.ScheduleStateChange,
                "schedule",
                "schedule_id",
                emitted_by=_GATEWAY,
            )
            for verb in ("paused", "resumed", "deleted")
        ],
        KindSpec(
            "export.feedser",
            p.FeedserExport,
            "feedser",
            "ref",
            version=3,
            emitted_by="gateway (webhook), feedser CLI, feeds",
            upcasters={1: _unscoped_export, 2: _first_revision},
            shards=EXPORT_SHARDS,
        ),
        KindSpec(
            "export.vexer",
            p.VexerExport,
            "vexer",
            "ref",
            version=3,
            emitted_by="gateway (webhook, PUT /vex/{documentId}), vexer CLI",
            upcasters={1: _unscoped_export, 2: _first_revision},
            subject_field="subject_id",
            shards=EXPORT_SHARDS,
        ),
        KindSpec(
            "image.indexed",
            p.ImageIndexed,
            "image",
            "digest",
            emitted_by="index CLI, gateway (PUT/DELETE /images), scanners",
        ),
        KindSpec(
            "image.removed",
            p.ImageRemoved,
            "image",
            "digest",
            emitted_by="index CLI, gateway (PUT/DELETE /images), scanners",
        ),
        KindSpec(
            "sbom.deleted",
            p.SbomDeleted,
            "sbom",
            "sbom",
            emitted_by="planner (SBOM retention)",
        ),
        KindSpec(
            "run.requested",
            p.RunRequested,
            "run",
            "run_id",
            emitted_by="gateway, cron",
        ),
        KindSpec(
            "run.planned",
            p.RunPlanned,
            "run",
            "run_id",
            emitted_by="planner",
        ),
        KindSpec(
            "run.cancel_requested",
            p.RunCancelRequested,
            "run",
            "run_id",
            emitted_by=_GATEWAY,
        ),
        KindSpec(
            "run.cancelled",
            p.RunCancelled,
            "run",
            "run_id",
            emitted_by="runner",
        ),
        KindSpec(
            "run.completed",
            p.RunCompleted,
            "run",
            "run_id",
            emitted_by="runner",
        ),
        KindSpec(
            "segment.enqueued",
            p.SegmentEnqueued,
            "segment",
            "segment_id",
            version=2,
            upcasters={1: _share_as_run_rate},
            emitted_by="planner",
        ),
        KindSpec(
            "segment.started",
            p.SegmentStarted,
            "segment",
            "segment_id",
            emitted_by="runner",
        ),
        KindSpec(
            "segment.completed",
            p.SegmentCompleted,
            "segment",
            "segment_id",
            emitted_by="runner",
        ),
        KindSpec(
            "segment.failed",
            p.SegmentFailed,
            "segment",
            "segment_id",
            emitted_by="runner, planner (segments a crash lost)",
        ),
        KindSpec(
            "verdict.recorded",
            p.VerdictRecorded,
            "verdict",
            "digest",
            emitted_by="runner",
            chain_omits=(
                "policyVerdict",
                "revision",
                "policyRevision",
                "scanner",
                "findings[].fixedVersion",
                "topFindings[].fixedVersion",
            ),
        ),
        KindSpec(
            "delta.acknowledged",
            p.DeltaAcknowledged,
            "delta",
            "run_id",
            emitted_by="gateway (PUT /runs/{id}/deltas/{digest}/acknowledgement)",
        ),
        KindSpec(
            "audit.snapshot",
            p.AuditSnapshot,
            "chain",
            "to_chain_link",
            emitted_by="auditor",
        ),
    ]
}

_DECODERS: dict[str, msgspec.json.Decoder[Any]] = {
    k: msgspec.json.Decoder(s.payload) for k, s in KINDS.items()
}


def spec_for(kind: str) -> KindSpec | None:
    return KINDS.get(kind)


def subject_for(prefix: str, tenant: str, kind: str, payload: p.Payload) -> str:
    spec = KINDS[kind]
    ident = spec.aggregate_id(payload)
    own = spec.subject_field and ident != str(getattr(payload, spec.id_field))
    token = shard_token(ident, spec.shards) if spec.shards and not own else subject_token(ident)
    return event_subject(prefix, tenant, spec.aggregate, token)


def aggregate_subject(prefix: str, tenant: str, aggregate: str, aggregate_id: str) -> str:
    """The subject of one aggregate instance with a subject of its own (a run, a schedule,
    a VEX document's versions; not a sharded export)."""
    return event_subject(prefix, tenant, aggregate, subject_token(aggregate_id))
