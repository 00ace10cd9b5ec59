"""Authenticating API callers: Ed25519 JWTs from configured issuers, bound to the sender by
DPoP or an mTLS certificate as configured, with tenant and scopes from the token. A token is
an access token (``typ`` ``at+jwt``) with a bounded lifetime, for a tenant its issuer may
speak for: an issuer trusted for one customer cannot mint its way into another's data.

401 means "who are you?" (no, bad, expired or unbound token; bad proof) and carries
``WWW-Authenticate``; 403 means "not allowed" (a missing scope).
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple

import msgspec
from aiohttp import web
from nacl.signing import VerifyKey

from streamproc.gateway.auth import jwt
from streamproc.gateway.auth.dpop import DpopError, DpopVerifier
from streamproc.gateway.auth.replay import ReplayGuard
from streamproc.gateway.auth.tls import peer_cert_der, x5t_s256
from streamproc.gateway.settings import GatewaySettings, Issuer, resolve_ref
from streamproc.ids import TENANT_RE
from streamproc.names import (
    ADMIN_SCOPE,
    IMAGES_WRITE_SCOPE,
    READ_SCOPE,
    REALM,
    VEX_WRITE_SCOPE,
    WEBHOOK_SCOPE,
)
from streamproc.problems import ProblemError

READ = READ_SCOPE
ADMIN = ADMIN_SCOPE
IMAGES_WRITE = IMAGES_WRITE_SCOPE
VEX_WRITE = VEX_WRITE_SCOPE
WEBHOOK = WEBHOOK_SCOPE
ADMIN_IMPLIES = frozenset({READ, IMAGES_WRITE, VEX_WRITE, WEBHOOK})
_CACHE_MAX = 20_000


class Principal(NamedTuple):
    tenant: str
    subject: str | None
    scopes: frozenset[str]
    mode: str
    client_ids: frozenset[str] = frozenset()
    """Who the token says the client is: its ``client_id``, ``azp`` and ``sub`` claims."""


PRINCIPAL = web.RequestKey("principal", Principal)
"""The caller a handler authenticated itself (the webhooks, whose token is per source)."""


_claims_dec = msgspec.json.Decoder(jwt.Claims)


def issuer_keys(s: GatewaySettings, env: Mapping[str, str]) -> dict[str, tuple[Issuer, VerifyKey]]:
    """Every configured token signing key by ``kid``: (issuer, key); raises for a key that
    cannot be read or decoded."""
    return {
        k.kid: (iss, VerifyKey(jwt.decode_key(resolve_ref(k.public_key, env))))
        for iss in s.issuers
        for k in iss.keys
    }


class Authenticator:
    def __init__(
        self,
        s: GatewaySettings,
        replay: ReplayGuard,
        clock: Callable[[], float] = time.time,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """``env``: what ``env:NAME`` secret references name (the process's configuration)."""
        self.s = s
        self._clock = clock
        self.modes = frozenset(s.required_modes)
        self.keys = issuer_keys(s, env or {})
        self.token_types = frozenset(jwt.media_type(t) for t in s.token_types)
        self._verified: dict[str, tuple[Issuer, jwt.Claims]] = {}
        self.dpop = DpopVerifier(s.dpop, replay, clock, env)

    # ------------------------------------------------------------------ challenges

    def challenges(
        self, error: str | None = None, description: str = "", scheme: str | None = None
    ) -> list[tuple[str, str]]:
        params = ""
        if error:
            # RFC 6750 §3: printable ASCII without '"' and '\\'
            ascii_only = description.encode("ascii", "backslashreplace").decode()
            safe = ascii_only.replace('"', "'").replace("\\", "/")
            params = f', error="{error}", error_description="{safe}"'
        out = []
        if self.modes & {"bearer", "mtls"}:
            p = params if scheme in (None, "bearer") else ""
            out.append(("WWW-Authenticate", f'Bearer realm="{REALM}"{p}'))
        if "dpop" in self.modes:
            p = params if scheme in (None, "dpop") else ""
            out.append(("WWW-Authenticate", f'DPoP realm="{REALM}", algs="EdDSA ES256"{p}'))
        return out

    def _fail(self, description: str, scheme: str | None, error: str = "invalid_token") -> None:
        headers = self.challenges(error, description, scheme)
        if error == "use_dpop_nonce" or (scheme == "dpop" and self.s.dpop.require_nonce):
            headers.append(("DPoP-Nonce", self.dpop.nonce()))
        raise ProblemError(401, "unauthorized", description, headers=headers, reason=error)

    # ------------------------------------------------------------------ tokens

    def _claims(self, token: str, scheme: str) -> tuple[Issuer, jwt.Claims]:
        """The issuer and claims of a token whose form and signature check out (cached)."""
        verified = self._verified.get(token)
        if verified is not None:
            return verified
        try:
            c = jwt.parse(token)
        except jwt.JwtError as exc:
            self._fail(f"malformed token: {exc}", scheme)
            raise  # unreachable; keeps type checkers content
        if jwt.media_type(c.header.typ) not in self.token_types:
            wanted = " or ".join(sorted(t for t in self.token_types if t))
            found = f"not {c.header.typ[:40]!r}" if c.header.typ is not None else "it has none"
            self._fail(f"token typ must be {wanted} (an access token); {found}", scheme)
        entry = self.keys.get(c.header.kid or "")
        if entry is None:
            self._fail("unknown signing key (kid)", scheme)
        assert entry is not None
        issuer, key = entry
        if not jwt.verify(c, key):
            self._fail("token signature does not verify", scheme)
        try:
            claims = _claims_dec.decode(c.payload)
        except msgspec.DecodeError as exc:
            self._fail(f"token claims: {exc}", scheme)
            raise
        if claims.iss != issuer.issuer:
            self._fail("token issuer does not match its signing key", scheme)
        if len(self._verified) >= _CACHE_MAX:
            self._verified.clear()
        self._verified[token] = (issuer, claims)
        return issuer, claims

    async def authenticate(self, request: web.Request, scope: str) -> Principal:
        """The caller, or ProblemError 401/403 with the right challenge."""
        header = request.headers.get("Authorization")
        if not header:
            raise ProblemError(
                401, "unauthorized", "an access token is required", headers=self.challenges()
            )
        kind, _, token = header.partition(" ")
        scheme = kind.lower()
        token = token.strip()
        if scheme not in ("bearer", "dpop") or not token:
            self._fail(
                "Authorization must be 'Bearer <token>' or 'DPoP <token>'", None, "invalid_request"
            )
        issuer, claims = self._claims(token, scheme)
        now = self._clock()
        leeway = self.s.leeway_s
        if now > claims.exp + leeway:
            self._fail("token expired", scheme)
        if claims.iat is None:
            self._fail("token has no iat claim (its lifetime cannot be bounded)", scheme)
        assert claims.iat is not None
        lifetime = self.s.max_token_lifetime_s
        if claims.exp - claims.iat > lifetime:
            self._fail(
                f"token lifetime (exp - iat) of {claims.exp - claims.iat:.0f} s exceeds the "
                f"maximum of {lifetime} s",
                scheme,
            )
        if claims.nbf is not None and now + leeway < claims.nbf:
            self._fail("token not yet valid (nbf)", scheme)
        if claims.iat is not None and now + leeway < claims.iat:
            self._fail("token issued in the future (iat)", scheme)
        aud = claims.aud if isinstance(claims.aud, list) else [claims.aud]
        if self.s.audience not in aud:
            self._fail(f"token audience is not {self.s.audience}", scheme)
        if not claims.tenant or not TENANT_RE.match(claims.tenant):
            self._fail("token has no valid tenant claim", scheme)
        assert claims.tenant is not None
        if not issuer.speaks_for(claims.tenant):
            self._fail(f"issuer {issuer.issuer} may not speak for tenant {claims.tenant}", scheme)
        mode = await self._binding(request, claims, token, scheme)
        scopes = frozenset((claims.scope or "").split()) | frozenset(claims.scp or ())
        if ADMIN in scopes:
            scopes |= ADMIN_IMPLIES
        if scope not in scopes:
            raise ProblemError(
                403,
                "insufficient-scope",
                f"this operation needs scope {scope}",
                headers=[
                    (
                        "WWW-Authenticate",
                        f'{"DPoP" if scheme == "dpop" else "Bearer"} realm="{REALM}", '
                        f'error="insufficient_scope", scope="{scope}"',
                    )
                ],
                reason="insufficient_scope",
            )
        ids = frozenset(i for i in (claims.client_id, claims.azp, claims.sub) if i)
        return Principal(claims.tenant, claims.sub, scopes, mode, ids)

    async def _binding(
        self, request: web.Request, claims: jwt.Claims, token: str, scheme: str
    ) -> str:
        """How the token is bound to this sender: dpop, mtls, or bearer (unbound)."""
        cnf = claims.cnf
        if cnf is not None and cnf.jkt:
            if scheme != "dpop":
                self._fail("a DPoP-bound token must be sent with the DPoP scheme", scheme)
            if "dpop" not in self.modes:
                self._fail("DPoP is not accepted by this server", scheme)
            proofs = request.headers.getall("DPoP", [])
            if len(proofs) != 1:
                self._fail(
                    "exactly one DPoP proof header is required", "dpop", "invalid_dpop_proof"
                )
            try:
                await self.dpop.verify(
                    proofs[0],
                    method=request.method,
                    url=self.request_url(request),
                    access_token=token,
                    jkt=cnf.jkt,
                )
            except DpopError as exc:
                self._fail(exc.description, "dpop", exc.error)
                raise
            return "dpop"
        if scheme == "dpop":
            self._fail("the token is not DPoP-bound (no cnf.jkt)", scheme)
        if cnf is not None and cnf.x5t_s256:
            der = peer_cert_der(request)
            if der is None:
                self._fail("the token is bound to a client certificate; none was presented", scheme)
            assert der is not None
            if "mtls" not in self.modes:
                self._fail("mTLS-bound tokens are not accepted by this server", scheme)
            if not hmac.compare_digest(x5t_s256(der), cnf.x5t_s256):
                self._fail("the client certificate is not the one the token is bound to", scheme)
            return "mtls"
        if "bearer" not in self.modes:
            self._fail("the token must be sender-constrained (DPoP or mTLS)", scheme)
        return "bearer"

    def request_url(self, request: web.Request) -> str:
        base = self.s.public_base_url
        if base:
            return base.rstrip("/") + request.rel_url.raw_path
        return str(request.url.with_query(None).with_fragment(None))
