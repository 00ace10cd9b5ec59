"""VEX documents over HTTP against a real gateway (nats-server, RocksDB, aiohttp): each
format in, the export.vexer it records, versions, identical re-sends, scopes and tenants,
and the 4xx for what is not a VEX document."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from streamproc.bus import jsapi
from streamproc.events.envelope import decode
from streamproc.gateway.tokens_cli import write_key_file
from tests.gateway.harness import BASE, ISSUER, ISSUER_KEY, Harness, default_settings, token
from tests.helpers import eventually

VEX = f"{BASE}/vex"
DATA = Path(__file__).parents[2] / "data" / "vex"


def doc(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text())


async def put(gw: Harness, doc_id: str, body: Any, tok: str | None = None, q: str = "") -> Any:
    return await gw.call("PUT", f"{VEX}/{doc_id}{q}", tok=tok or token(), json=body)


async def exports(gw: Harness) -> list[Any]:
    """Every export.vexer in the log, decoded, in order."""
    nc = gw.gateway.ctx.publisher.nc
    stream = gw.gateway.ctx.settings.events_stream
    info = await jsapi.stream_info(nc, stream)
    assert info is not None
    out = []
    for seq in range(max(1, info.state.first_seq), info.state.last_seq + 1):
        m = await jsapi.request(nc, f"STREAM.MSG.GET.{stream}", {"seq": seq})
        e = decode(base64.b64decode(m["message"]["data"]))
        if e.kind == "export.vexer":
            out.append(e)
    return out


async def test_each_format_is_recorded_with_its_changed_claims(gw: Harness) -> None:
    for doc_id, name, n in (
        ("wolfi-git", "openvex/spec-minimal.json", 2),
        ("jackson", "cyclonedx/bom-examples-vex.json", 1),
        ("rh-cve-2023-1370", "csaf/redhat-cve-2023-1370.json", 33),
    ):
        status, body, _ = await put(gw, doc_id, doc(name))
        assert status == 202, body
        assert body["changedClaims"] == n and body["claims"] == n
        assert body["exportId"] == f"vex-documents:{doc_id}@1"
    recorded = await exports(gw)
    assert [e.payload.export_id for e in recorded] == [
        "wolfi-git@1",
        "jackson@1",
        "rh-cve-2023-1370@1",
    ]
    first = recorded[0].payload
    assert [c.status for c in first.changed_claims] == ["affected→fixed"] * 2
    assert {c.document_id for c in first.changed_claims} == {"wolfi-git"}
    assert first.documents[0].format == "openvex"
    jackson = recorded[1].payload.changed_claims[0]
    assert (jackson.status, jackson.justification) == (
        "affected→not_affected",
        "code_not_reachable",
    )


async def test_identical_resend_changes_nothing_and_a_newer_version_replaces(
    gw: Harness,
) -> None:
    v1 = doc("openvex/spec-minimal.json")
    status, body, _ = await put(gw, "git", v1, q="?wait=true")
    assert status == 200 and body["applied"] and body["changedClaims"] == 2
    status, again, _ = await put(gw, "git", v1)
    assert status == 200 and again["unchanged"] and again["changedClaims"] == 0
    assert again["eventId"] == body["eventId"]
    v2 = copy.deepcopy(v1)
    v2["version"] = 2
    v2["statements"][0]["products"] = [v1["statements"][0]["products"][1]]  # x86_64 only
    v2["statements"][0]["status"] = "not_affected"
    v2["statements"][0]["justification"] = "vulnerable_code_not_present"
    status, body, _ = await put(gw, "git", v2, q="?wait=true")
    assert status == 200 and body["changedClaims"] == 2, body
    last = (await exports(gw))[-1].payload
    assert [(c.product_key, c.status, bool(c.removed)) for c in last.changed_claims] == [
        ("pkg:apk/wolfi/git@2.39.0-r1?arch=armv7", "fixed→affected", True),
        ("pkg:apk/wolfi/git@2.39.0-r1?arch=x86_64", "fixed→not_affected", False),
    ]
    assert len(await exports(gw)) == 2
    status, view, _ = await gw.call("GET", f"{VEX}/git", tok=token())
    assert status == 200 and view["version"] == "2" and view["claims"] == 1
    status, page, _ = await gw.call("GET", VEX, tok=token())
    assert [d["documentId"] for d in page["items"]] == ["git"]

    status, problem, _ = await put(gw, "git", v1)
    assert status == 409 and problem["type"].endswith("stale-version")
    v2b = copy.deepcopy(v2)
    v2b["author"] = "someone else"
    status, problem, _ = await put(gw, "git", v2b)
    assert status == 409 and problem["type"].endswith("version-conflict")
    assert len(await exports(gw)) == 2


async def test_tenants_and_scopes(gw: Harness) -> None:
    body = doc("openvex/spec-minimal.json")
    narrow = token(scopes="scheduler.vex.write")
    status, _, _ = await put(gw, "d", body, tok=narrow, q="?wait=true")
    assert status == 200
    status, _, _ = await put(gw, "d", body, tok=token(scopes="scheduler.read"))
    assert status == 403
    status, _, _ = await put(gw, "d", body, tok=token(scopes="scheduler.images.write"))
    assert status == 403
    status, _, _ = await gw.call("GET", f"{VEX}/d", tok=token(tenant="other"))
    assert status == 404
    status, other, _ = await put(gw, "d", body, tok=token(tenant="other"))
    assert status == 202 and not other["unchanged"]  # the same id is another tenant's own
    recorded = await eventually(lambda: _two(gw))
    assert sorted(e.tenant for e in recorded) == ["acme", "other"]


async def _two(gw: Harness) -> list[Any] | None:
    out = await exports(gw)
    return out if len(out) == 2 else None


async def test_what_is_not_a_vex_document(gw: Harness) -> None:
    cases: list[tuple[str, Any, int, str]] = [
        ("d", {"spdxVersion": "SPDX-2.3"}, 422, "unknown-format"),
        ("d", doc("openvex/go-vex-v020-1.vex.json"), 422, "schema-violation"),
        ("d", doc("csaf/oasis-2022-evd-uc-03-ms-001.json"), 422, "no-claims"),
        ("bad/id", doc("openvex/spec-minimal.json"), 404, ""),
        ("-x", doc("openvex/spec-minimal.json"), 400, "invalid-parameter"),
    ]
    for doc_id, body, status, slug in cases:
        got, problem, _ = await put(gw, doc_id, body)
        assert got == status, (doc_id, problem)
        if slug:
            assert problem["type"].endswith(slug), problem
    status, problem, _ = await gw.call(
        "PUT", f"{VEX}/d", tok=token(), data=b"{nope", headers={"Content-Type": "application/json"}
    )
    assert status == 400 and problem["type"].endswith("malformed-json")
    status, problem, _ = await gw.call(
        "PUT", f"{VEX}/d", tok=token(), data=b"x", headers={"Content-Type": "text/plain"}
    )
    assert status == 415
    big = b'{"a": "' + b"x" * (gw.gateway.body_cap + 10) + b'"}'
    status, problem, _ = await gw.call(
        "PUT", f"{VEX}/d", tok=token(), data=big, headers={"Content-Type": "application/json"}
    )
    assert status == 413
    schema = doc("openvex/spec-minimal.json")
    schema["statements"][0]["status"] = "maybe"
    status, problem, _ = await put(gw, "d", schema)
    assert status == 422 and problem["field"] == "$.statements[0].status"
    assert await exports(gw) == []


def _vexer_cli(gw: Harness, tmp: Path, vex: Path, *more: str) -> subprocess.CompletedProcess[str]:
    """``vexer export`` as beside ``make run``: the data directory holds a development issuer
    the gateway trusts and the gateway file naming the Vexer source's tenants, from which it
    mints its DPoP-bound tokens."""
    seed = tmp / "vexer.seed"
    seed.write_bytes(b"\x04" * 32)  # VEXER_KEYS[0] of the harness's vexer-main source
    data = tmp / "data"
    if not (data / "dev" / "issuer.jwk").exists():
        write_key_file(data / "dev" / "issuer.jwk", ISSUER_KEY, kid="k1", iss=ISSUER)
        hooks = [{"name": "feedser-main", "kind": "feedser", "tenants": ["acme", "globex"]},
                 {"name": "vexer-main", "kind": "vexer", "tenants": ["acme"]}]  # fmt: skip
        (data / "dev" / "gateway.json").write_text(json.dumps({"webhooks": hooks}))
    argv = [sys.executable, "-m", "streamproc.cli", "vexer", "export", "--vex", str(vex),
            "--url", gw.url, "--ed25519-seed-file", str(seed), "--source", "vexer-main",
            "--data-dir", str(data), *more]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPROC_")}
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)


async def test_vexer_export_sends_the_changed_claims_of_a_directory(
    gw: Harness, tmp_path: Path
) -> None:
    vex = tmp_path / "vex"
    vex.mkdir()
    shutil.copy(DATA / "openvex" / "spec-minimal.json", vex / "git.json")
    shutil.copy(DATA / "csaf" / "redhat-cve-2023-1370.json", vex)
    done = await asyncio.to_thread(_vexer_cli, gw, tmp_path, vex)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 documents, 35 changed claims" in done.stdout
    assert "presenting DPoP-bound tokens minted from" in done.stdout
    assert (
        "for tenant(s) acme" in done.stdout and "gateway answered 202 (tenant acme)" in done.stdout
    )
    assert (tmp_path / "data" / "vexer-export.json").is_file(), "the state in the data directory"
    again = await asyncio.to_thread(_vexer_cli, gw, tmp_path, vex)
    assert again.returncode == 0 and "no changed VEX claims" in again.stdout

    (vex / "redhat-cve-2023-1370.json").unlink()  # withdrawn: its claims go
    v2 = doc("openvex/spec-minimal.json")
    v2["version"] = 2
    v2["statements"][0]["status"] = "under_investigation"
    (vex / "git.json").write_text(json.dumps(v2))
    done = await asyncio.to_thread(_vexer_cli, gw, tmp_path, vex)
    assert done.returncode == 0, done.stdout + done.stderr
    recorded = await eventually(lambda: _n(gw, 2))
    first, second = (e.payload for e in recorded)
    assert first.source == "vexer-main" and {d.document_id for d in first.documents} == {
        "https://openvex.dev/docs/example/vex-9fb3463de1b57",
        "CVE-2023-1370",
    }
    statuses = {(c.document_id, c.status, bool(c.removed)) for c in second.changed_claims}
    assert statuses == {
        ("https://openvex.dev/docs/example/vex-9fb3463de1b57", "fixed→under_investigation", False),
        ("CVE-2023-1370", "not_affected→affected", True),
        ("CVE-2023-1370", "fixed→affected", True),
    }

    (vex / "bad.json").write_text(
        '{"bomFormat": "CycloneDX", "specVersion": "1.5", "version": "x"}'
    )
    bad = await asyncio.to_thread(_vexer_cli, gw, tmp_path, vex)
    assert bad.returncode == 2 and "bad.json" in bad.stderr and "JSON Schema" in bad.stderr


async def _n(gw: Harness, n: int) -> list[Any] | None:
    out = await exports(gw)
    return out if len(out) == n else None


def test_no_webhook_source_may_take_the_vex_documents_name(tmp_path: Path) -> None:
    with pytest.raises(msgspec.ValidationError, match="reserved"):
        default_settings(
            tmp_path,
            webhooks=[
                {
                    "name": "vex-documents",
                    "kind": "vexer",
                    "tenants": ["acme"],
                    "hmac_secrets": ["inline-secret-0123456789abcdef"],
                }
            ],
        )
