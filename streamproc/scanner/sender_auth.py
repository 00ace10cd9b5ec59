"""How a webhook sender (``streamproc feedser export``) presents itself besides its
signature: an access token per tenant it delivers to, bound to a DPoP key (RFC 9449), whose
proofs answer the gateway's nonce challenge.

Where the tokens come from, the first that is configured:

1. a token issued by the Authority (``feedser.token``, ``--token``): it names one tenant,
   and is bound to the DPoP key in ``feedser.dpop_key`` (its ``cnf.jkt``) or unbound;
2. tokens minted here from an issuer key file (``feedser.issuer_key``; with ``make run``,
   the development issuer it writes, ``DATA/dev/issuer.jwk``): one short-lived token per
   tenant (``feedser.tenants``; with ``make run``, the tenants of its Feedser source), bound
   to a DPoP key made on first use (``DATA/dev/feedser-dpop.jwk``);
3. none: for a source configured to take no token.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nacl.signing import SigningKey

from streamproc.gateway import jwt
from streamproc.gateway.tokens_cli import (
    dpop_proof,
    load_key_file,
    mint_token,
    write_key_file,
)
from streamproc.names import WEBHOOK_SCOPE

TOKEN_TTL_S = 300
"""Lifetime of a minted token: one export's deliveries, retries included."""
DEV_ISSUER_KEY = Path("dev") / "issuer.jwk"
DEV_GATEWAY = Path("dev") / "gateway.json"
DEV_DPOP_KEY = Path("dev") / "feedser-dpop.jwk"
"""Under the data directory: what ``make run`` (``up --demo``) writes, and the DPoP key the
sender keeps beside it."""


class SenderAuthError(ValueError):
    """The configured credentials cannot be used; the message says which and why."""


class DpopProver:
    """Signs a proof per request with one key, and remembers the server's latest nonce."""

    def __init__(self, key: SigningKey) -> None:
        self.key = key
        self.jkt = jwt.jwk_thumbprint(jwt.okp_jwk(key.verify_key))
        self.nonce: str | None = None

    def proof(self, method: str, url: str, token: str) -> str:
        return dpop_proof(self.key, htm=method, htu=url, token=token, nonce=self.nonce)

    def learn(self, headers: Mapping[str, str]) -> bool:
        """Take the ``DPoP-Nonce`` a response carries; whether it is a new one."""
        nonce = headers.get("DPoP-Nonce")
        if not nonce or nonce == self.nonce:
            return False
        self.nonce = nonce
        return True


@dataclass
class Presenter:
    """The tokens to present, one delivery per tenant (``None``: the token's own, or no
    token), and the DPoP key they are bound to."""

    tokens: dict[str | None, str | None]
    dpop: DpopProver | None = None
    how: str = "no token"
    """For the user: where the tokens came from."""
    tenants: list[str | None] = field(init=False)

    def __post_init__(self) -> None:
        self.tenants = list(self.tokens)

    def headers(self, tenant: str | None, method: str, url: str) -> dict[str, str]:
        """``Authorization`` (and ``DPoP``) for one request to ``url``."""
        token = self.tokens.get(tenant)
        if token is None:
            return {}
        if self.dpop is not None and _jkt(token) is not None:
            return {
                "Authorization": f"DPoP {token}",
                "DPoP": self.dpop.proof(method, url, token),
            }
        return {"Authorization": f"Bearer {token}"}


def _jkt(token: str) -> str | None:
    """The DPoP key thumbprint a token is bound to (read, not verified: it is ours)."""
    try:
        claims = json.loads(jwt.b64url_decode(token.split(".")[1]))
    except (ValueError, IndexError, jwt.JwtError):
        raise SenderAuthError("the configured token is not a JWT") from None
    cnf = claims.get("cnf") if isinstance(claims, dict) else None
    jkt = cnf.get("jkt") if isinstance(cnf, dict) else None
    return jkt if isinstance(jkt, str) else None


def _dpop_key(path: Path, *, create: bool) -> DpopProver:
    if not path.exists():
        if not create:
            raise SenderAuthError(
                f"the token is DPoP-bound, and its key {path} does not exist "
                "(set feedser.dpop_key to the key file the token was issued for)"
            )
        write_key_file(path, SigningKey.generate())
    key, _ = load_key_file(path)
    return DpopProver(key)


def dev_tenants(data_dir: Path, source: str | None) -> list[str]:
    """The tenants of the Feedser source in the development gateway configuration
    ``make run`` writes (the one named ``source``, else the only one); none without it."""
    try:
        doc = json.loads((data_dir / DEV_GATEWAY).read_text())
    except (OSError, ValueError):
        return []
    hooks = [
        h
        for h in doc.get("webhooks", [])
        if isinstance(h, dict) and h.get("kind") == "feedser" and h.get("name", "") != ""
    ]
    if source is not None:
        hooks = [h for h in hooks if h["name"] == source]
    if len(hooks) != 1:
        return []
    return [t for t in hooks[0].get("tenants", []) if isinstance(t, str)]


def presenter(
    data_dir: Path,
    *,
    token: str | None = None,
    dpop_key: Path | None = None,
    issuer_key: Path | None = None,
    tenants: Sequence[str] = (),
    source: str | None = None,
) -> Presenter:
    """What to present, from the settings (see the module's docstring for the order)."""
    key_path = dpop_key or data_dir / DEV_DPOP_KEY
    if token:
        token = token.strip()
        bound = _jkt(token)
        if bound is None:
            return Presenter({None: token}, how="the configured token (unbound)")
        prover = _dpop_key(key_path, create=False)
        if prover.jkt != bound:
            raise SenderAuthError(
                f"the token is bound to DPoP key {bound}; {key_path} is key {prover.jkt}"
            )
        return Presenter({None: token}, prover, how="the configured token (DPoP-bound)")
    issuer = issuer_key
    if issuer is None and (data_dir / DEV_ISSUER_KEY).exists():
        issuer = data_dir / DEV_ISSUER_KEY
    if issuer is None:
        return Presenter({None: None})
    wanted = list(tenants) or dev_tenants(data_dir, source)
    if not wanted:
        raise SenderAuthError(
            f"tokens are minted from {issuer}, but for which tenants? Name them "
            "(--tenant, or feedser.tenants)"
        )
    key, doc = load_key_file(issuer)
    prover = _dpop_key(key_path, create=True)
    minted: dict[str | None, str | None] = {
        t: mint_token(
            key,
            doc,
            tenant=t,
            scope=WEBHOOK_SCOPE,
            sub="feedser",
            ttl=TOKEN_TTL_S,
            cnf={"jkt": prover.jkt},
        )
        for t in wanted
    }
    return Presenter(minted, prover, how=f"DPoP-bound tokens minted from {issuer}")
