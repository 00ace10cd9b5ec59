"""Where a client's access tokens come from: a static token given to the command, or the
issuer's token endpoint (OAuth 2.0 client credentials, RFC 6749 §4.4) — DPoP-bound to the
client's key either way (RFC 9449 §5), one token per tenant. There is no anonymous fallback:
without a token source a command refuses to start, and a token that cannot be had is an error.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Protocol

import aiohttp
import msgspec

from streamproc.client.dpop import DpopKey
from streamproc.config import ConfigError
from streamproc.jose import unverified_claims

NONCE_HEADER = "DPoP-Nonce"
REFRESH_MARGIN_S = 30.0
"""A cached token is renewed once it has less than this (or a tenth of its life) left."""


class TokenRefused(ConfigError):
    """The token cannot be used: the issuer refused the client, or the token is not bound
    to this client's key or names another tenant. Fix the configuration; retrying won't."""


class TokenUnavailable(RuntimeError):
    """The issuer's token endpoint cannot be reached or failed (5xx, timeout): try again."""


class TokenSource(Protocol):
    async def token(self, http: aiohttp.ClientSession, tenant: str | None) -> str:
        """A token for ``tenant`` (``None``: the source's own tenant)."""
        ...

    def refused(self, token: str) -> bool:
        """The gateway refused ``token`` as invalid; True when asking again may give another."""
        ...


def _check_binding(token: str, key: DpopKey, where: str) -> dict[str, Any]:
    claims = unverified_claims(token) or {}
    cnf = claims.get("cnf")
    jkt = cnf.get("jkt") if isinstance(cnf, dict) else None
    if claims and jkt is None:
        raise TokenRefused(
            f"{where} is not DPoP-bound (no cnf.jkt): this client presents only tokens bound "
            f"to its key {key.jkt} ({key.path}); mint one with --jkt={key.jkt}"
        )
    if jkt is not None and jkt != key.jkt:
        raise TokenRefused(
            f"{where} is bound to the key {jkt}, not to this client's key {key.jkt} "
            f"({key.path}); mint one with --jkt={key.jkt}"
        )
    return claims


class StaticToken:
    """One token given to the command (``--token`` or an environment variable): one tenant."""

    def __init__(self, token: str, key: DpopKey, *, where: str = "the token") -> None:
        self.value = token.strip()
        claims = _check_binding(self.value, key, where)
        tenant = claims.get("tenant")
        self.tenant: str | None = tenant if isinstance(tenant, str) else None

    async def token(self, http: aiohttp.ClientSession, tenant: str | None) -> str:
        if tenant is not None and self.tenant is not None and tenant != self.tenant:
            raise TokenRefused(
                f"the static token is for tenant {self.tenant}, not {tenant}: a static token "
                "serves one tenant (use client credentials for several)"
            )
        return self.value

    def refused(self, token: str) -> bool:
        return False


class _TokenAnswer(msgspec.Struct):
    access_token: str
    token_type: str
    expires_in: float | None = None


class ClientCredentials:
    """Tokens from the issuer's token endpoint, one per tenant, cached until near expiry.

    The request is ``grant_type=client_credentials`` with ``scope`` and ``tenant``, the client
    authenticated with HTTP Basic (``client_secret_basic``) and a DPoP proof of this client's
    key, so the issuer binds the token to it (``token_type`` must come back ``DPoP``). A
    ``use_dpop_nonce`` answer is retried once with the issuer's nonce."""

    def __init__(
        self,
        token_url: str,
        client_id: str,
        client_secret: str,
        key: DpopKey,
        *,
        scopes: tuple[str, ...] = (),
        clock: Any = time.time,
    ) -> None:
        self.token_url = token_url
        self.basic = aiohttp.encode_basic_auth(client_id, client_secret)
        self.client_id = client_id
        self.key = key
        self.scopes = scopes
        self._clock = clock
        self._cache: dict[str | None, tuple[str, float]] = {}
        self._nonce: str | None = None

    async def token(self, http: aiohttp.ClientSession, tenant: str | None) -> str:
        cached = self._cache.get(tenant)
        if cached is not None and self._clock() < cached[1]:
            return cached[0]
        form = {"grant_type": "client_credentials"}
        if self.scopes:
            form["scope"] = " ".join(self.scopes)
        if tenant is not None:
            form["tenant"] = tenant
        for _ in range(2):
            status, doc, headers = await self._post(http, form)
            if status == 400 and doc.get("error") == "use_dpop_nonce" and NONCE_HEADER in headers:
                self._nonce = headers[NONCE_HEADER]
                continue
            break
        if status >= 500:
            raise TokenUnavailable(f"token endpoint {self.token_url} answered {status}")
        if status != 200:
            what = doc.get("error_description") or doc.get("error") or doc.get("detail") or doc
            raise TokenRefused(
                f"token endpoint {self.token_url} refused client {self.client_id}"
                f"{f' for tenant {tenant}' if tenant else ''} ({status}): {what}"
            )
        try:
            answer = msgspec.convert(doc, _TokenAnswer)
        except msgspec.ValidationError as exc:
            raise TokenRefused(
                f"token endpoint {self.token_url}: not a token answer: {exc}"
            ) from None
        if answer.token_type.lower() != "dpop":
            raise TokenRefused(
                f"token endpoint {self.token_url} issued a {answer.token_type} token, not a "
                "DPoP-bound one: configure the client for DPoP at the issuer"
            )
        _check_binding(answer.access_token, self.key, f"the token from {self.token_url}")
        now = self._clock()
        life = answer.expires_in if answer.expires_in is not None else 300.0
        self._cache[tenant] = (answer.access_token, now + life - max(REFRESH_MARGIN_S, life / 10))
        return answer.access_token

    async def _post(
        self, http: aiohttp.ClientSession, form: dict[str, str]
    ) -> tuple[int, dict[str, Any], Mapping[str, str]]:
        proof = self.key.proof("POST", self.token_url, nonce=self._nonce)
        try:
            async with http.post(
                self.token_url, data=form, headers={"Authorization": self.basic, "DPoP": proof}
            ) as r:
                raw = await r.read()
                if NONCE_HEADER in r.headers:
                    self._nonce = r.headers[NONCE_HEADER]
                try:
                    doc = msgspec.json.decode(raw) if raw else {}
                except msgspec.DecodeError:
                    doc = {"detail": raw[:200].decode(errors="replace")}
                return r.status, doc if isinstance(doc, dict) else {"detail": doc}, r.headers
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise TokenUnavailable(
                f"token endpoint {self.token_url} not reachable: {exc or type(exc).__name__}"
            ) from None

    def refused(self, token: str) -> bool:
        """Forget ``token``: the next request fetches a new one."""
        stale = [t for t, (v, _) in self._cache.items() if v == token]
        for t in stale:
            del self._cache[t]
        return bool(stale)
