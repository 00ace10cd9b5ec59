"""SBOM ingestion over HTTP against a real gateway (nats-server, RocksDB, aiohttp): PUT,
GET, DELETE and the listing; tenants and scopes; bad SBOMs; caps and encodings; duplicate
and changed content; an SBOM made by a real generator (cyclonedx-py)."""

from __future__ import annotations

import asyncio
import copy
import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import zstandard

from streamproc.bus import jsapi
from streamproc.events.envelope import decode
from streamproc.natsd.server import EmbeddedNats
from streamproc.sbom.parse import parse_sbom
from streamproc.sbom.publish import payload_digest
from streamproc.sbom.purls import normalize_purl
from tests.gateway.conftest import drop_streams
from tests.gateway.harness import BASE, Harness, default_settings, start, stop, token
from tests.helpers import eventually

IMAGES = f"{BASE}/images"
SBOMS = Path(__file__).parents[2] / "data" / "sboms"
CDX = "debian-base.cdx15.json"
WRITE = "scheduler.images.write"


def digest(n: int) -> str:
    return f"sha256:{n:064x}"


def sbom(name: str = CDX) -> dict[str, Any]:
    return json.loads((SBOMS / name).read_text())


def body(name: str = CDX, **kw: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "repository": "ghcr.io/acme/app",
        "namespace": "prod",
        "tags": ["1.0"],
        "sbom": sbom(name),
    }
    doc.update(kw)
    return doc


def counts(name: str) -> tuple[int, int]:
    normal = [normalize_purl(p) for p in parse_sbom((SBOMS / name).read_bytes()).purls]
    return len({n.purl for n in normal}), len({n.product_key for n in normal})


async def put(
    gw: Harness, d: str, doc: Any, tok: str | None = None, query: str = ""
) -> tuple[int, Any, Any]:
    return await gw.call("PUT", f"{IMAGES}/{d}{query}", tok=tok or token(), json=doc)


async def put_raw(
    gw: Harness, d: str, data: bytes, encoding: str | None = None, ctype: str = "application/json"
) -> tuple[int, Any, Any]:
    """A PUT of these exact bytes (compressed with ``encoding``, when given)."""
    headers = {"Content-Type": ctype, **({"Content-Encoding": encoding} if encoding else {})}
    return await gw.call("PUT", f"{IMAGES}/{d}", tok=token(), data=data, headers=headers)


async def shown(gw: Harness, d: str, tok: str | None = None, version: int = 0) -> Any:
    """The image as GET shows it once the read model has applied ``version``."""

    async def check() -> Any:
        status, view, _ = await gw.call("GET", f"{IMAGES}/{d}", tok=tok or token())
        return view if status == 200 and view["version"] >= version else None

    return await eventually(check, what=f"GET {d}")


async def gone(gw: Harness, d: str, tok: str | None = None) -> None:
    async def check() -> bool:
        status, _, _ = await gw.call("GET", f"{IMAGES}/{d}", tok=tok or token())
        return status == 404

    await eventually(check, what=f"GET {d} answers 404")


async def stored(gw: Harness, seq: int) -> tuple[str, Any]:
    assert gw.system.nc is not None
    m = await gw.system.nc.jetstream().get_msg(gw.system.settings.events_stream, seq)
    return m.subject, decode(m.data)


