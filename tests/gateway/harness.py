"""A real gateway for tests: the gateway role in a System (real nats-server, RocksDB,
aiohttp on 127.0.0.1), plus clients that mint tokens, DPoP proofs and signed webhooks."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
from nacl.signing import SigningKey

from streamproc import roles
from streamproc.bus import jsapi
from streamproc.bus.services import Served
from streamproc.config import Settings
from streamproc.gateway.auth import jwt
from streamproc.gateway.auth.dpop import access_token_hash
from streamproc.gateway.role import make_mount
from streamproc.gateway.settings import GatewaySettings
from streamproc.names import WEBHOOK_SCOPE
from streamproc.natsd.server import free_port
from streamproc.planner.service import PreviewIndex, serve_previews
from streamproc.readmodel import READ_MODEL
from streamproc.roles import System
from streamproc.runtime.reactor import RoleSpec
from tests.helpers import env_configuration

BASE = "/api/v1/scheduler"
ISSUER = "https://authority.test"
HMAC_SECRET = "feedser-shared-secret-0123456789"
ISSUER_KEY = SigningKey(b"\x01" * 32)
OTHER_KEY = SigningKey(b"\x02" * 32)
DPOP_KEY = SigningKey(b"\x03" * 32)
VEXER_KEYS = [SigningKey(b"\x04" * 32), SigningKey(b"\x05" * 32)]


def default_settings(tmp: Path, *, tokenless: bool = False, **over: Any) -> GatewaySettings:
    """Two webhook sources: ``feedser-main`` (HMAC; tenants acme and globex) and
    ``vexer-main`` (Ed25519; acme). Both take a token unless ``tokenless``: then their
    signatures alone record for every tenant they list (``require_token = false``)."""
    secret_file = tmp / "feedser.secret"
    secret_file.write_text(HMAC_SECRET + "\n")
    raw: dict[str, Any] = {
        "issuers": [
            {
                "issuer": ISSUER,
                "tenants": ["*"],
                "keys": [{"kid": "k1", "public_key": jwt.b64url(bytes(ISSUER_KEY.verify_key))}],
            }
        ],
        "required_modes": ["bearer", "dpop", "mtls"],
        "webhooks": [
            {
                "name": "feedser-main",
                "kind": "feedser",
                "tenants": ["acme", "globex"],
                "hmac_secrets": [f"file:{secret_file}"],
            },
            {
                "name": "vexer-main",
                "kind": "vexer",
                "tenants": ["acme"],
                "ed25519_public_keys": [jwt.b64url(bytes(k.verify_key)) for k in VEXER_KEYS],
            },
        ],
        "access_log": str(tmp / "access.log"),
        "wait_timeout_s": 5,
    }
    if tokenless:
        for source in raw["webhooks"]:
            source["require_token"] = False
    raw.update(over)
    return msgspec.convert(raw, GatewaySettings)


def token(
    tenant: str = "acme",
    scopes: str = "scheduler.admin",
    *,
    key: SigningKey = ISSUER_KEY,
    kid: str = "k1",
    ttl: int = 600,
    typ: str | None = "at+jwt",
    **claims: Any,
) -> str:
    now = int(time.time())
    body: dict[str, Any] = {
        "iss": ISSUER,
        "aud": "scheduler",
        "sub": "tester",
        "tenant": tenant,
        "scope": scopes,
        "iat": now,
        "nbf": now,
        "exp": now + ttl,
    }
    body.update(claims)
    body = {k: v for k, v in body.items() if v is not None}
    return jwt.sign(body, key, {"kid": kid, **({"typ": typ} if typ else {})})


def dpop_proof(
    method: str,
    url: str,
    tok: str,
    *,
    nonce: str | None = None,
    key: SigningKey = DPOP_KEY,
    jti: str | None = None,
    iat: float | None = None,
    **extra: Any,
) -> str:
    claims: dict[str, Any] = {
        "jti": jti or uuid.uuid4().hex,
        "htm": method,
        "htu": url,
        "iat": int(iat if iat is not None else time.time()),
        "ath": access_token_hash(tok),
    }
    if nonce:
        claims["nonce"] = nonce
    claims.update(extra)
    return jwt.sign(
        {k: v for k, v in claims.items() if v is not None},
        key,
        {"typ": "dpop+jwt", "jwk": jwt.okp_jwk(key.verify_key)},
    )


def dpop_jkt(key: SigningKey = DPOP_KEY) -> str:
    return jwt.jwk_thumbprint(jwt.okp_jwk(key.verify_key))


def signed_headers(
    body: bytes,
    *,
    secret: str = HMAC_SECRET,
    ts: int | None = None,
    delivery: str | None = None,
    scheme: str = "sha256",
    ed_key: SigningKey | None = None,
    tenant: str | None = "acme",
) -> dict[str, str]:
    """A signed delivery's headers, with a bearer token for ``tenant`` (scope
    ``scheduler.webhook``; none when ``tenant`` is None)."""
    stamp = str(int(time.time()) if ts is None else ts)
    signed = stamp.encode() + b"." + body
    if scheme == "sha256":
        sig = "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    else:
        assert ed_key is not None
        sig = "ed25519=" + base64.b64encode(ed_key.sign(signed).signature).decode()
    headers = {
        "Content-Type": "application/json",
        "X-Scheduler-Signature": sig,
        "X-Scheduler-Timestamp": stamp,
        "X-Scheduler-Delivery": delivery or uuid.uuid4().hex,
    }
    if tenant is not None:
        headers["Authorization"] = f"Bearer {token(tenant, WEBHOOK_SCOPE)}"
    return headers


class Harness:
    def __init__(self, system: System, session: aiohttp.ClientSession) -> None:
        self.system = system
        self.session = session
        self.url = system.http_url
        self.planner: Served | None = None

    @property
    def gateway(self) -> Any:
        from streamproc.gateway.app import GATEWAY

        assert self.system.runner is not None
        return self.system.runner.app[GATEWAY]

    async def last_seq(self) -> int:
        assert self.system.nc is not None
        info = await jsapi.stream_info(self.system.nc, self.system.settings.events_stream)
        assert info is not None
        return info.state.last_seq

    async def call(
        self,
        method: str,
        path: str,
        *,
        tok: str | None = None,
        json: Any = None,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any, aiohttp.typedefs.LooseHeaders]:
        h = dict(headers or {})
        if tok is not None:
            h.setdefault("Authorization", f"Bearer {tok}")
        if json is not None:
            data = msgspec.json.encode(json)
            h.setdefault("Content-Type", "application/json")
        async with self.session.request(method, self.url + path, data=data, headers=h) as r:
            raw = await r.read()
            ctype = r.headers.get("Content-Type", "")
            body = msgspec.json.decode(raw) if raw and "json" in ctype else raw
            return r.status, body, r.headers


async def start(
    tmp: Path,
    nats_url: str,
    prefix: str,
    settings: GatewaySettings,
    *,
    node_id: str = "gw-test",
    also: tuple[str, ...] = (),
    impact: PreviewIndex | None = None,
) -> Harness:
    """A gateway (and the roles ``also``, e.g. the planner) in one System; a second call
    with another ``tmp`` and ``node_id`` is a second replica. With ``impact``, a planner
    preview service answering from that index runs beside it (on NATS, like a planner's)."""
    roles.ROLES["gateway-test"] = RoleSpec(list(READ_MODEL), routes=make_mount(settings))
    s = Settings(
        configuration=env_configuration(),
        data_dir=tmp / "data",
        nats_url=nats_url,
        prefix=prefix,
        http_port=free_port(),
        node_id=node_id,
    )
    system = System(s, ["gateway-test", *also])
    await system.start()
    h = Harness(system, aiohttp.ClientSession())
    if impact is not None:
        assert system.nc is not None
        h.planner = await serve_previews(system.nc, prefix, lambda: impact)
    return h


async def stop(h: Harness) -> None:
    if h.planner is not None:
        await h.planner.stop()
    await h.session.close()
    nc = h.system.nc
    names = h.system.settings.events_stream
    await h.system.close()
    del nc, names
