"""A VEX document from its bytes: which format it is, its schema check, its claims."""

from __future__ import annotations

from typing import Any

import orjson

from streamproc.vex import csaf, cyclonedx, openvex, schema
from streamproc.vex.model import Document, Format, VexError

FORMATS: tuple[Format, ...] = ("openvex", "cyclonedx", "csaf")


def detect(doc: Any) -> Format:
    """OpenVEX by its ``@context``, CycloneDX by ``bomFormat``, CSAF by ``csaf_version``."""
    if isinstance(doc, dict):
        context = doc.get("@context")
        if isinstance(context, str) and "openvex" in context:
            return "openvex"
        if doc.get("bomFormat") == "CycloneDX":
            return "cyclonedx"
        meta = doc.get("document")
        if isinstance(meta, dict) and "csaf_version" in meta:
            if meta["csaf_version"] != "2.0":
                raise VexError(
                    422,
                    "unsupported-version",
                    f"CSAF version {meta['csaf_version']!r}: 2.0 is read",
                    field="$.document.csaf_version",
                )
            return "csaf"
    raise VexError(
        422,
        "unknown-format",
        "not a VEX document of a known format: OpenVEX (an openvex @context), CycloneDX "
        "(bomFormat CycloneDX) or CSAF 2.0 (document.csaf_version)",
        field="$",
    )


def parse(data: bytes) -> Document:
    """Decode, detect, check against the format's own JSON Schema, normalise."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise VexError(400, "malformed-json", f"malformed JSON: {exc}", field="$") from None
    fmt = detect(doc)
    if fmt == "openvex":
        schema.check(doc, fmt)
        return openvex.parse(doc)
    if fmt == "cyclonedx":
        schema.check(doc, fmt, str(doc.get("specVersion")))
        return cyclonedx.parse(doc)
    schema.check(doc, fmt)
    return csaf.parse(doc)