async def test_put_get_list_delete(gw: Harness, prefix: str) -> None:
    d = digest(1)
    status, res, _ = await put(gw, d, body())
    assert status == 202, res
    assert res["id"] == d and res["duplicate"] is False and res["seq"] == await gw.last_seq()
    subject, event = await stored(gw, res["seq"])
    assert subject == f"{prefix}.events.acme.image.{d}"
    assert event.kind == "image.indexed" and event.id == res["eventId"]
    assert event.tenant == "acme" and event.payload.repository == "acme/app"
    purls, keys = counts(CDX)
    view = await shown(gw, d)
    assert view["tenant"] == "acme"
    assert (view["registry"], view["repository"], view["namespace"]) == (
        "ghcr.io",
        "acme/app",
        "prod",
    )
    assert (view["purlCount"], view["productKeyCount"]) == (purls, keys)
    assert (view["usedPurlCount"], view["usageKnown"]) == (0, False)
    assert view["tags"] == ["1.0"] and view["eventId"] == res["eventId"]
    assert view["contentDigest"] == f"sha256:{payload_digest(event.payload)}"
    assert view["indexedAt"].endswith("Z") and view["indexedHlc"] == event.hlc
    status, page, _ = await gw.call("GET", IMAGES, tok=token(scopes="scheduler.read"))
    assert status == 200 and [i["digest"] for i in page["items"]] == [d]

    status, res, _ = await gw.call("DELETE", f"{IMAGES}/{d}", tok=token())
    assert status == 202 and res["id"] == d
    _, event = await stored(gw, res["seq"])
    assert event.kind == "image.removed" and event.payload.digest == d
    await gone(gw, d)
    seq = await gw.last_seq()
    status, problem, _ = await gw.call("DELETE", f"{IMAGES}/{d}", tok=token())
    assert status == 404 and problem["type"].endswith("not-found")
    assert await gw.last_seq() == seq, "a refused delete publishes nothing"
    # Indexed again after the removal: a new event, even with the same content.
    status, res, _ = await put(gw, d, body())
    assert status == 202 and res["duplicate"] is False and res["seq"] == seq + 1
    await shown(gw, d, version=res["seq"])


async def test_usage_from_used_purls(gw: Harness) -> None:
    purls = parse_sbom((SBOMS / CDX).read_bytes()).purls
    status, res, _ = await put(gw, digest(2), body(usedPurls=purls[:3]), query="?wait=true")
    assert status == 200 and res["applied"] is True, res
    view = await shown(gw, digest(2))
    assert (view["usedPurlCount"], view["usageKnown"]) == (3, True)
    _, event = await stored(gw, res["seq"])
    assert sum(c.used for c in event.payload.components) == 3


async def test_duplicate_and_changed_content(gw: Harness) -> None:
    d = digest(3)
    status, first, _ = await put(gw, d, body())
    assert status == 202
    seq = await gw.last_seq()
    status, again, _ = await put(gw, d, body())
    assert status == 200 and again["duplicate"] is True, again
    assert (again["eventId"], again["seq"]) == (first["eventId"], first["seq"])
    assert await gw.last_seq() == seq, "the same content publishes nothing"
    # The log decides, not JetStream's duplicate window: shrink it to the minimum, let it
    # pass, and the same content is still a duplicate.
    nc = gw.system.nc
    assert nc is not None
    stream = gw.system.settings.events_stream
    info = await jsapi.stream_info(nc, stream)
    assert info is not None
    config = {**info.config, "duplicate_window": 100_000_000}
    await jsapi.request(nc, f"STREAM.UPDATE.{stream}", config)
    await asyncio.sleep(0.2)  # past the 100 ms window: the property under test is time
    status, late, _ = await put(gw, d, body())
    assert status == 200 and late["duplicate"] is True and late["seq"] == first["seq"]
    assert await gw.last_seq() == seq

    status, changed, _ = await put(gw, d, body(tags=["1.0", "latest"]))
    assert status == 202 and changed["duplicate"] is False
    assert changed["eventId"] != first["eventId"] and changed["seq"] == seq + 1
    status, other, _ = await put(gw, d, body("tools-nested.cdx16.json"))
    assert status == 202 and other["seq"] == seq + 2
    view = await shown(gw, d, version=other["seq"])
    assert view["purlCount"] == counts("tools-nested.cdx16.json")[0]
    # Back to the first content: new relative to the last event, so recorded again.
    status, back, _ = await put(gw, d, body())
    assert status == 202 and back["seq"] == seq + 3 and back["eventId"] != first["eventId"]


