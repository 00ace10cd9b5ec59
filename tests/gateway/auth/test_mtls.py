"""mTLS over a real TLS listener on 127.0.0.1 (certificates made by the openssl CLI):
certificate-bound tokens (RFC 8705) and webhook sources authenticated by certificate."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import time
from pathlib import Path

import aiohttp
import msgspec
import pytest

from streamproc.gateway.auth.tls import x5t_s256
from streamproc.gateway.settings import SourceMtls, Tls, WebhookSource
from streamproc.natsd.server import EmbeddedNats, free_port
from tests.gateway.conftest import drop_streams
from tests.gateway.harness import BASE, default_settings, start, stop, token

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_pki(d: Path) -> dict[str, Path]:
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl(
        "req",
        "-x509",
        *ec,
        "-keyout",
        str(d / "ca.key"),
        "-out",
        str(d / "ca.pem"),
        "-days",
        "2",
        "-subj",
        "/CN=test-ca",
    )
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for name, subj, ext in [
        ("server", "/CN=127.0.0.1", "server.ext"),
        ("client", "/CN=feedser.client", "client.ext"),
        ("other", "/CN=someone.else", "client.ext"),
    ]:
        openssl(
            "req",
            *ec,
            "-keyout",
            str(d / f"{name}.key"),
            "-out",
            str(d / f"{name}.csr"),
            "-subj",
            subj,
        )
        openssl(
            "x509",
            "-req",
            "-in",
            str(d / f"{name}.csr"),
            "-CA",
            str(d / "ca.pem"),
            "-CAkey",
            str(d / "ca.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            str(d / ext),
            "-out",
            str(d / f"{name}.pem"),
        )
    return {n: d / f"{n}.pem" for n in ("ca", "server", "client", "other")}


def client_ctx(pki: dict[str, Path], who: str | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki["ca"]))
    if who:
        ctx.load_cert_chain(str(pki[who]), str(pki[who].with_suffix(".key")))
    return ctx


async def test_certificate_bound_tokens_and_certificate_webhooks(
    tmp_path: Path, nats_server: EmbeddedNats, prefix: str
) -> None:
    pki = make_pki(tmp_path)
    port = free_port()
    base = default_settings(tmp_path)
    settings = msgspec.structs.replace(
        base,
        required_modes=["mtls"],
        tls=Tls(
            host="127.0.0.1",
            port=port,
            cert_file=str(pki["server"]),
            key_file=str(pki["server"].with_suffix(".key")),
            client_ca_files=[str(pki["ca"])],
        ),
        webhooks=[
            *base.webhooks,
            WebhookSource(
                name="feedser-mtls",
                kind="feedser",
                tenants=["acme"],
                mtls=SourceMtls(ca_file=str(pki["ca"]), subjects=["feedser.client"]),
            ),
        ],
    )
    h = await start(tmp_path, nats_server.url, prefix, settings)
    tls_url = f"https://127.0.0.1:{port}"
    der = ssl.PEM_cert_to_DER_cert(pki["client"].read_text())
    bound = token(cnf={"x5t#S256": x5t_s256(der)})
    try:

        async def get(who: str | None, tok: str, url: str = tls_url) -> tuple[int, dict]:
            conn = aiohttp.TCPConnector(
                ssl=client_ctx(pki, who) if url.startswith("https") else False
            )
            async with (
                aiohttp.ClientSession(connector=conn) as s,
                s.get(f"{url}{BASE}/schedules", headers={"Authorization": f"Bearer {tok}"}) as r,
            ):
                return r.status, await r.json(content_type=None)

        status, body = await get("client", bound)
        assert status == 200, body
        status, body = await get("other", bound)
        assert status == 401 and "not the one" in body["detail"]
        status, body = await get(None, bound)
        assert status == 401 and "none was presented" in body["detail"]
        status, body = await get("client", bound, h.url)  # plain HTTP: no certificate at all
        assert status == 401
        status, body = await get("client", token())  # unbound: refused when only mtls is allowed
        assert status == 401 and "sender-constrained" in body["detail"]

        hook_token = token(scopes="scheduler.webhook", cnf={"x5t#S256": x5t_s256(der)})

        async def hook(who: str | None, export_id: str, tok: str | None = hook_token):
            body = msgspec.json.encode({"exportId": export_id})
            headers = {
                "Content-Type": "application/json",
                "X-Scheduler-Source": "feedser-mtls",
                "X-Scheduler-Timestamp": str(int(time.time())),
                "X-Scheduler-Delivery": f"d-{export_id}",
            }
            if tok is not None:
                headers["Authorization"] = f"Bearer {tok}"
            conn = aiohttp.TCPConnector(ssl=client_ctx(pki, who))
            async with (
                aiohttp.ClientSession(connector=conn) as s,
                s.post(f"{tls_url}{BASE}/events/feedser-export", data=body, headers=headers) as r,
            ):
                return r.status, await r.json(content_type=None)

        seq = await h.last_seq()
        status, res = await hook("client", "m-1")
        assert status == 202 and [e["tenant"] for e in res["events"]] == ["acme"]
        for who in ("other", None):
            status, res = await hook(who, "m-2")
            assert status == 401, res
        # The certificate authenticates the source; the token, bound to that certificate,
        # is still required (and an unbound one refused where only mtls is admitted).
        status, res = await hook("client", "m-3", None)
        assert status == 401 and res["detail"] == "an access token is required", res
        status, res = await hook("client", "m-3", token(scopes="scheduler.webhook"))
        assert status == 401 and "sender-constrained" in res["detail"], res
        assert await h.last_seq() == seq + 1
    finally:
        await stop(h)
        await drop_streams(nats_server.url, prefix)
