"""Just enough JWS/JWT (RFC 7515/7519): compact parsing, ``EdDSA`` for access tokens and
``EdDSA`` or ``ES256`` for DPoP proofs (browsers sign with ECDSA P-256 through WebCrypto).

Every other ``alg`` — ``none`` included — is refused before any key is touched, ``crit``
extensions are refused, and the signature is checked over the exact ``header.payload`` bytes
as received: Ed25519 with pynacl (libsodium), ES256 with ``cryptography`` (OpenSSL). Nothing
is decoded leniently: every segment must be canonical unpadded base64url (so one token has
exactly one spelling), and the header and the
payload are refused unread if their JSON nests deeper than :data:`MAX_JSON_DEPTH` (a
recursive decoder would otherwise fail with ``RecursionError`` on a few kilobytes).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from typing import Any

import msgspec
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

from streamproc.jose import ALG as ALG
from streamproc.jose import JwtError as JwtError
from streamproc.jose import b64url as b64url
from streamproc.jose import b64url_decode as b64url_decode
from streamproc.jose import jwk_thumbprint as jwk_thumbprint
from streamproc.jose import okp_jwk as okp_jwk
from streamproc.jose import sign as sign

MAX_TOKEN = 8192
MAX_JSON_DEPTH = 16
"""JOSE headers and claims are flat (a ``jwk`` or ``cnf`` object is depth 2); real issuers'
structured claims stay well inside this."""
_ESCAPE = re.compile(rb"\\.", re.S)
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')


def decode_key(text: str) -> bytes:
    """A raw 32-byte Ed25519 key given as base64url, base64 or hex."""
    t = text.strip()
    attempts: tuple[Callable[[], bytes], ...] = (
        lambda: bytes.fromhex(t) if len(t) == 64 else b"",
        lambda: base64.urlsafe_b64decode(t + "=" * (-len(t) % 4)),
        lambda: base64.b64decode(t + "=" * (-len(t) % 4)),
    )
    for attempt in attempts:
        try:
            raw = attempt()
        except (binascii.Error, ValueError):
            continue
        if len(raw) == 32:
            return raw
    raise ValueError("an Ed25519 key is 32 bytes (base64url, base64 or hex)")


def json_depth(data: bytes) -> int:
    """How deeply ``data``'s arrays and objects nest, counted without decoding it (brackets
    inside strings do not count). Linear in ``len(data)``."""
    depth = deepest = 0
    in_string = False
    for c in _ESCAPE.sub(b"", data).translate(None, _NOT_STRUCTURE):
        if c == 0x22:  # "
            in_string = not in_string
        elif in_string:
            continue
        elif c in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _shallow(data: bytes, what: str) -> bytes:
    if json_depth(data) > MAX_JSON_DEPTH:
        raise JwtError(f"{what} JSON is nested deeper than {MAX_JSON_DEPTH} levels")
    return data


def media_type(typ: str | None) -> str | None:
    """A ``typ`` value as compared (RFC 7515 §4.1.9): case-insensitive, ``application/``
    implied when no other ``/`` appears."""
    if typ is None:
        return None
    t = typ.strip().lower()
    return t.removeprefix("application/") if t.count("/") == 1 else t


class Header(msgspec.Struct, kw_only=True):
    alg: str
    typ: str | None = None
    kid: str | None = None
    jwk: dict[str, Any] | None = None
    crit: list[str] | None = None


class Cnf(msgspec.Struct, kw_only=True):
    jkt: str | None = None
    x5t_s256: str | None = msgspec.field(default=None, name="x5t#S256")


class Claims(msgspec.Struct, kw_only=True):
    iss: str
    aud: str | list[str]
    exp: int | float
    nbf: int | float | None = None
    iat: int | float | None = None
    sub: str | None = None
    client_id: str | None = None
    """RFC 9068 §2.2: the client the token was issued to (``azp`` in OpenID terms)."""
    azp: str | None = None
    jti: str | None = None
    tenant: str | None = None
    scope: str | None = None
    scp: list[str] | None = None
    cnf: Cnf | None = None


_header_dec = msgspec.json.Decoder(Header)


class Compact(msgspec.Struct, frozen=True):
    header: Header
    payload: bytes
    signing_input: bytes
    signature: bytes


ES256 = "ES256"
TOKEN_ALGS = frozenset({ALG})
PROOF_ALGS = frozenset({ALG, ES256})
SIGNATURE_BYTES = {ALG: 64, ES256: 64}
"""An Ed25519 signature; an ES256 one is R ‖ S, 32 bytes each (RFC 7518 §3.4)."""


def parse(token: str, algs: frozenset[str] = TOKEN_ALGS) -> Compact:
    """Split and decode a compact JWS whose ``alg`` is one of ``algs``; checks ``alg``/``crit``,
    the encoding and the JSON depth, but not the signature."""
    if len(token) > MAX_TOKEN:
        raise JwtError("token too long")
    parts = token.split(".")
    if len(parts) != 3:
        raise JwtError("not a compact JWS (three base64url parts)")
    raw_header = _shallow(b64url_decode(parts[0]), "header")
    try:
        header = _header_dec.decode(raw_header)
    except msgspec.DecodeError:
        raise JwtError("malformed JOSE header") from None
    if header.alg not in algs:
        raise JwtError(f"alg {header.alg!r} is not accepted ({' or '.join(sorted(algs))} only)")
    if header.crit:
        raise JwtError("critical header extensions are not supported")
    payload = _shallow(b64url_decode(parts[1]), "payload")
    signature = b64url_decode(parts[2])
    if len(signature) != SIGNATURE_BYTES[header.alg]:
        raise JwtError(f"an {header.alg} signature is {SIGNATURE_BYTES[header.alg]} bytes")
    return Compact(header, payload, f"{parts[0]}.{parts[1]}".encode("ascii"), signature)


def verify(c: Compact, key: VerifyKey) -> bool:
    """An ``EdDSA`` signature by ``key``."""
    if c.header.alg != ALG:
        return False
    try:
        key.verify(c.signing_input, c.signature)
    except BadSignatureError:
        return False
    return True


def verify_es256(c: Compact, key: ec.EllipticCurvePublicKey) -> bool:
    """An ``ES256`` signature (R ‖ S) by the P-256 ``key``."""
    if c.header.alg != ES256:
        return False
    r, s = int.from_bytes(c.signature[:32], "big"), int.from_bytes(c.signature[32:], "big")
    try:
        key.verify(encode_dss_signature(r, s), c.signing_input, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return False
    return True
