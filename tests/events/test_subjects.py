"""Where export events are recorded: Vexer exports from webhooks share the tenant's export
shards, as Feedser's do; every version of a VEX document recorded through the API keeps the
document's one subject (what its expected-last-sequence check relies on)."""

from __future__ import annotations

from streamproc.events import payloads as p
from streamproc.events.catalog import aggregate_subject, subject_for
from streamproc.ids import shard_token
from streamproc.names import EXPORT_SHARDS


def _document(version: str) -> p.VexerExport:
    doc = p.VexDocument(document_id="app-vex", format="openvex", version=version, sha256="0" * 64)
    return p.VexerExport(
        export_id=f"app-vex@{version}", source=p.VEX_DOCUMENT_SOURCE, documents=[doc]
    )


def test_webhook_exports_are_sharded_and_a_vex_documents_versions_share_its_subject() -> None:
    hook = p.VexerExport(export_id="vx-1", source="vexer")
    shard = shard_token(hook.ref, EXPORT_SHARDS)
    assert subject_for("sp", "acme", "export.vexer", hook) == f"sp.events.acme.vexer.{shard}"
    mine = aggregate_subject("sp", "acme", "vexer", f"{p.VEX_DOCUMENT_SOURCE}/app-vex")
    assert subject_for("sp", "acme", "export.vexer", _document("1")) == mine
    assert subject_for("sp", "acme", "export.vexer", _document("2")) == mine
    assert not mine.endswith(shard)