async def test_spdx_documents(gw: Harness) -> None:
    for n, name in enumerate(["python-app.spdx23.json", "debian-libs.spdx22.json"], 10):
        status, res, _ = await put(gw, digest(n), body(name))
        assert status == 202, res
        view = await shown(gw, digest(n))
        assert (view["purlCount"], view["productKeyCount"]) == counts(name)


async def test_tenant_matrix(gw: Harness, prefix: str) -> None:
    d = digest(4)
    acme, globex = token("acme"), token("globex")
    status, res, _ = await put(gw, d, body(), tok=acme)
    assert status == 202
    subject, event = await stored(gw, res["seq"])
    assert event.tenant == "acme" and ".events.acme.image." in subject
    await shown(gw, d, tok=acme)
    status, problem, _ = await gw.call("GET", f"{IMAGES}/{d}", tok=globex)
    assert status == 404 and problem["type"].endswith("not-found")
    status, page, _ = await gw.call("GET", IMAGES, tok=globex)
    assert status == 200 and page["items"] == []
    seq = await gw.last_seq()
    status, _, _ = await gw.call("DELETE", f"{IMAGES}/{d}", tok=globex)
    assert status == 404 and await gw.last_seq() == seq
    # globex indexes the same digest: its own image, acme's is untouched.
    status, res, _ = await put(gw, d, body("python-app.spdx23.json"), tok=globex)
    assert status == 202 and res["duplicate"] is False
    _, event = await stored(gw, res["seq"])
    assert event.tenant == "globex"
    theirs = await shown(gw, d, tok=globex)
    ours = await shown(gw, d, tok=acme)
    assert theirs["tenant"] == "globex" and ours["tenant"] == "acme"
    assert theirs["purlCount"] != ours["purlCount"]


async def test_scopes(gw: Harness) -> None:
    d = digest(5)
    seq = await gw.last_seq()
    for scopes in ("scheduler.read", "other"):
        status, problem, headers = await put(gw, d, body(), tok=token(scopes=scopes))
        assert status == 403 and problem["reason"] == "insufficient_scope", scopes
        assert WRITE in headers["WWW-Authenticate"]
    status, _, _ = await gw.call("PUT", f"{IMAGES}/{d}", json=body())
    assert status == 401
    assert await gw.last_seq() == seq
    # The ingest scope writes but does not read; admin does both.
    status, _, _ = await put(gw, d, body(), tok=token(scopes=WRITE))
    assert status == 202
    for path in (f"{IMAGES}/{d}", IMAGES):
        status, problem, _ = await gw.call("GET", path, tok=token(scopes=WRITE))
        assert status == 403 and "scheduler.read" in problem["detail"]
    await shown(gw, d, tok=token(scopes="scheduler.read"))
    status, _, _ = await gw.call("DELETE", f"{IMAGES}/{d}", tok=token(scopes="scheduler.read"))
    assert status == 403
    status, _, _ = await gw.call("DELETE", f"{IMAGES}/{d}", tok=token(scopes=WRITE))
    assert status == 202


