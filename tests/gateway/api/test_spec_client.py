"""A client written from the specification alone (docs/conformance.md, §5.3, §5.4, §8):
it sends both webhooks — the document's bodies, signed, with an Authority token bound by
DPoP (scope `scheduler.admin`: the document knows no other writing scope) — and previews the
export it sent, by its `exportId`, with the document's field names. No answer is a 4xx."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from pathlib import Path

import aiohttp

from streamproc import roles
from streamproc.natsd.server import EmbeddedNats
from tests.gateway.conftest import drop_streams
from tests.gateway.harness import (
    BASE,
    HMAC_SECRET,
    VEXER_KEYS,
    default_settings,
    dpop_jkt,
    dpop_proof,
    start,
    stop,
    token,
)


class SpecClient:
    """Signs as §5.4 says (``X-Scheduler-Signature``, HMAC-SHA256 or Ed25519) and presents a
    DPoP-bound token as §8 says, answering the server's nonce challenge (RFC 9449)."""

    def __init__(self, base: str, scopes: str) -> None:
        self.base = base
        self.token = token("acme", scopes, cnf={"jkt": dpop_jkt()})
        self.nonce: str | None = None
        self.session = aiohttp.ClientSession()

    async def post(self, path: str, doc: dict, sign: str | None = None) -> tuple[int, dict]:  # type: ignore[type-arg]
        raw = json.dumps(doc).encode()
        ts = str(int(time.time()))
        headers = {
            "Content-Type": "application/json",
            "X-Scheduler-Timestamp": ts,
            "X-Scheduler-Delivery": uuid.uuid4().hex,
        }
        signed = ts.encode() + b"." + raw
        if sign == "hmac":
            mac = hmac.new(HMAC_SECRET.encode(), signed, hashlib.sha256).hexdigest()
            headers["X-Scheduler-Signature"] = f"sha256={mac}"
        elif sign == "ed25519":
            sig = VEXER_KEYS[0].sign(signed).signature
            headers["X-Scheduler-Signature"] = "ed25519=" + base64.b64encode(sig).decode()
        url = self.base + BASE + path
        for _ in range(2):
            proof = dpop_proof("POST", url, self.token, nonce=self.nonce)
            auth = {"Authorization": f"DPoP {self.token}", "DPoP": proof}
            async with self.session.post(url, data=raw, headers={**headers, **auth}) as r:
                self.nonce = r.headers.get("DPoP-Nonce", self.nonce)
                answer = await r.json(content_type=None)
                if r.status == 401 and answer.get("reason") == "use_dpop_nonce":
                    continue
                return r.status, answer
        raise AssertionError("the nonce challenge repeated")


async def test_a_client_from_the_specification_sends_both_webhooks_and_previews_the_export(
    tmp_path: Path, nats_server: EmbeddedNats, prefix: str
) -> None:
    settings = default_settings(tmp_path, required_modes=["dpop", "mtls"])
    h = await start(tmp_path, nats_server.url, prefix, settings, also=("planner",))
    hook = SpecClient(h.url, "scheduler.admin")
    reader = SpecClient(h.url, "scheduler.read")
    try:
        status, answer = await hook.post(
            "/events/feedser-export",
            {
                "exportId": "2025-10-18.1",
                "changedProductKeys": ["pkg:rpm/openssl"],
                "kev": ["CVE-2025-0001"],
                "window": {"from": "2025-10-17T00:00:00Z", "to": "2025-10-18T00:00:00Z"},
            },
            sign="hmac",
        )
        assert status == 202 and answer["exportId"] == "2025-10-18.1", answer
        status, answer = await hook.post(
            "/events/vexer-export",
            {
                "exportId": "vex-2025-10-18.1",
                "changedClaims": [
                    {
                        "productKey": "pkg:deb/debian/openssl",
                        "vulnId": "CVE-2025-0002",
                        "status": "not_affected→affected",
                    }
                ],
            },
            sign="ed25519",
        )
        assert status == 202 and answer["exportId"] == "vex-2025-10-18.1", answer
        await h.system.contexts["gateway-test"].wait_for(await h.last_seq(), 5)
        await h.system.projectors["planner"].wait_for(await h.last_seq(), 10)
        for export_id in ("2025-10-18.1", "vex-2025-10-18.1"):
            status, answer = await reader.post("/preview/impact", {"exportId": export_id})
            assert status == 200, answer
            assert answer["count"] == 0 and answer["sample"] == [], "no image indexed"
            assert answer["projectedDeltas"] == 0 and answer["projectedKev"] == 0
    finally:
        await hook.session.close()
        await reader.session.close()
        await stop(h)
        roles.ROLES.pop("gateway-test", None)
        await drop_streams(nats_server.url, prefix)
