"""The reference scanner over real HTTP, the runner's scanner client against it, and the
Feedser export posted to a real gateway."""

from __future__ import annotations

import time
from pathlib import Path

import aiohttp
import pytest

from streamproc.client.http import ApiClient
from streamproc.config import Configuration
from streamproc.gateway.tokens_cli import write_key_file
from streamproc.natsd.server import EmbeddedNats
from streamproc.runner.scanner_client import ImageFailed, ScannerClient, ScannerUnavailable
from streamproc.scanner.advisories import AdvisoryDb
from streamproc.scanner.faults import FaultConfig
from streamproc.scanner.feedser import (
    build_export,
    deliver_export,
    next_state,
    post_export,
    sending_state,
    signed_headers,
)
from streamproc.scanner.sender_auth import credentials
from tests.runner.harness import DATA, digest_of, events, register_images, scanner

PY = digest_of("py")


async def test_reports_idempotency_and_catalog_over_http() -> None:
    svc = await scanner(["GHSA-r9hx-vwmv-q579", "GHSA-cx63-2mw6-8hw5"])
    try:
        async with aiohttp.ClientSession() as s:
            sbom = (DATA / "sboms/python-app.spdx23.json").read_bytes()
            body = b'{"digest":"%s","ref":"reg/app:1","sbom":%s}' % (PY.encode(), sbom)
            async with s.post(f"{svc.url}/sboms", data=body) as r:
                assert r.status == 201 and (await r.json())["purls"] == 80
            hdr = {"Idempotency-Key": "k1"}
            async with s.post(f"{svc.url}/reports", json={"imageDigest": PY}, headers=hdr) as r:
                first = await r.read()
            async with s.post(f"{svc.url}/reports", json={"imageDigest": PY}, headers=hdr) as r:
                assert await r.read() == first
            report = await (await s.get(f"{svc.url}/reports/{PY}")).json()
            assert report["summary"] == {"critical": 0, "high": 2, "medium": 0, "low": 0}
            assert {f["vulnId"] for f in report["findings"]} == {
                "GHSA-r9hx-vwmv-q579",
                "GHSA-cx63-2mw6-8hw5",
            }
            async with s.post(f"{svc.url}/reports", json={"imageDigest": digest_of("x")}) as r:
                assert r.status == 404
            stats = await (await s.get(f"{svc.url}/admin/stats")).json()
            assert stats["reports"] == 1 and stats["replayed"] == 1 and stats["notFound"] == 1
    finally:
        await svc.close()


async def test_client_honours_retry_after_and_fails_images_or_attempts() -> None:
    svc = await scanner([], FaultConfig(next_429=2, retry_after_s=0.3))
    register_images(svc, {PY: "python-app.spdx23.json"})
    client = ScannerClient(svc.url, attempts=5, backoff_base_s=0.001, budget_s=5)
    try:
        t0 = time.monotonic()
        report, _, retries = await client.report(PY, "key-1")
        assert retries == 2 and time.monotonic() - t0 >= 0.6
        assert report.image_digest == PY
        with pytest.raises(ImageFailed, match="http_404"):
            await client.report(digest_of("unknown"), "key-2")
        svc.faults.apply(FaultConfig(outage_s=5))
        short = ScannerClient(svc.url, attempts=3, backoff_base_s=0.01, budget_s=1)
        with pytest.raises(ScannerUnavailable, match="connection"):
            await short.report(PY, "key-3")
        await short.close()
    finally:
        await client.close()
        await svc.close()


async def test_content_refresh_scans_a_moved_tag() -> None:
    svc = await scanner(["GHSA-r9hx-vwmv-q579"])
    old, new = digest_of("old"), digest_of("new")
    register_images(svc, {old: "debian-base.cdx15.json"})
    client = ScannerClient(svc.url)
    try:
        assert (await client.refresh(old, "k"))[0] == old, "tag unchanged: no scan"
        key, _ = svc.catalog.add_sbom((DATA / "sboms/python-app.spdx23.json").read_bytes())
        svc.catalog.add_image(new, key, "registry.test/debian-base:latest")  # the tag moved
        moved, _ = await client.refresh(old, "k")
        assert moved == new and svc.stats["scans"] == 1
    finally:
        await client.close()
        await svc.close()


