"""How a webhook sender (``streamproc feedser export``, ``streamproc vexer export``) presents
itself besides its signature: a DPoP-bound access token per tenant it delivers to, through
the client side of the API's authentication every command of ours shares
(:mod:`streamproc.client`: the DPoP key in the data directory, nonce challenges, static tokens
and client credentials).

Where the tokens come from, the first that is configured (``KIND`` is ``feedser`` or
``vexer``, the sender's settings):

1. a token issued by the Authority (``KIND.token``, ``--token``): one tenant, bound to the
   client's DPoP key (``client.dpop_key``);
2. client credentials at the issuer's token endpoint (the ``client`` settings): one token per
   tenant (``KIND.tenants``, ``--tenant``; none named: the issuer's choice);
3. tokens minted here from an issuer key file (``KIND.issuer_key``; with ``make run``, the
   development issuer it writes, ``DATA/dev/issuer.jwk``), one per tenant (``KIND.tenants``;
   with ``make run``, the tenants of its webhook source of that kind), bound to the client's
   key;
4. none: for a source configured to take no token.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import aiohttp

from streamproc.client.dpop import DpopKey
from streamproc.client.settings import client_of, dpop_key, token_source
from streamproc.client.tokens import TokenRefused, TokenSource
from streamproc.config import Configuration
from streamproc.gateway.tokens_cli import load_key_file, mint_token
from streamproc.names import WEBHOOK_SCOPE

TOKEN_TTL_S = 300
"""Lifetime of a minted token; a new one is minted once less than a minute is left."""
DEV_ISSUER_KEY = Path("dev") / "issuer.jwk"
DEV_GATEWAY = Path("dev") / "gateway.json"
"""Under the data directory: what ``make run`` (``up --demo``) writes."""

SenderKind = Literal["feedser", "vexer"]


def _env(kind: SenderKind, name: str) -> str:
    """The environment variable of the sender's setting ``KIND.name``."""
    return f"STREAMPROC_{kind.upper()}_{name.upper()}"


class MintedTokens:
    """A :class:`~streamproc.client.tokens.TokenSource` that signs its own tokens with an
    issuer key file (a development issuer the gateway trusts): scope ``scheduler.webhook``,
    one tenant each, bound to the client's DPoP key, the sender's kind as subject."""

    def __init__(self, issuer_key: Path, key: DpopKey, sub: str = "feedser") -> None:
        self.issuer_key = issuer_key
        self.sub = sub
        self.signing, self.doc = load_key_file(issuer_key)
        self.jkt = key.jkt
        self._cache: dict[str, tuple[str, float]] = {}

    async def token(self, http: aiohttp.ClientSession, tenant: str | None) -> str:
        if tenant is None:
            raise TokenRefused(f"tokens minted from {self.issuer_key} need a tenant")
        cached = self._cache.get(tenant)
        if cached is not None and time.time() < cached[1]:
            return cached[0]
        token = mint_token(
            self.signing,
            self.doc,
            tenant=tenant,
            scope=WEBHOOK_SCOPE,
            sub=self.sub,
            ttl=TOKEN_TTL_S,
            cnf={"jkt": self.jkt},
        )
        self._cache[tenant] = (token, time.time() + TOKEN_TTL_S - 60)
        return token

    def refused(self, token: str) -> bool:
        stale = [t for t, (v, _) in self._cache.items() if v == token]
        for t in stale:
            del self._cache[t]
        return bool(stale)


@dataclass
class Credentials:
    """What a sender presents: its DPoP key and token source (None: no token), and the
    tenants it delivers to, one delivery each (``None``: the token's own tenant)."""

    key: DpopKey | None
    tokens: TokenSource | None
    tenants: list[str | None]
    how: str


def dev_tenants(data_dir: Path, source: str | None, kind: SenderKind = "feedser") -> list[str]:
    """The tenants of the ``kind`` source in the development gateway configuration
    ``make run`` writes (the one named ``source``, else the only one); none without it."""
    try:
        doc = json.loads((data_dir / DEV_GATEWAY).read_text())
    except (OSError, ValueError):
        return []
    hooks = [h for h in doc.get("webhooks", []) if isinstance(h, dict)]
    hooks = [h for h in hooks if h.get("kind") == kind]
    if source is not None:
        hooks = [h for h in hooks if h.get("name") == source]
    if len(hooks) != 1:
        return []
    return [t for t in hooks[0].get("tenants", []) if isinstance(t, str)]


def credentials(
    data_dir: Path,
    configuration: Configuration,
    *,
    token: str | None = None,
    tenants: Sequence[str] = (),
    source: str | None = None,
    kind: SenderKind = "feedser",
) -> Credentials:
    """What the ``kind`` sender presents, from the flags and settings (see the module's
    docstring for the order). Raises :class:`~streamproc.config.ConfigError` for credentials
    that cannot work."""
    token_env, tenants_env = _env(kind, "token"), _env(kind, "tenants")
    sender = getattr(configuration.sections, kind)
    client = client_of(configuration)
    named = list(tenants) or list(sender.tenants or ())
    token = token or configuration.get(token_env)  # as given: a secret keeps its spaces
    if token or (client.token_url and client.client_id):
        key = dpop_key(data_dir, client)
        tokens = token_source(
            key, token=token, token_flag=f"--token / {token_env}", scopes=(WEBHOOK_SCOPE,),
            client=client,
        )  # fmt: skip
        if token:
            return Credentials(key, tokens, [None], "the configured token")
        chosen: list[str | None] = list(named) or [None]
        return Credentials(key, tokens, chosen, f"client credentials at {client.token_url}")
    issuer = sender.issuer_key
    issuer_key = Path(issuer) if issuer else data_dir / DEV_ISSUER_KEY
    if not issuer and not issuer_key.exists():
        return Credentials(None, None, [None], "no token")
    wanted = named or dev_tenants(data_dir, source, kind)
    if not wanted:
        raise TokenRefused(
            f"tokens are minted from {issuer_key}, but for which tenants? Name them "
            f"(--tenant, or {kind}.tenants / {tenants_env})"
        )
    key = dpop_key(data_dir, client)
    minted = MintedTokens(issuer_key, key, sub=kind)
    return Credentials(key, minted, list(wanted), f"DPoP-bound tokens minted from {issuer_key}")
