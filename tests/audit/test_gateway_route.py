"""The chain-verify route as mounted in a real process: gateway auth, tenant isolation."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import aiohttp
import pytest
from nacl.signing import SigningKey

from streamproc.app import System
from streamproc.bus.server import EmbeddedNats, free_port
from streamproc.config import Settings
from streamproc.events import payloads as p
from streamproc.events.envelope import new_event
from streamproc.gateway import jwt


def _token(key: SigningKey, kid: str, tenant: str) -> str:
    now = int(time.time())
    claims = {
        "iss": "https://issuer.test", "aud": "scheduler", "sub": "t", "tenant": tenant,
        "scope": "scheduler.read", "iat": now, "nbf": now, "exp": now + 600,
        "jti": uuid.uuid4().hex,
    }  # fmt: skip
    return jwt.sign(claims, key, {"typ": "at+jwt", "kid": kid})


async def test_chain_verify_through_the_gateway(
    nats_server: EmbeddedNats, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = SigningKey.generate()
    config = tmp_path / "gateway.json"
    config.write_text(
        json.dumps(
            {
                "issuers": [
                    {
                        "issuer": "https://issuer.test",
                        "keys": [{"kid": "k1", "public_key": jwt.okp_jwk(key.verify_key)["x"]}],
                    }
                ],
                "required_modes": ["bearer"],
                "access_log": "off",
            }
        )
    )
    monkeypatch.setenv("STREAMPROC_GATEWAY_CONFIG", str(config))
    port = free_port()
    settings = Settings(
        data_dir=tmp_path / "data", nats_url=nats_server.url, prefix=prefix, http_port=port
    )
    system = System(settings, ["gateway", "auditor"])
    await system.start()
    try:
        assert system.clock is not None and system.publisher is not None
        for i in range(3):
            event = new_event(
                "schedule.paused",
                "acme",
                p.ScheduleStateChange(schedule_id=f"s{i}"),
                system.clock.now(),
            )
            ack = await system.publisher.publish_event(event)
        await system.projectors["auditor"].wait_for(ack.seq, 10)
        url = f"http://127.0.0.1:{port}/api/v1/scheduler/chain/verify"
        async with aiohttp.ClientSession() as http:
            own = {"Authorization": f"Bearer {_token(key, 'k1', 'acme')}"}
            async with http.get(url, params={"tenantId": "acme"}, headers=own) as r:
                body = await r.json()
                assert r.status == 200, body
                assert body["verified"] is True
                assert body["tenantId"] == "acme"
            other = {"Authorization": f"Bearer {_token(key, 'k1', 'globex')}"}
            async with http.get(url, params={"tenantId": "acme"}, headers=other) as r:
                assert r.status == 404
            async with http.get(url, params={"tenantId": "acme"}) as r:
                assert r.status == 401
    finally:
        await system.close()
