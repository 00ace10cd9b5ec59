"""A token issuer's OAuth 2.0 token endpoint for tests (the part of an Authority our clients
talk to): ``client_credentials`` with HTTP Basic client authentication and a DPoP proof,
server nonces (``use_dpop_nonce``, RFC 9449 §8), a tenant per request from the client's
allowed tenants, and DPoP-bound access tokens (``cnf.jkt`` of the proof's key) signed with
the issuer key the gateway under test trusts."""

from __future__ import annotations

import base64
import json
import secrets
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from aiohttp import web
from nacl.signing import SigningKey

from streamproc.gateway.auth import jwt
from streamproc.gateway.auth.dpop import _public_jwk

PATH = "/oauth/token"


@dataclass
class Client:
    secret: str
    tenants: tuple[str, ...]
    scopes: tuple[str, ...] = ("scheduler.read",)
    sub: str | None = None
    """The token's ``sub`` (default: the client id); ``client_id`` is always set."""


@dataclass
class Authority:
    issuer: str
    key: SigningKey
    kid: str
    clients: dict[str, Client]
    ttl: int = 600
    bearer_only: bool = False
    """Issue unbound (``Bearer``) tokens: a misconfigured issuer."""
    fail: int = 0
    """Answer this many requests with 503 first."""
    requests: list[dict[str, str]] = field(default_factory=list)
    nonce: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    url: str = ""

    async def handle(self, request: web.Request) -> web.Response:
        form = {k: str(v) for k, v in (await request.post()).items()}
        self.requests.append(form)
        if self.fail:
            self.fail -= 1
            return web.json_response({"error": "temporarily_unavailable"}, status=503)
        auth = request.headers.get("Authorization", "")
        cid, _, secret = base64.b64decode(auth.removeprefix("Basic ")).decode().partition(":")
        client = self.clients.get(cid)
        if client is None or not secrets.compare_digest(client.secret, secret):
            return web.json_response({"error": "invalid_client"}, status=401)
        if form.get("grant_type") != "client_credentials":
            return web.json_response({"error": "unsupported_grant_type"}, status=400)
        try:
            proof = jwt.parse(request.headers["DPoP"], jwt.PROOF_ALGS)
            verify, jkt = _public_jwk(proof.header.jwk, proof.header.alg)
            assert verify(proof)
            claims = json.loads(proof.payload)
            assert claims["htm"] == "POST" and claims["htu"] == self.url
        except Exception as exc:  # any bad proof gets the same answer
            return web.json_response(
                {"error": "invalid_dpop_proof", "error_description": str(exc)}, status=400
            )
        if claims.get("nonce") != self.nonce:
            return web.json_response(
                {"error": "use_dpop_nonce"}, status=400, headers={"DPoP-Nonce": self.nonce}
            )
        tenant = form.get("tenant")
        if tenant not in client.tenants:
            return web.json_response(
                {"error": "invalid_request", "error_description": f"tenant {tenant} not allowed"},
                status=400,
            )
        scopes = [s for s in form.get("scope", "").split() if s in client.scopes]
        now = int(time.time())
        body = {
            "iss": self.issuer, "aud": "scheduler", "sub": client.sub or cid, "client_id": cid,
            "tenant": tenant, "scope": " ".join(scopes), "iat": now, "nbf": now,
            "exp": now + self.ttl, "jti": uuid.uuid4().hex,
        }  # fmt: skip
        if not self.bearer_only:
            body["cnf"] = {"jkt": jkt}
        token = jwt.sign(body, self.key, {"typ": "at+jwt", "kid": self.kid})
        return web.json_response(
            {
                "access_token": token,
                "token_type": "Bearer" if self.bearer_only else "DPoP",
                "expires_in": self.ttl,
            },
            headers={"DPoP-Nonce": self.nonce},
        )


@asynccontextmanager
async def running(authority: Authority) -> AsyncIterator[Authority]:
    app = web.Application()
    app.router.add_post(PATH, authority.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    authority.url = f"http://127.0.0.1:{port}{PATH}"
    try:
        yield authority
    finally:
        await runner.cleanup()