async def test_feedser_export_of_changed_advisories_reaches_the_gateway(
    tmp_path: Path, nats_server: EmbeddedNats, prefix: str
) -> None:
    from tests.gateway.conftest import drop_streams
    from tests.gateway.harness import (
        HMAC_SECRET,
        ISSUER,
        ISSUER_KEY,
        default_settings,
        start,
        stop,
    )

    osv = tmp_path / "osv"
    osv.mkdir()
    for name in ("GHSA-r9hx-vwmv-q579", "DSA-5514-1"):
        (osv / f"{name}.json").write_bytes((DATA / f"osv/{name}.json").read_bytes())
    db = AdvisoryDb.load(osv, DATA / "kev.json", DATA / "osv/debian-sources.json")
    body = build_export(db, {"advisories": {}})
    assert body is not None
    assert body["kev"] == ["CVE-2023-4911"]
    assert {"pkg:pypi/setuptools", "pkg:deb/debian/libc6"} <= set(body["changedProductKeys"])
    state = next_state(db, body)
    assert build_export(db, state) is None, "nothing changed since"
    (osv / "GHSA-cx63-2mw6-8hw5.json").write_bytes(
        (DATA / "osv/GHSA-cx63-2mw6-8hw5.json").read_bytes()
    )
    later = build_export(AdvisoryDb.load(osv, DATA / "kev.json"), state)
    assert later is not None and [a["vulnId"] for a in later["advisories"]] == [
        "GHSA-cx63-2mw6-8hw5"
    ]

    def good(raw: bytes, delivery: str) -> dict[str, str]:
        return signed_headers(raw, delivery, secret=HMAC_SECRET)

    # The sender mints a DPoP-bound token per tenant from an issuer key file (what `make
    # run`'s development issuer is), answering the gateway's nonce challenge on its own.
    issuer = tmp_path / "issuer.jwk"
    write_key_file(issuer, ISSUER_KEY, kid="k1", iss=ISSUER)
    env = {
        "STREAMPROC_FEEDSER_ISSUER_KEY": str(issuer),
        "STREAMPROC_FEEDSER_TENANTS": "acme,globex",
    }
    creds = credentials(tmp_path / "data", Configuration(values=env))
    assert creds.tenants == ["acme", "globex"] and creds.key is not None
    assert (tmp_path / "data/client/dpop.jwk").is_file(), "the client key every command shares"
    h = await start(tmp_path, nats_server.url, prefix, default_settings(tmp_path))
    assert creds.tokens is not None
    api = ApiClient(creds.key, creds.tokens)
    try:
        answers = await deliver_export(h.url, body, good, creds)
        assert [(t, status) for t, status, _ in answers] == [("acme", 202), ("globex", 202)]
        assert [a["events"][0]["tenant"] for _, _, a in answers] == ["acme", "globex"]
        exports = await events(h.system.nc, h.system.settings.events_stream, "export.feedser")
        assert {e.tenant for e in exports} == {"acme", "globex"}
        assert exports[0].payload.kev == ["CVE-2023-4911"]
        async with api:
            bad, _ = await post_export(
                h.url,
                body,
                lambda raw, d: signed_headers(raw, d, secret="no"),
                api=api,
                tenant="acme",
            )
        assert bad == 401
        unauthenticated, problem = await post_export(h.url, body, good)
        assert unauthenticated == 401 and problem["detail"] == "an access token is required"
        # Sent, refused or never answered: run again later, the same body goes out (window
        # included), and the gateway knows it; a new window would be another body: the
        # export's next revision.
        later = time.time() + 120
        retry = build_export(db, sending_state({"advisories": {}}, body), now=later)
        assert retry == body
        async with api:
            status, answer = await post_export(h.url, retry, good, api=api, tenant="acme")
        assert status == 200 and answer["duplicate"], answer
        rebuilt = build_export(db, {"advisories": {}}, now=later)
        assert rebuilt is not None and rebuilt["exportId"] == body["exportId"]
        async with api:
            status, answer = await post_export(h.url, rebuilt, good, api=api, tenant="acme")
        assert status == 202 and answer["revision"] == 2, answer
    finally:
        await stop(h)
        await drop_streams(nats_server.url, prefix)
