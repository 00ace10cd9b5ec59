"""Checking a document against its format's own JSON Schema, bundled with the package.

The schemas are the formats' published ones, unchanged (``schemas/README.md`` names each
file's source, commit and license): OpenVEX 0.2.0, CycloneDX 1.4 to 1.7 (with the SPDX, JSF
and cryptography definitions they reference), and CSAF 2.0 (errata 01, with FIRST's CVSS
schemas it references). Validation is jsonschema-rs: the OpenVEX schema says
``uniqueItems`` over the statements, which a pure-Python validator checks pairwise
(minutes for 10,000 statements); nothing is ever fetched from the network.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

import jsonschema_rs

from streamproc.vex.model import VexError

_CVSS = {
    f"https://www.first.org/cvss/cvss-v{v}.json": f"cvss-v{v}.json" for v in ("2.0", "3.0", "3.1")
}
_CYCLONEDX_DEFS = {
    f"http://cyclonedx.org/schema/{n}": n
    for n in ("spdx.schema.json", "jsf-0.82.schema.json", "cryptography-defs.schema.json")
}
CYCLONEDX_VERSIONS = ("1.4", "1.5", "1.6", "1.7")
"""CycloneDX versions with a ``vulnerabilities`` section (VEX came with 1.4)."""
MAX_ERRORS = 5


def _load(name: str) -> Any:
    return json.loads(resources.files("streamproc.vex").joinpath("schemas", name).read_bytes())


def _offline(uri: str) -> Any:
    raise ValueError(f"{uri} is not bundled (schemas are never fetched)")


@cache
def _validator(name: str) -> jsonschema_rs.Validator:
    if name.startswith("csaf"):
        refs = _CVSS
    elif name.startswith("bom-"):
        refs = _CYCLONEDX_DEFS
    else:
        refs = {}
    registry = jsonschema_rs.Registry([(uri, _load(f)) for uri, f in refs.items()])
    return jsonschema_rs.validator_for(_load(name), registry=registry, retriever=_offline)


def schema_of(fmt: str, spec_version: str | None = None) -> str:
    """The bundled schema file of a format (and CycloneDX ``specVersion``)."""
    if fmt == "openvex":
        return "openvex_json_schema.json"
    if fmt == "csaf":
        return "csaf_json_schema.json"
    if spec_version not in CYCLONEDX_VERSIONS:
        raise VexError(
            422,
            "unsupported-version",
            f"CycloneDX specVersion {spec_version!r} carries no VEX; "
            f"one of {', '.join(CYCLONEDX_VERSIONS)} does",
            field="$.specVersion",
        )
    return f"bom-{spec_version}.schema.json"


def _path(parts: list[str | int]) -> str:
    out = "$"
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


def check(doc: Any, fmt: str, spec_version: str | None = None) -> None:
    """Raise :class:`VexError` (422 ``schema-violation``) naming the first violations."""
    errors = []
    for e in _validator(schema_of(fmt, spec_version)).iter_errors(doc):
        errors.append(e)
        if len(errors) >= MAX_ERRORS:
            break
    if not errors:
        return
    first = errors[0]
    where = _path(list(first.instance_path))
    shown = "; ".join(f"{_path(list(e.instance_path))}: {e.message[:200]}" for e in errors)
    raise VexError(
        422,
        "schema-violation",
        f"not a valid {fmt} document (its own JSON Schema): {shown}",
        field=where,
    )
