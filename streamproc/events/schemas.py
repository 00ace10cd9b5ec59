"""JSON Schemas for every event kind, generated from the same Structs that decode them.

``make schemas`` writes them into ``schemas/events/``; a test fails when the committed files
differ from what the code generates, so the published contract never drifts from the code.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import msgspec

from streamproc.events.catalog import KINDS
from streamproc.events.envelope import Envelope
from streamproc.events.filters import aggregates_of, filter_subjects
from streamproc.names import EVENTS

DIALECT = "https://json-schema.org/draft/2020-12/schema"


def schema_for(kind: str) -> dict[str, Any]:
    spec = KINDS[kind]
    (env_ref, payload_ref), defs = msgspec.json.schema_components(
        [Envelope, spec.payload], ref_template="#/$defs/{name}"
    )
    envelope = defs.pop(env_ref["$ref"].rsplit("/", 1)[1])
    props = dict(envelope["properties"])
    props["kind"] = {"const": kind}
    props["schema"] = {
        "type": "integer",
        "minimum": 1,
        "maximum": spec.version,
        "description": f"payload schema version; {spec.version} is current, older ones are "
        "upcast on read",
    }
    props["payload"] = payload_ref
    return {
        "$schema": DIALECT,
        "$id": f"urn:streamproc:event:{kind}:v{spec.version}",
        "title": kind,
        "description": f"Subject: <prefix>.{EVENTS}.<tenant>.{spec.aggregate}."
        f"<{spec.subject_field or spec.id_field}>. "
        f"Emitted by: {spec.emitted_by}.",
        "type": "object",
        "properties": props,
        "required": envelope["required"],
        "$defs": defs,
    }


def render(kind: str) -> str:
    return json.dumps(schema_for(kind), indent=2, sort_keys=True) + "\n"


def write_all(out: Path) -> list[Path]:
    events_dir = out / "events"
    events_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for kind in sorted(KINDS):
        path = events_dir / f"{kind}.json"
        path.write_text(render(kind))
        written.append(path)
    for stale in events_dir.glob("*.json"):
        if stale not in written:
            stale.unlink()
    return written


def _type_name(prop: dict[str, Any]) -> str:
    if "$ref" in prop:
        return str(prop["$ref"].rsplit("/", 1)[1])
    if "anyOf" in prop:
        return " or ".join(_type_name(a) for a in prop["anyOf"])
    if "enum" in prop:
        return " or ".join(f"`{v}`" for v in prop["enum"])
    t = str(prop.get("type", "any"))
    if t == "array" and "items" in prop:
        return f"array of {_type_name(prop['items'])}"
    if t == "object" and "additionalProperties" in prop:
        return f"map of {_type_name(prop['additionalProperties'])}"
    return t


def _fields(kind: str) -> list[tuple[str, str, bool]]:
    schema = schema_for(kind)
    payload = schema["$defs"][schema["properties"]["payload"]["$ref"].rsplit("/", 1)[1]]
    required = set(payload.get("required", []))
    return [(n, _type_name(p), n in required) for n, p in payload["properties"].items()]


CATALOG_HEADER = """# Event catalog

Generated from `streamproc/events/` by `make schemas`; a test fails when this file or the
JSON Schemas in `schemas/events/` differ from the code. Do not edit by hand.

Every event is one JSON envelope (camelCase on the wire) on the `SCHEDULER` stream:

| field | meaning |
|---|---|
| `id` | derived from the cause (`derive_id`) or a UUIDv7; also the `Nats-Msg-Id` |
| `kind` | one of the kinds below |
| `tenant` | `[a-z0-9_-]{1,128}`; there is no default tenant |
| `hlc` | hybrid logical clock timestamp `{physical_ms}:{logical}:{node}` of the emitter |
| `schema` | payload schema version; newer than this build is refused, older is upcast on read |
| `causationId`, `correlationId` | the event that caused it; the request or run it is part of |
| `payload` | the kind's payload, below; unknown fields are refused |

