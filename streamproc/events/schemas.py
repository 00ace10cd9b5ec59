"""JSON Schemas for every event kind, generated from the same Structs that decode them.

``make schemas`` writes them into ``schemas/events/``; a test fails when the committed files
differ from what the code generates, so the published contract never drifts from the code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from streamproc.events.catalog import KINDS
from streamproc.events.envelope import Envelope

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
        "description": f"Subject: <prefix>.events.<tenant>.{spec.aggregate}.<{spec.id_field}>. "
        f"Emitted by: {spec.emitted_by}. Folded by: {spec.folded_by}.",
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
