"""Calling the gateway as a client of ours does: every request carries ``Authorization: DPoP
<token>`` and a fresh proof of the client's key; the server's ``DPoP-Nonce`` is kept per
origin and a ``use_dpop_nonce`` challenge is answered by sending the request once more with
it. A token the gateway calls invalid is asked for again once (client credentials).

    async with ApiClient(key, tokens, timeout_s=30) as api:
        reply = await api.request("GET", f"{base}/api/v1/scheduler/schedules")
"""

from __future__ import annotations

import re
from typing import Any

import aiohttp
import msgspec
from multidict import CIMultiDictProxy
from yarl import URL

from streamproc.client.dpop import DpopKey
from streamproc.client.tokens import NONCE_HEADER, TokenSource

_ERROR = re.compile(r'error="([^"]*)"')


class Unreachable(RuntimeError):
    """No answer from the gateway (connection refused or reset, timeout): try again."""


class Reply(msgspec.Struct, frozen=True):
    status: int
    headers: CIMultiDictProxy[str]
    body: bytes

    def json(self) -> Any:
        """The body as JSON; a body that is not JSON as ``{"detail": <its start>}``."""
        try:
            return msgspec.json.decode(self.body) if self.body else {}
        except msgspec.DecodeError:
            return {"detail": self.body[:300].decode(errors="replace")}

    def detail(self) -> str:
        doc = self.json()
        if isinstance(doc, dict):
            return str(doc.get("detail") or doc.get("title") or doc)
        return str(doc)

    def auth_error(self) -> str | None:
        """The ``error`` of a DPoP/Bearer challenge (``use_dpop_nonce``, ``invalid_token``)."""
        for value in self.headers.getall("WWW-Authenticate", []):
            m = _ERROR.search(value)
            if m:
                return m.group(1)
        return None


def origin(url: str) -> str:
    u = URL(url)
    return f"{u.scheme}://{u.host}:{u.port}"


class ApiClient:
    def __init__(self, key: DpopKey, tokens: TokenSource, *, timeout_s: float = 30.0) -> None:
        self.key = key
        self.tokens = tokens
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._http: aiohttp.ClientSession | None = None
        self._nonces: dict[str, str] = {}

    async def __aenter__(self) -> ApiClient:
        self._http = aiohttp.ClientSession(timeout=self.timeout)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    @property
    def http(self) -> aiohttp.ClientSession:
        assert self._http is not None, "use ApiClient as an async context manager"
        return self._http

    async def request(
        self, method: str, url: str, *, tenant: str | None = None, **kw: Any
    ) -> Reply:
        """One call, DPoP-signed; ``kw`` as for aiohttp (``params``, ``json``, ``data``,
        ``headers``). Raises :class:`Unreachable`, or the token source's errors."""
        token = await self.tokens.token(self.http, tenant)
        reply = await self._send(method, url, token, kw)
        if reply.status == 401 and reply.auth_error() == "use_dpop_nonce":
            reply = await self._send(method, url, token, kw)  # with the nonce just received
        if (
            reply.status == 401
            and reply.auth_error() == "invalid_token"
            and self.tokens.refused(token)
        ):
            token = await self.tokens.token(self.http, tenant)
            reply = await self._send(method, url, token, kw)
            if reply.status == 401 and reply.auth_error() == "use_dpop_nonce":
                reply = await self._send(method, url, token, kw)
        return reply

    async def _send(self, method: str, url: str, token: str, kw: dict[str, Any]) -> Reply:
        where = origin(url)
        proof = self.key.proof(method, url, access_token=token, nonce=self._nonces.get(where))
        headers = {**kw.get("headers", {}), "Authorization": f"DPoP {token}", "DPoP": proof}
        try:
            async with self.http.request(method, url, **{**kw, "headers": headers}) as r:
                body = await r.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise Unreachable(f"{where} not reachable: {exc or type(exc).__name__}") from None
        nonce = r.headers.get(NONCE_HEADER)
        if nonce:
            self._nonces[where] = nonce
        return Reply(r.status, r.headers, body)
