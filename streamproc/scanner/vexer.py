"""``streamproc vexer export --vex DIR``: the VEX documents of a directory → the signed
Vexer webhook, as a VEX source would send it.

Every ``*.json`` file is one document (OpenVEX, CycloneDX VEX or CSAF 2.0 VEX), checked
against its format's schema and normalised to claims (:mod:`streamproc.vex`); its id is
the one it gives itself (OpenVEX ``@id``, CycloneDX ``serialNumber``, CSAF
``tracking.id``), else its file name. A state file remembers each document's claims as last
exported, so only what changed goes out: ``changedClaims`` (``from→to``, with the document,
the justification and whether the claim was dropped), and the documents they belong to. A
file that is gone from the directory withdraws its claims. As with ``feedser export``, the
body being sent is kept as ``pending`` until the gateway accepts it, so a retry sends the
very same export.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from streamproc.vex.claims import Change, Key, diff
from streamproc.vex.documents import parse
from streamproc.vex.model import Claim, Document, VexError, version_key

WEBHOOK_PATH = "/api/v1/scheduler/events/vexer-export"


class VexDirError(ValueError):
    """Files of the directory that are not VEX documents this can send (each named)."""


@dataclass(frozen=True)
class Read:
    document_id: str
    path: Path
    doc: Document
    sha256: str


def read_dir(directory: Path) -> list[Read]:
    """Every document of ``directory``; :class:`VexDirError` naming each bad file."""
    if not directory.is_dir():
        raise VexDirError(f"{directory} is not a directory")
    out: dict[str, Read] = {}
    errors: list[str] = []
    for path in sorted(directory.glob("*.json")):
        data = path.read_bytes()
        try:
            doc = parse(data)
        except VexError as exc:
            errors.append(f"{path}: {exc.detail}")
            continue
        doc_id = (doc.own_id or path.stem)[:512]
        held = out.get(doc_id)
        if held is not None:
            errors.append(f"{path}: document {doc_id!r} is also {held.path}: keep one version")
            continue
        out[doc_id] = Read(doc_id, path, doc, hashlib.sha256(data).hexdigest())
    if errors:
        raise VexDirError("; ".join(errors))
    return [out[k] for k in sorted(out)]


def _claims(raw: list[list[Any]]) -> dict[Key, Claim]:
    claims = [
        Claim(purl, vuln, status, why, image or None) for purl, vuln, image, status, why in raw
    ]
    return {c.key: c for c in claims}


def _raw(claims: list[Claim]) -> list[list[Any]]:
    return [[c.purl, c.vuln_id, c.image or "", c.status, c.justification] for c in claims]


def _changed(change: Change, document_id: str) -> dict[str, Any]:
    c = change.claim
    out: dict[str, Any] = {
        "productKey": c.purl,
        "vulnId": c.vuln_id,
        "status": change.transition,
        "documentId": document_id,
    }
    if c.justification and not change.removed:
        out["justification"] = c.justification
    if c.image:
        out["imageDigest"] = c.image
    if change.removed:
        out["removed"] = True
    return out


def build_export(
    docs: list[Read], state: dict[str, Any], now: float | None = None
) -> dict[str, Any] | None:
    """The webhook body for what changed since ``state`` (None when nothing did); the
    state's ``pending`` body when it is that same change. :class:`VexDirError` when a
    document is older than the version exported before."""
    held: dict[str, Any] = state.get("documents", {})
    changed: list[dict[str, Any]] = []
    documents: list[dict[str, Any]] = []
    h = hashlib.sha256()
    for r in docs:
        before = held.get(r.document_id)
        if before is not None and before.get("sha256") == r.sha256:
            continue
        if before is not None and version_key(r.doc.version) < version_key(before["version"]):
            raise VexDirError(
                f"{r.path}: version {r.doc.version} is older than version "
                f"{before['version']} exported before"
            )
        old = _claims(before["claims"]) if before is not None else {}
        changed += [_changed(ch, r.document_id) for ch in diff(old, r.doc.claims)]
        documents.append(
            {
                "documentId": r.document_id,
                "format": r.doc.format,
                "version": r.doc.version,
                "sha256": r.sha256,
                "statements": r.doc.statements,
                "claims": len(r.doc.claims),
            }
        )
        h.update(f"{r.document_id}={r.sha256};".encode())
    present = {r.document_id for r in docs}
    for doc_id in sorted(set(held) - present):  # gone from the directory: withdrawn
        old = _claims(held[doc_id]["claims"])
        changed += [_changed(ch, doc_id) for ch in diff(old, [])]
        h.update(f"{doc_id}=gone;".encode())
    if not changed and not documents:
        return None
    export_id = "vex-" + h.hexdigest()[:24]
    pending = state.get("pending")
    if isinstance(pending, dict) and pending.get("exportId") == export_id:
        return pending
    to = datetime.fromtimestamp(now if now is not None else time.time(), UTC)
    return {
        "exportId": export_id,
        "changedClaims": changed,
        "documents": documents,
        "window": {"from": state.get("exportedAt"), "to": to.strftime("%Y-%m-%dT%H:%M:%SZ")},
    }


def next_state(docs: list[Read], body: dict[str, Any]) -> dict[str, Any]:
    """Once the gateway accepted ``body``: every document's claims as exported."""
    return {
        "documents": {
            r.document_id: {
                "sha256": r.sha256,
                "version": r.doc.version,
                "claims": _raw(r.doc.claims),
            }
            for r in docs
        },
        "exportedAt": body["window"]["to"],
        "lastExportId": body["exportId"],
    }
