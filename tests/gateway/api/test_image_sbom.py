"""``GET /images/{digest}/sbom``: the SBOM exactly as it was sent, kept in the SBOM store
(a real nats-server, gateway and read model)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from streamproc.bus import objects
from streamproc.names import sbom_bucket
from tests.gateway.harness import BASE, Harness, token
from tests.helpers import eventually

IMAGES = f"{BASE}/images"
SBOMS = Path(__file__).parents[2] / "data" / "sboms"
D = "sha256:" + "ab" * 32


def put_body(sbom: bytes) -> bytes:
    """A PUT body that embeds ``sbom`` as it is: odd spacing, key order and all."""
    return b'{"repository": "ghcr.io/acme/app", "sbom":' + sbom + b"  }"


async def raw_get(gw: Harness, path: str, tok: str) -> tuple[int, bytes, str]:
    headers = {"Authorization": f"Bearer {tok}"}
    async with gw.session.get(gw.url + path, headers=headers) as r:
        return r.status, await r.read(), r.headers.get("Content-Type", "")


async def test_the_bytes_that_were_sent_come_back(gw: Harness, prefix: str) -> None:
    original = (SBOMS / "debian-base.cdx15.json").read_bytes()
    sent = b"\n  " + original.replace(b'"bomFormat"', b'"bomFormat" ', 1).strip() + b"\n"
    status, res, _ = await gw.call(
        "PUT", f"{IMAGES}/{D}", tok=token(), data=put_body(sent),
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    assert status == 202, res
    key = "sha256:" + hashlib.sha256(sent.strip()).hexdigest()

    async def view() -> object:
        s, v, _ = await gw.call("GET", f"{IMAGES}/{D}", tok=token())
        return v if s == 200 else None

    shown = await eventually(view, what="the image")
    assert shown["sbom"] == key  # type: ignore[index]
    reader = token(scopes="scheduler.read")
    status, data, ctype = await raw_get(gw, f"{IMAGES}/{D}/sbom", reader)
    assert status == 200 and ctype == "application/json"
    assert data == sent.strip()  # msgspec.Raw: the value's bytes, without the whitespace around
    assert gw.system.nc is not None
    assert await objects.get(gw.system.nc, sbom_bucket(prefix), key) == data


async def test_other_tenants_scopes_and_unknown_images(gw: Harness) -> None:
    sbom = (SBOMS / "debian-base.cdx15.json").read_bytes()
    status, _, _ = await gw.call(
        "PUT", f"{IMAGES}/{D}", tok=token(), data=put_body(sbom),
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    assert status == 202

    async def ready() -> bool:
        return (await raw_get(gw, f"{IMAGES}/{D}/sbom", token()))[0] == 200

    await eventually(ready, what="the SBOM")
    # another tenant: 404 as for every image route (the digest is not theirs to know about)
    status, body, _ = await raw_get(gw, f"{IMAGES}/{D}/sbom", token("globex"))
    assert status == 404 and b"not-found" in body
    status, _, _ = await raw_get(gw, f"{IMAGES}/{D}/sbom", token(scopes="scheduler.images.write"))
    assert status == 403
    status, body, _ = await raw_get(gw, f"{IMAGES}/sha256:{'cd' * 32}/sbom", token())
    assert status == 404
    status, body, _ = await raw_get(gw, f"{IMAGES}/nope/sbom", token())
    assert status == 400
