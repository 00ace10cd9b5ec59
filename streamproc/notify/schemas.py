"""JSON Schemas of the Notify messages, generated from the Structs that encode them.

``python -m streamproc.notify.schemas --out schemas/notify`` (part of ``make schemas``)
writes one file per kind plus the HTTP feed's page; a test fails when the committed files
differ from what the code generates.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import msgspec

from streamproc.notify import messages as nm
from streamproc.notify.feed_http import CheckpointAnswer, FeedPage

DIALECT = "https://json-schema.org/draft/2020-12/schema"
TYPES: dict[str, tuple[Any, str]] = {
    "rescan.delta": (nm.RescanDelta, "<prefix>.notify.<tenant>.rescan.delta"),
    "report.ready": (nm.ReportReady, "<prefix>.notify.<tenant>.report.ready"),
    "run.summary": (nm.RunSummary, "<prefix>.notify.<tenant>.run.summary"),
    "feed.page": (FeedPage[nm.AnyMessage], "GET /api/v1/scheduler/feeds/<kind>/events"),
    "feed.checkpoint": (
        CheckpointAnswer,
        "POST /api/v1/scheduler/feeds/<kind>/consumer-checkpoint",
    ),
}


def schema_for(name: str) -> dict[str, Any]:
    typ, where = TYPES[name]
    (ref,), defs = msgspec.json.schema_components([typ], ref_template="#/$defs/{name}")
    body = defs.pop(ref["$ref"].rsplit("/", 1)[1])
    return {
        "$schema": DIALECT,
        "$id": f"urn:streamproc:notify:{name}:v{nm.SCHEMA_VERSION}",
        "title": name,
        **body,
        "description": where,
        "$defs": defs,
    }


def render(name: str) -> str:
    return json.dumps(schema_for(name), indent=2, sort_keys=True) + "\n"


def write_all(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in sorted(TYPES):
        path = out / f"{name}.json"
        path.write_text(render(name))
        written.append(path)
    return written


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="schemas/notify")
    for p in write_all(Path(ap.parse_args().out)):
        print(p)
