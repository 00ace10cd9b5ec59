"""DPoP proofs (RFC 9449) signed with Ed25519 (``EdDSA``) or ECDSA P-256 (``ES256``, what a
browser's WebCrypto signs with) keys: signature, ``htm``/``htu``/``iat``/``ath``, the key the
token is bound to, server nonces and a unique ``jti``.

Nonces are stateless — ``base64url(issued_at ‖ HMAC(secret, issued_at)[:16])`` — so any
replica sharing the secret accepts them and nothing has to be stored per client. A proof's
``jti`` is remembered only once everything else about the proof checked out, the key binding
included, in the bucket every replica shares (:mod:`streamproc.gateway.auth.replay`): a proof
signed with some other key, or refused for any other reason, leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import msgspec
from cryptography.hazmat.primitives.asymmetric import ec
from nacl.signing import VerifyKey
from yarl import URL

from streamproc.gateway.auth import jwt
from streamproc.gateway.auth.replay import Replayed, ReplayGuard
from streamproc.gateway.settings import Dpop, resolve_ref
from streamproc.jose import access_token_hash as access_token_hash

PROOF_TYP = "dpop+jwt"


class DpopError(Exception):
    """``error`` is the RFC 9449 code: ``invalid_dpop_proof`` or ``use_dpop_nonce``."""

    def __init__(self, error: str, description: str) -> None:
        self.error = error
        self.description = description
        super().__init__(f"{error}: {description}")


class ProofClaims(msgspec.Struct, kw_only=True):
    jti: str
    htm: str
    htu: str
    iat: int | float
    ath: str | None = None
    nonce: str | None = None


_claims_dec = msgspec.json.Decoder(ProofClaims)


def normalize_htu(url: str) -> str:
    """Scheme and host lower-cased, default port dropped, no query or fragment (RFC 9449 4.3)."""
    try:
        u = URL(url)
    except (ValueError, TypeError):
        return ""
    if not u.is_absolute():
        return ""
    port = "" if u.port is None or u.is_default_port() else f":{u.port}"
    return f"{(u.scheme or '').lower()}://{(u.host or '').lower()}{port}{u.raw_path}"


def nonce_key(cfg: Dpop, env: Mapping[str, str]) -> bytes:
    """The nonce HMAC key: the configured secret (shared by replicas), else a random one."""
    secret = resolve_ref(cfg.nonce_secret, env) if cfg.nonce_secret else None
    return secret.encode() if secret else os.urandom(32)


class DpopVerifier:
    def __init__(
        self,
        cfg: Dpop,
        replay: ReplayGuard,
        clock: Callable[[], float] = time.time,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """``env``: what ``env:NAME`` secret references name (the process's configuration)."""
        self.cfg = cfg
        self._clock = clock
        self._secret = nonce_key(cfg, env or {})
        self.replay = replay
        self._nonce = ("", -1)

    # ------------------------------------------------------------------ nonces

    def nonce(self) -> str:
        """The current nonce (re-minted at most once a second)."""
        now = int(self._clock())
        if self._nonce[1] != now:
            t = now.to_bytes(8, "big")
            self._nonce = (
                jwt.b64url(t + hmac.new(self._secret, t, hashlib.sha256).digest()[:16]),
                now,
            )
        return self._nonce[0]

    def _nonce_ok(self, nonce: str) -> bool:
        try:
            raw = jwt.b64url_decode(nonce)
        except jwt.JwtError:
            return False
        if len(raw) != 24:
            return False
        t, mac = raw[:8], raw[8:]
        if not hmac.compare_digest(mac, hmac.new(self._secret, t, hashlib.sha256).digest()[:16]):
            return False
        age = self._clock() - int.from_bytes(t, "big")
        return -5 <= age <= self.cfg.nonce_ttl_s

    # ------------------------------------------------------------------ proofs

    async def verify(
        self, proof: str, *, method: str, url: str, access_token: str, jkt: str
    ) -> str:
        """Check one proof for this request, signed with the key ``jkt`` (the token's
        ``cnf.jkt``); remembers its ``jti`` last. Returns the key's thumbprint."""
        try:
            c = jwt.parse(proof, jwt.PROOF_ALGS)
        except jwt.JwtError as exc:
            raise DpopError("invalid_dpop_proof", str(exc)) from None
        h = c.header
        if h.typ != PROOF_TYP:
            raise DpopError("invalid_dpop_proof", f"typ must be {PROOF_TYP}")
        verify, thumb = _public_jwk(h.jwk, h.alg)
        if not verify(c):
            raise DpopError("invalid_dpop_proof", "signature does not verify with its jwk")
        try:
            claims = _claims_dec.decode(c.payload)
        except msgspec.DecodeError as exc:
            raise DpopError("invalid_dpop_proof", f"claims: {exc}") from None
        if claims.htm != method:
            raise DpopError("invalid_dpop_proof", "htm does not match the request method")
        if normalize_htu(claims.htu) != normalize_htu(url):
            raise DpopError("invalid_dpop_proof", "htu does not match the request URL")
        now = self._clock()
        if abs(now - claims.iat) > self.cfg.iat_window_s:
            raise DpopError("invalid_dpop_proof", "iat is outside the accepted window")
        if claims.ath is None or not hmac.compare_digest(
            claims.ath.encode(), access_token_hash(access_token).encode()
        ):
            raise DpopError("invalid_dpop_proof", "ath does not match the access token")
        if not 1 <= len(claims.jti) <= 256:
            raise DpopError("invalid_dpop_proof", "jti must be 1-256 characters")
        if not hmac.compare_digest(thumb, jkt):
            raise DpopError(
                "invalid_dpop_proof", "the DPoP proof key is not the key the token is bound to"
            )
        if self.cfg.require_nonce and (claims.nonce is None or not self._nonce_ok(claims.nonce)):
            raise DpopError("use_dpop_nonce", "resend the proof with the server's DPoP-Nonce")
        try:
            await self.replay.claim(
                "dpop", thumb, claims.jti, claims.iat + self.cfg.iat_window_s + 1
            )
        except Replayed:
            raise DpopError("invalid_dpop_proof", "proof jti was already used") from None
        return thumb


Verifier = Callable[[jwt.Compact], bool]


def _coordinate(jwk: dict[str, Any], name: str) -> bytes:
    value = jwk.get(name)
    if not isinstance(value, str):
        raise DpopError("invalid_dpop_proof", f"jwk {name} is missing")
    try:
        raw = jwt.b64url_decode(value)
    except jwt.JwtError:
        raise DpopError("invalid_dpop_proof", f"jwk {name} is not base64url") from None
    if len(raw) != 32:
        raise DpopError("invalid_dpop_proof", f"jwk {name} must be 32 bytes")
    return raw


def _public_jwk(jwk: dict[str, Any] | None, alg: str) -> tuple[Verifier, str]:
    """The proof's verifier and its key's thumbprint, from the header's ``jwk``: an OKP
    Ed25519 key for ``EdDSA``, an EC P-256 key (a point on the curve) for ``ES256``."""
    if not isinstance(jwk, dict):
        raise DpopError("invalid_dpop_proof", "header must carry the public jwk")
    if "d" in jwk:
        raise DpopError("invalid_dpop_proof", "jwk must not contain the private key")
    if alg == jwt.ES256:
        if jwk.get("kty") != "EC" or jwk.get("crv") != "P-256":
            raise DpopError("invalid_dpop_proof", "an ES256 proof's jwk must be an EC P-256 key")
        x, y = _coordinate(jwk, "x"), _coordinate(jwk, "y")
        try:
            numbers = ec.EllipticCurvePublicNumbers(
                int.from_bytes(x, "big"), int.from_bytes(y, "big"), ec.SECP256R1()
            )
            key = numbers.public_key()
        except ValueError:
            raise DpopError("invalid_dpop_proof", "jwk is not a point on P-256") from None
        return (lambda c: jwt.verify_es256(c, key)), jwt.jwk_thumbprint(jwk)
    if jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519":
        raise DpopError("invalid_dpop_proof", "jwk must be an OKP Ed25519 key")
    ed = VerifyKey(_coordinate(jwk, "x"))
    return (lambda c: jwt.verify(c, ed)), jwt.jwk_thumbprint(jwk)
