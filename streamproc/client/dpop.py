"""The client's DPoP key (RFC 9449): an Ed25519 key kept in the data directory, created on
first use with mode 0600, and the proofs it signs.

One key per data directory: every command run on it presents the same key, so a token bound
to it (``cnf.jkt``, see :attr:`DpopKey.jkt`) works for all of them. The file is the private
JWK ``streamproc token keygen`` writes, so ``token issue --dpop-key`` can bind a token to it.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import time
import uuid
from pathlib import Path

from nacl.signing import SigningKey
from yarl import URL

from streamproc.config import ConfigError
from streamproc.jose import JwtError, access_token_hash, b64url, b64url_decode, okp_jwk, sign
from streamproc.jose import jwk_thumbprint as thumbprint

PROOF_TYP = "dpop+jwt"
KEY_FILE = Path("client") / "dpop.jwk"
"""Below the data directory."""


class KeyFileError(ConfigError):
    """The DPoP key file cannot be read, is not a private Ed25519 JWK, or others may read it."""


def htu(url: str) -> str:
    """The proof's ``htu``: the request URL without query and fragment (RFC 9449 §4.2)."""
    return str(URL(url).with_query(None).with_fragment(None))


class DpopKey:
    def __init__(self, key: SigningKey, path: Path | None = None) -> None:
        self.key = key
        self.path = path
        self.jwk = okp_jwk(key.verify_key)
        self.jkt = thumbprint(self.jwk)
        """RFC 7638 thumbprint: what a token bound to this key carries as ``cnf.jkt``."""

    @classmethod
    def load_or_create(cls, path: Path) -> DpopKey:
        """The key in ``path``, created (mode 0600, atomically) when the file is missing."""
        if not path.exists():
            _create(path)
        return cls(_read(path), path)

    def proof(
        self, method: str, url: str, *, access_token: str | None = None, nonce: str | None = None
    ) -> str:
        """A fresh proof (unique ``jti``) for one request."""
        claims: dict[str, object] = {
            "jti": uuid.uuid4().hex,
            "htm": method.upper(),
            "htu": htu(url),
            "iat": int(time.time()),
        }
        if access_token is not None:
            claims["ath"] = access_token_hash(access_token)
        if nonce is not None:
            claims["nonce"] = nonce
        return sign(claims, self.key, {"typ": PROOF_TYP, "jwk": self.jwk})


def _create(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = SigningKey.generate()
    doc = {**okp_jwk(key.verify_key), "d": b64url(bytes(key)), "kid": uuid.uuid4().hex[:16]}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(doc, indent=2) + "\n")
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(FileExistsError):  # another command made it first: use theirs
            os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _read(path: Path) -> SigningKey:
    try:
        mode = path.stat().st_mode
        doc = json.loads(path.read_text())
        seed = b64url_decode(doc["d"])
        if doc.get("kty") != "OKP" or doc.get("crv") != "Ed25519" or len(seed) != 32:
            raise ValueError("not an OKP Ed25519 private key")
    except (OSError, ValueError, KeyError, TypeError, JwtError) as exc:
        raise KeyFileError(f"DPoP key {path}: {exc}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeyFileError(
            f"DPoP key {path} may be read by others (mode {stat.S_IMODE(mode):o}): chmod 600 {path}"
        )
    return SigningKey(seed)