def _bad_cases() -> list[tuple[str, Any, str, str]]:
    """(what, body, problem type, field)."""
    cdx = sbom()
    old = {**cdx, "specVersion": "1.2"}
    typed = copy.deepcopy(cdx)
    typed["components"][0]["purl"] = 7
    bad_purl = copy.deepcopy(cdx)
    bad_purl["components"][3]["purl"] = "pkg:deb/debian/bad%zzname@1"
    spdx21 = {**sbom("python-app.spdx23.json"), "spdxVersion": "SPDX-2.1"}
    in_sbom = parse_sbom(json.dumps(cdx)).purls
    return [
        ("not an SBOM", body(sbom={"hello": "world"}), "invalid-sbom", "$.sbom"),
        ("sbom is a string", body(sbom=json.dumps(cdx)), "invalid-sbom", "$.sbom"),
        ("sbom is null", body(sbom=None), "invalid-sbom", "$.sbom"),
        ("old CycloneDX", body(sbom=old), "invalid-sbom", "$.sbom.specVersion"),
        ("SPDX 2.1", body(sbom=spdx21), "invalid-sbom", "$.sbom.spdxVersion"),
        (
            "other bomFormat",
            body(sbom={**cdx, "bomFormat": "X"}),
            "invalid-sbom",
            "$.sbom.bomFormat",
        ),
        ("purl not a string", body(sbom=typed), "invalid-sbom", "$.sbom.components[0].purl"),
        ("unparseable purl", body(sbom=bad_purl), "invalid-sbom", "$.sbom"),
        ("no sbom", {"repository": "app"}, "invalid-body", "$.sbom"),
        ("no repository", {"sbom": cdx}, "invalid-body", "$.repository"),
        ("unknown field", body(extra=1), "invalid-body", "$.extra"),
        ("tag too long", body(tags=["x" * 513]), "invalid-body", "$.tags[0]"),
        ("registry only", body(repository="ghcr.io/"), "invalid-body", "$.repository"),
        ("bad used purl", body(usedPurls=[in_sbom[0], "nope"]), "invalid-body", "$.usedPurls[1]"),
        (
            "used purl not in SBOM",
            body(usedPurls=[in_sbom[0], "pkg:pypi/absent@1"]),
            "invalid-body",
            "$.usedPurls[1]",
        ),
    ]


async def test_bad_requests_publish_nothing(gw: Harness) -> None:
    seq = await gw.last_seq()
    for what, doc, kind, field in _bad_cases():
        status, problem, headers = await put(gw, digest(6), doc)
        assert status == 400, (what, problem)
        assert headers["Content-Type"].startswith("application/problem+json")
        assert problem["type"] == f"urn:streamproc:problem:{kind}", (what, problem)
        assert problem["field"] == field, (what, problem)
    status, problem, _ = await put_raw(gw, digest(6), b'{"sbom": ')
    assert status == 400 and problem["type"].endswith("malformed-json")
    for bad in ("sha256:xyz", "latest", "SHA256:" + "a" * 64, "sha256:" + "a" * 20):
        for method in ("PUT", "GET", "DELETE"):
            status, problem, _ = await gw.call(method, f"{IMAGES}/{bad}", tok=token(), json=body())
            assert status == 400 and problem["field"] == "path.digest", (method, bad, problem)
    status, _, _ = await put_raw(gw, digest(6), b"{}", ctype="text/x")
    assert status == 415
    assert await gw.last_seq() == seq
    status, problem, _ = await gw.call("GET", f"{IMAGES}/{digest(6)}", tok=token())
    assert status == 404


async def test_compressed_bodies(gw: Harness) -> None:
    raw = msgspec.json.encode(body())
    for n, (enc, data) in enumerate(
        [("gzip", gzip.compress(raw)), ("zstd", zstandard.ZstdCompressor().compress(raw))], 20
    ):
        status, res, _ = await put_raw(gw, digest(n), data, enc)
        assert status == 202, (enc, res)
        view = await shown(gw, digest(n))
        assert view["purlCount"] == counts(CDX)[0]
    seq = await gw.last_seq()
    status, problem, _ = await put_raw(gw, digest(22), raw, "br")
    assert status == 415 and problem["type"].endswith("unsupported-encoding")
    status, problem, _ = await put_raw(gw, digest(22), b"\x1f\x8bnope", "gzip")
    assert status == 400 and problem["type"].endswith("invalid-encoding")
    assert await gw.last_seq() == seq


async def test_size_limits(tmp_path: Path, nats_server: EmbeddedNats, prefix: str) -> None:
    h = await start(
        tmp_path,
        nats_server.url,
        prefix,
        default_settings(tmp_path, max_body=64 * 1024, max_decompressed_body=128 * 1024),
    )
    try:
        raw = msgspec.json.encode(body("debian-libs.spdx22.json"))
        assert len(raw) > 64 * 1024
        status, problem, _ = await put_raw(h, digest(30), raw)
        assert status == 413 and problem["limit"] == 64 * 1024
        bomb = gzip.compress(b'{"sbom": "' + b" " * 1_000_000 + b'"}')
        assert len(bomb) < 64 * 1024
        status, problem, _ = await put_raw(h, digest(30), bomb, "gzip")
        assert status == 413 and problem["limit"] == 128 * 1024
    finally:
        await stop(h)
        await drop_streams(nats_server.url, prefix)