Subject: `<prefix>.events.<tenant>.<aggregate>.<aggregate id>` (default prefix `scheduler`);
ids that are not safe as a subject token are replaced by `h-` and 32 hex digits of their
SHA-256. Each role's projector consumes only the subjects of the aggregates of the kinds its
projections fold ([below](#what-each-role-receives)). A message that does not decode or
validate is quarantined with its reason (`malformed_json`, `invalid_envelope`, `unknown_kind`,
`unsupported_schema_version`, `invalid_payload`) by every projector that receives it — the
roles that fold a kind of the aggregate its subject names; on a subject of no aggregate in
the catalog, only a role that folds every kind (`activity`) — and folding goes on; so is an
event on a subject other than its own tenant's and aggregate's (`wrong_subject`), since NATS
permissions confine producers by subject.

The roles in the last column are computed from their projections' folds.

| kind | version | aggregate (subject token) | emitted by | folded by |
|---|---|---|---|---|
"""


RECEIVES_HEADER = """
## What each role receives

Each role's projector consumer filters the log to the subjects of the aggregates its
projections' kinds are on (`streamproc/events/filters.py`, computed from the folds; JetStream
consumers with several filter subjects, nats-server 2.10 and later). Kinds that share an
aggregate share its subjects: those in the last column reach the role, are decoded and
checked (and quarantined when malformed), and no projection of it folds them. A role that
folds a kind of every aggregate takes the whole log.

| role | filter subjects | received, not folded |
|---|---|---|
"""


FOLDS_HEADER = """
## Which events create

Updates never create ([conformance](conformance.md#every-message-kind-handled)). Per
projection, the kinds that may bring a new entity into it, the kinds that update an entity
that must exist — for an unknown run, segment, schedule or image the event is rejected with
a named reason (`unknown_run`, `unknown_segment`, `unknown_schedule`, `image_not_indexed`,
…) — and the kinds it only observes (never creating, never rejected). Each projection
declares this (`creates`, `observes`); a test folds every update kind for an unknown entity
into every projection.

A rejection is recorded with its reason in the same batch, logged once at warning with the
event id, counted in `streamproc_rejected_events_total{projection,reason}` and shown by
`streamproc status`; it does not count as applied (`streamproc_projector_events_total`
with `result="rejected"`).

| role | projection | creates | updates (rejected when unknown) | observes |
|---|---|---|---|---|
"""


def _kinds(kinds: frozenset[str]) -> str:
    return ", ".join(f"`{k}`" for k in sorted(kinds)) or "—"


class Fold(Protocol):
    """What the table needs of a projection (:class:`streamproc.runtime.projection.Projection`)."""

    @property
    def name(self) -> str: ...
    @property
    def kinds(self) -> frozenset[str]: ...
    @property
    def creates(self) -> frozenset[str]: ...
    @property
    def observes(self) -> frozenset[str]: ...

    def updates(self) -> frozenset[str]: ...


def render_folds(folds: Mapping[str, Sequence[Fold]]) -> list[str]:
    """The creates/updates/observes table of every registered projection, by role (the
    roles sit above events in the layer order, so the caller hands them in)."""
    lines = [FOLDS_HEADER.strip("\n")]
    for role, projections in folds.items():
        for proj in projections:
            every = proj.kinds == frozenset(KINDS)
            lines.append(
                f"| {role} | `{proj.name}` | "
                + ("every kind" if every else _kinds(proj.creates))
                + f" | {_kinds(proj.updates())} | {_kinds(proj.observes)} |"
            )
    return lines


def folded_by(kind: str, folds: Mapping[str, Sequence[Fold]]) -> str:
    """The roles whose projections fold ``kind``, each with those projections."""
    return ", ".join(
        f"{role} ({', '.join(f'`{p.name}`' for p in names)})"
        for role, projections in folds.items()
        if (names := [p for p in projections if kind in p.kinds])
    )


def render_receives(folds: Mapping[str, Sequence[Fold]]) -> list[str]:
    """Each role's consumer filter and the kinds it receives without folding them."""
    lines = [RECEIVES_HEADER.strip("\n")]
    for role, projections in folds.items():
        kinds = frozenset(k for p in projections for k in p.kinds)
        if not kinds:
            continue
        subjects = ", ".join(f"`{f}`" for f in filter_subjects("<prefix>", kinds))
        aggregates = aggregates_of(kinds)
        extra = frozenset(k for k, s in KINDS.items() if s.aggregate in aggregates) - kinds
        lines.append(f"| {role} | {subjects} | {_kinds(extra)} |")
    return lines


def render_catalog(folds: Mapping[str, Sequence[Fold]]) -> str:
    lines = [CATALOG_HEADER.rstrip("\n")]
    for kind in sorted(KINDS):
        s = KINDS[kind]
        lines.append(
            f"| [`{kind}`](#{kind.replace('.', '')}) | {s.version} | "
            f"`{s.aggregate}` (`{s.subject_field or s.id_field}`) | {s.emitted_by} | "
            f"{folded_by(kind, folds) or '—'} |"
        )
    for kind in sorted(KINDS):
        s = KINDS[kind]
        lines += [
            "",
            f"## {kind}",
            "",
            f"Payload `{s.payload.__name__}` — JSON Schema `schemas/events/{kind}.json`.",
        ]
        if s.upcasters:
            lines.append(f"Upcast on read from versions {sorted(s.upcasters)}.")
        if s.chain_form is not None:
            lines.append(
                f"The audit chain hashes it in its schema-{s.chain_form} form (field names "
                f"of that version), so no link made before a rename changes."
            )
        if s.chain_omits:
            names = ", ".join(f"`{f}`" for f in s.chain_omits)
            lines.append(
                f"The audit chain leaves out {names} while null: fields added after the kind "
                "was first chained, so no link made before them changes."
            )
        lines += ["", "| field | type | required |", "|---|---|---|"]
        for name, t, req in _fields(kind):
            lines.append(f"| `{name}` | {t} | {'yes' if req else ''} |")
    lines += ["", *render_receives(folds), "", *render_folds(folds)]
    return "\n".join(lines) + "\n"
