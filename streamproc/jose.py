"""The JOSE pieces both sides of the API use: strict base64url, EdDSA compact signing, JWK
thumbprints (RFC 7638) and the DPoP access-token hash (RFC 9449 ``ath``).

The gateway verifies with these (:mod:`streamproc.gateway.auth.jwt`), our clients sign with them
(:mod:`streamproc.client`); they live below both so neither reaches into the other.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import Any

from nacl.signing import SigningKey, VerifyKey

ALG = "EdDSA"
_B64URL = re.compile(r"[A-Za-z0-9_-]*")
THUMBPRINT_MEMBERS = {"OKP": ("crv", "kty", "x"), "EC": ("crv", "kty", "x", "y")}
"""RFC 7638 §3.2 / RFC 8037 §2: the required members of each key type, in sorted order."""


class JwtError(ValueError):
    """A token or proof that cannot be trusted; the message is safe to show the caller."""


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(s: str | bytes) -> bytes:
    """Unpadded base64url as JOSE uses it (RFC 7515 §2): only the alphabet, no padding, and
    canonical (the spare bits of the last character zero); anything else is an error."""
    if isinstance(s, bytes):
        s = s.decode("latin-1")
    if not _B64URL.fullmatch(s) or len(s) % 4 == 1:
        raise JwtError("not base64url (unpadded, characters A-Z a-z 0-9 - _ only)")
    raw = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    if b64url(raw) != s:
        raise JwtError("not canonical base64url (the last character's spare bits are set)")
    return raw


def sign(claims: dict[str, Any], key: SigningKey, header: dict[str, Any]) -> str:
    """A compact JWS over ``claims`` with ``alg: EdDSA`` (tokens, DPoP proofs)."""
    h = b64url(json.dumps({"alg": ALG, **header}, separators=(",", ":")).encode())
    p = b64url(json.dumps(claims, separators=(",", ":")).encode())
    sig = key.sign(f"{h}.{p}".encode()).signature
    return f"{h}.{p}.{b64url(sig)}"


def okp_jwk(key: VerifyKey) -> dict[str, str]:
    return {"kty": "OKP", "crv": "Ed25519", "x": b64url(bytes(key))}


def jwk_thumbprint(jwk: dict[str, Any]) -> str:
    """RFC 7638 SHA-256 thumbprint of an OKP or EC public key: its required members, sorted,
    no whitespace; raises KeyError/ValueError for another key type."""
    members = THUMBPRINT_MEMBERS.get(jwk.get("kty", ""))
    if members is None:
        raise ValueError(f"no thumbprint for key type {jwk.get('kty')!r}")
    canonical = json.dumps({m: jwk[m] for m in members}, separators=(",", ":"), sort_keys=True)
    return b64url(hashlib.sha256(canonical.encode()).digest())


def access_token_hash(token: str) -> str:
    """A DPoP proof's ``ath``: base64url SHA-256 of the access token's ASCII."""
    return b64url(hashlib.sha256(token.encode("ascii")).digest())


def unverified_claims(token: str) -> dict[str, Any] | None:
    """A JWT's claims read without checking its signature, or None when it is not one.

    Only for a client looking at its own token (which key it is bound to, which tenant it
    names) to fail early with a clear message; the gateway decides with the signature."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(b64url_decode(parts[1]))
    except (JwtError, ValueError):
        return None
    return claims if isinstance(claims, dict) else None
