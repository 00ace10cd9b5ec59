"""The event envelope and its codec: encode and decode happen here, at the edges only.

Decoding is two-step: the envelope with a raw payload, then the payload by its kind. That is
where unknown kinds, newer schema versions and invalid payloads are refused with a named
reason, and where older versions are upcast on read (the log itself is never rewritten).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import Meta

from streamproc.events.catalog import KINDS
from streamproc.events.payloads import Payload
from streamproc.hlc import HLC_PATTERN, Timestamp
from streamproc.ids import TENANT_RE, uuid7, validate_tenant

_ID = Annotated[str, Meta(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:\-]+(?!\n)$")]
_TENANT = Annotated[str, Meta(pattern=TENANT_RE.pattern)]
_HLC = Annotated[str, Meta(pattern=HLC_PATTERN)]
_KIND = Annotated[str, Meta(min_length=1, max_length=64)]


class Envelope(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One immutable event. ``id`` is deterministic (derived from the cause) or a UUIDv7."""

    id: _ID
    kind: _KIND
    tenant: _TENANT
    hlc: _HLC
    schema: Annotated[int, Meta(ge=1)]
    causation_id: _ID | None = None
    correlation_id: _ID | None = None
    payload: Any

    @property
    def timestamp(self) -> Timestamp:
        return Timestamp.parse(self.hlc)


class _Wire(Envelope, frozen=True, kw_only=True, rename="camel"):
    """The same envelope with its payload left undecoded until the kind is known."""

    payload: msgspec.Raw


class EventError(ValueError):
    """An event that cannot be applied; ``reason`` is a stable, named code."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}")


_wire_decoder = msgspec.json.Decoder(_Wire)
_encoder = msgspec.json.Encoder()


def encode(event: Envelope) -> bytes:
    return _encoder.encode(event)


def decode(data: bytes) -> Envelope:
    """Decode and validate one event, or raise :class:`EventError` with a named reason."""
    try:
        w = _wire_decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise EventError("invalid_envelope", str(exc)) from None
    except msgspec.DecodeError as exc:
        raise EventError("malformed_json", str(exc)) from None
    spec = KINDS.get(w.kind)
    if spec is None:
        raise EventError("unknown_kind", f"event kind {w.kind!r} is not in the catalog")
    if w.schema > spec.version:
        raise EventError(
            "unsupported_schema_version",
            f"{w.kind} schema {w.schema} is newer than this build's {spec.version}",
        )
    try:
        if w.schema == spec.version:
            payload = spec.decoder().decode(w.payload)
        else:
            doc = msgspec.json.decode(w.payload)
            if not isinstance(doc, dict):
                raise EventError("invalid_payload", f"{w.kind} payload is not an object")
            for version in range(w.schema, spec.version):
                upcast = spec.upcasters.get(version)
                if upcast is None:
                    raise EventError(
                        "unsupported_schema_version",
                        f"no upcaster for {w.kind} schema {version}",
                    )
                doc = upcast(doc)
            payload = msgspec.convert(doc, spec.payload)
    except msgspec.ValidationError as exc:
        raise EventError("invalid_payload", f"{w.kind}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise EventError("malformed_json", f"{w.kind} payload: {exc}") from None
    if w.schema != spec.version:
        w = msgspec.structs.replace(w, schema=spec.version)
    msgspec.structs.force_setattr(w, "payload", payload)
    return w


def new_event(
    kind: str,
    tenant: str,
    payload: Payload,
    hlc: Timestamp | str,
    *,
    event_id: str | None = None,
    causation_id: str | None = None,
    correlation_id: str | None = None,
) -> Envelope:
    """Build an event of the current schema version, checking kind, tenant and payload type."""
    spec = KINDS.get(kind)
    if spec is None:
        raise EventError("unknown_kind", f"event kind {kind!r} is not in the catalog")
    if not isinstance(payload, spec.payload):
        raise EventError(
            "invalid_payload", f"{kind} takes {spec.payload.__name__}, not {type(payload).__name__}"
        )
    validate_tenant(tenant)
    eid = event_id or uuid7()
    return Envelope(
        id=eid,
        kind=kind,
        tenant=tenant,
        hlc=str(hlc),
        schema=spec.version,
        causation_id=causation_id,
        correlation_id=correlation_id or eid,
        payload=payload,
    )