async def test_too_many_purls(gw: Harness) -> None:
    comps = [
        {"type": "library", "name": f"p{i}", "purl": f"pkg:npm/p{i}@1"} for i in range(100_001)
    ]
    many = {"bomFormat": "CycloneDX", "specVersion": "1.5", "components": comps}
    data = gzip.compress(msgspec.json.encode(body(sbom=many)))
    seq = await gw.last_seq()
    status, problem, _ = await put_raw(gw, digest(31), data, "gzip")
    assert status == 413 and problem["type"].endswith("too-many-keys"), problem
    assert (problem["count"], problem["limit"]) == (100_001, 100_000)
    assert await gw.last_seq() == seq


async def test_paging_and_filters(gw: Harness) -> None:
    for n in range(7):
        ns = "prod" if n % 2 else "dev"
        repo = "ghcr.io/acme/app" if n < 5 else "nginx"
        status, _, _ = await put(gw, digest(40 + n), body(namespace=ns, repository=repo))
        assert status == 202
    last = await gw.last_seq()
    await shown(gw, digest(46), version=last)
    seen, cursor, pages = [], None, 0
    while True:
        q = f"?limit=3&cursor={cursor}" if cursor else "?limit=3"
        status, page, _ = await gw.call("GET", IMAGES + q, tok=token())
        assert status == 200 and len(page["items"]) <= 3
        seen += [i["digest"] for i in page["items"]]
        pages += 1
        cursor = page.get("nextCursor")
        if not cursor:
            break
    assert seen == [digest(40 + n) for n in range(7)] and pages == 3
    for query, want in [
        ("?namespace=prod", [41, 43, 45]),
        ("?repository=acme/app", [40, 41, 42, 43, 44]),
        ("?repository=docker.io/library/nginx&namespace=dev", [46]),
        ("?repository=library/nginx", [45, 46]),
    ]:
        status, page, _ = await gw.call("GET", IMAGES + query, tok=token())
        assert [i["digest"] for i in page["items"]] == [digest(n) for n in want], query
    for query, field in [("?limit=0", "query.limit"), ("?cursor=!!", "query.cursor")]:
        status, problem, _ = await gw.call("GET", IMAGES + query, tok=token())
        assert status == 400 and problem["field"] == field


async def test_sbom_from_cyclonedx_py(gw: Harness, tmp_path: Path) -> None:
    """An SBOM made by a real generator, of this very environment (offline)."""
    out = tmp_path / "env.cdx.json"
    cli = Path(sys.executable).with_name("cyclonedx-py")
    subprocess.run(
        [str(cli), "environment", "--no-validate", "-o", str(out), sys.executable],
        check=True,
        capture_output=True,
        timeout=60,
    )
    raw = out.read_bytes()
    parsed = parse_sbom(raw)
    assert parsed.format == "cyclonedx" and len(parsed.purls) > 20
    doc = {"repository": "registry.local/ci/streamproc", "tags": ["ci"], "sbom": json.loads(raw)}
    status, res, _ = await put(gw, digest(50), doc)
    assert status == 202, res
    view = await shown(gw, digest(50))
    normal = [normalize_purl(p) for p in parsed.purls]
    assert view["purlCount"] == len({n.purl for n in normal})
    assert view["productKeyCount"] == len({n.product_key for n in normal})
    assert "pkg:pypi/msgspec" in {n.product_key for n in normal}
    assert view["usageKnown"] is False
    status, again, _ = await put(gw, digest(50), doc)
    assert status == 200 and again["duplicate"] is True
