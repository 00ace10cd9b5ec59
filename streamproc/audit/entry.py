"""What one audit entry is: which events become entries, their action, and their digests.

The published chain link concatenates its fields without separators, so characters can move
between neighbouring fields (``t_hlc`` ends in a variable-length node id; ``job_id`` and
``action`` vary too) without changing the link. The link formula stays as published; the hole
is closed by the payload digest, which binds every field *length-prefixed* together with the
event's id, kind and canonical payload. Verification recomputes that digest from the stored
fields, so any shifted character changes it (see docs/audit.md).
"""

from __future__ import annotations

import hashlib
import struct
from typing import Any, Final

import msgspec

from streamproc.audit.chain import GENESIS
from streamproc.events import payloads as p
from streamproc.events.catalog import KINDS
from streamproc.events.envelope import Envelope

ENQUEUE: Final = "ENQUEUE"
DEQUEUE: Final = "DEQUEUE"
EXECUTE: Final = "EXECUTE"
COMPLETE: Final = "COMPLETE"
FAIL: Final = "FAIL"

SNAPSHOT_KIND: Final = "audit.snapshot"

LIFECYCLE: Final[dict[str, str]] = {
    "run.requested": ENQUEUE,
    "run.planned": DEQUEUE,
    "run.completed": COMPLETE,  # FAIL when its state is "error"
    "segment.enqueued": ENQUEUE,
    "segment.started": DEQUEUE,
    "verdict.recorded": EXECUTE,  # FAIL when its status is "failed"
    "segment.completed": COMPLETE,
    "segment.failed": FAIL,
}
"""Job-lifecycle kinds and their action; the job is the event's aggregate (run, segment, image)."""

CONTROL_PLANE: Final[frozenset[str]] = frozenset(
    {
        "schedule.created",
        "schedule.updated",
        "schedule.paused",
        "schedule.resumed",
        "schedule.deleted",
        "run.cancel_requested",
        "run.cancelled",
        "delta.acknowledged",
    }
)
"""Control-plane kinds: their action is the event kind itself."""

CHAINED_KINDS: Final[frozenset[str]] = frozenset(LIFECYCLE) | CONTROL_PLANE
"""Every kind that becomes a chain entry. ``image.*``, ``sbom.*`` and ``export.*`` do not; an
``audit.snapshot`` is recorded as a snapshot, never as an entry."""

PAYLOAD_DIGEST_DOMAIN: Final = b"streamproc.audit.entry.v1"

_canonical = msgspec.json.Encoder(order="sorted")


def action_for(event: Envelope) -> str:
    """The entry action of a chained event (KeyError for kinds that are not chained)."""
    kind = event.kind
    if kind in CONTROL_PLANE:
        return kind
    action = LIFECYCLE[kind]
    payload = event.payload
    if (
        kind == "run.completed"
        and isinstance(payload, p.RunCompleted)
        and payload.state != ("completed")
    ):
        return FAIL
    if (
        kind == "verdict.recorded"
        and isinstance(payload, p.VerdictRecorded)
        and (payload.status == "failed")
    ):
        return FAIL
    return action


_lengths = struct.Struct(">6I").pack
_sha256 = hashlib.sha256


def payload_digest(
    t_hlc: str, job_id: str, action: str, event_id: str, kind: str, payload: bytes
) -> str:
    """Lower-case hex SHA-256 of ``streamproc.audit.entry.v1``, then the UTF-8 byte lengths
    of the six fields as big-endian u32s, then the six fields' bytes, in this order:
    t_hlc, job_id, action, event_id, kind, payload (see docs/audit.md)."""
    t, j, a = t_hlc.encode(), job_id.encode(), action.encode()
    i, k = event_id.encode(), kind.encode()
    head = _lengths(len(t), len(j), len(a), len(i), len(k), len(payload))
    return _sha256(b"".join((PAYLOAD_DIGEST_DOMAIN, head, t, j, a, i, k, payload))).hexdigest()


def link_of(t_hlc: str, job_id: str, action: str, prev: str | None, digest: str) -> str:
    """The published link formula (same as :func:`streamproc.audit.chain.chain_link`)."""
    return _sha256((t_hlc + job_id + action + (prev or GENESIS) + digest).encode()).hexdigest()


class Entry(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """One stored entry: a JSON array in this field order.

    The first seven fields are :class:`streamproc.audit.chain.ChainEntry`'s; the last three
    are what the payload digest is recomputed from (``payload`` is the canonical JSON text).
    """

    position: int
    t_hlc: str
    job_id: str
    action: str
    payload_digest: str
    prev_chain_link: str | None
    chain_link: str
    event_id: str
    kind: str
    payload: str

    def recompute_digest(self) -> str:
        return payload_digest(
            self.t_hlc, self.job_id, self.action, self.event_id, self.kind, self.payload.encode()
        )

    def recompute_link(self, prev: str | None) -> str:
        return link_of(self.t_hlc, self.job_id, self.action, prev, self.payload_digest)


entry_encoder = msgspec.json.Encoder()
entry_decoder = msgspec.json.Decoder(Entry)


_ID_FIELD: Final[dict[str, str]] = {k: KINDS[k].id_field for k in CHAINED_KINDS}
_STATIC_ACTION: Final[dict[str, str]] = {
    k: a
    for k, a in {**LIFECYCLE, **{c: c for c in CONTROL_PLANE}}.items()
    if k not in ("run.completed", "verdict.recorded")
}


def chain_payload(event: Envelope) -> object:
    """The payload as the chain hashes it: in its kind's ``chain_form`` (an older schema's
    names), and without the fields added since while they are null (``chain_omits``), so a
    renamed or added field never changes a link — of an entry chained before it, when a log
    is replayed or a bundle's chain head checked, or of one chained after it."""
    spec = KINDS[event.kind]
    form = spec.chain_form
    renamed = form is not None and form != spec.version
    if not renamed and not spec.chain_omits:
        return event.payload
    doc = msgspec.to_builtins(event.payload)
    if renamed:
        assert form is not None
        for version in range(spec.version - 1, form - 1, -1):
            doc = spec.downcasters[version](doc)
    for path in spec.chain_omits:
        _omit_null(doc, path)
    return doc


def _omit_null(doc: dict[str, Any], path: str) -> None:
    """Drop the field ``path`` names (``a``, or ``list[].a`` in each item) where it is null:
    a field added after its kind was first chained is not in the form old entries hashed."""
    head, dot, rest = path.partition("[].")
    if not dot:
        if doc.get(path, 0) is None:
            del doc[path]
        return
    for item in doc.get(head) or ():
        if isinstance(item, dict):
            _omit_null(item, rest)


def make_entry(event: Envelope, position: int, prev: str | None) -> Entry:
    """The entry a chained event becomes at ``position`` after ``prev`` (None: genesis)."""
    kind = event.kind
    t_hlc = event.hlc
    job_id = str(getattr(event.payload, _ID_FIELD[kind]))
    action = _STATIC_ACTION.get(kind) or action_for(event)
    payload = _canonical.encode(chain_payload(event))
    digest = payload_digest(t_hlc, job_id, action, event.id, kind, payload)
    link = _sha256((t_hlc + job_id + action + (prev or GENESIS) + digest).encode()).hexdigest()
    return Entry(
        position, t_hlc, job_id, action, digest, prev, link, event.id, kind, payload.decode()
    )
