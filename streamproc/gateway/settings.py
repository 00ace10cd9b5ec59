"""Gateway configuration: the ``gateway`` tables of the streamproc config file, then a JSON or
TOML file named by ``STREAMPROC_GATEWAY_CONFIG`` (its top-level keys replace the tables'), then
``STREAMPROC_GATEWAY_*`` variables (or the config file's scalar ``gateway.*`` keys) on top.
Every key is documented in ``docs/api.md`` ("Configuration") and ``docs/configuration.md``.

Secret-bearing values (HMAC secrets, the DPoP nonce key) and keys may be given literally,
as ``file:/path`` (the file's content, whitespace-trimmed — the usual way to mount secrets)
or as ``env:NAME``, so no secret has to sit in the config file itself.
"""

from __future__ import annotations

import tomllib
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from streamproc.config import Configuration
from streamproc.configfile.registry import env_name
from streamproc.configfile.sections import Sections
from streamproc.configfile.typed import flag
from streamproc.events.payloads import VEX_DOCUMENT_SOURCE
from streamproc.ids import TENANT_RE
from streamproc.names import AUDIENCE, FEEDS_SOURCE

Mode = Literal["bearer", "dpop", "mtls"]
ENV_FILE = env_name("gateway.config")
ENV_PREFIX = "STREAMPROC_GATEWAY_"


class GatewayConfigError(ValueError):
    """The gateway configuration is unusable; the message names the key."""


class IssuerKey(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    kid: Annotated[str, Meta(min_length=1, max_length=128)]
    public_key: str
    """Ed25519 public key: 32 bytes as base64url/base64 (or a ``file:``/``env:`` reference)."""


class Issuer(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    issuer: Annotated[str, Meta(min_length=1)]
    keys: Annotated[list[IssuerKey], Meta(min_length=1)]
    tenants: list[str] | None = None
    """The tenants this issuer's tokens may speak for: tenant ids, ``prefix*`` patterns, or
    ``*`` for every tenant. Required (``None`` only so the refusal can say what to add): a
    token naming any other tenant is refused with 401."""

    def __post_init__(self) -> None:
        if self.tenants is None:
            raise ValueError(
                f"issuer {self.issuer}: `tenants` is required: the tenants its tokens may "
                'speak for (tenant ids, "prefix*" patterns, or "*" for every tenant); '
                "see docs/security.md"
            )
        if not self.tenants:
            raise ValueError(f"issuer {self.issuer}: `tenants` is empty (no token would pass)")
        for t in self.tenants:
            if t != "*" and not TENANT_RE.match(t.removesuffix("*")):
                raise ValueError(
                    f"issuer {self.issuer}: tenant {t!r} is neither a tenant id, a "
                    '"prefix*" pattern nor "*"'
                )

    def speaks_for(self, tenant: str) -> bool:
        """Whether a token of this issuer may name ``tenant``."""
        return any(
            t == tenant or (t.endswith("*") and tenant.startswith(t[:-1]))
            for t in self.tenants or ()
        )


class Dpop(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    require_nonce: bool = True
    nonce_secret: str | None = None
    """HMAC key of the stateless nonces; share it between replicas (random per process if
    unset, which makes a nonce from one replica fail on another)."""
    nonce_ttl_s: Annotated[int, Meta(ge=10, le=3600)] = 300
    iat_window_s: Annotated[int, Meta(ge=5, le=600)] = 60


class SourceMtls(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A webhook source authenticated by its TLS client certificate (on the TLS listener)."""

    ca_file: str | None = None
    """The certificate's issuer must be this CA (its subject is compared with the issuer)."""
    subjects: list[str] = []
    """Accepted subject CN or DNS SAN values; empty = any certificate from ``ca_file``."""
    sha256: list[str] = []
    """Accepted leaf certificate SHA-256 fingerprints (hex); an alternative to subjects."""


class WebhookSource(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    name: Annotated[str, Meta(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")]
    kind: Literal["feedser", "vexer"]
    tenants: Annotated[list[str], Meta(min_length=1)]
    """Explicit allowlist: an accepted export is recorded once for each of these tenants."""
    hmac_secrets: list[str] = []
    ed25519_public_keys: list[str] = []
    mtls: SourceMtls | None = None
    require_token: bool = True
    """Deliveries carry an access token too (scope ``scheduler.webhook``, checked like any
    API call's), and record only for the tenants both the token and ``tenants`` admit.
    ``false`` trusts the signature (or certificate) alone for every tenant of ``tenants``;
    the gateway warns at start (docs/security.md says what that gives up)."""

    def __post_init__(self) -> None:
        if self.name == VEX_DOCUMENT_SOURCE:
            raise ValueError(
                f"webhook source {self.name}: the name is reserved for the exports that "
                "PUT /vex/{documentId} records"
            )
        for t in self.tenants:
            if not TENANT_RE.match(t):
                raise ValueError(f"webhook source {self.name}: invalid tenant {t!r}")
        if len(set(self.tenants)) != len(self.tenants):
            raise ValueError(f"webhook source {self.name}: duplicate tenants")
        if not (self.hmac_secrets or self.ed25519_public_keys or self.mtls):
            raise ValueError(
                f"webhook source {self.name}: needs hmac_secrets, ed25519_public_keys or mtls"
            )


class Tls(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """An extra HTTPS listener serving the gateway routes (needed for mTLS)."""

    host: str = "127.0.0.1"
    port: Annotated[int, Meta(ge=0, le=65535)] = 8443
    cert_file: str
    key_file: str
    client_ca_files: list[str] = []
    """CAs whose client certificates are verified (optional: requested, not required)."""


class GatewaySettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    audience: Annotated[str, Meta(min_length=1)] = AUDIENCE
    issuers: list[Issuer] = []
    required_modes: Annotated[list[Mode], Meta(min_length=1)] = msgspec.field(
        default_factory=lambda: ["dpop", "mtls"]
    )
    """Accepted ways to present a token; ``bearer`` admits unbound tokens (development)."""
    leeway_s: Annotated[int, Meta(ge=0, le=300)] = 30
    max_token_lifetime_s: Annotated[int, Meta(ge=60, le=30 * 86400)] = 86400
    """Longest accepted ``exp - iat`` of an access token; tokens without ``iat`` are refused."""
    token_types: Annotated[list[str], Meta(min_length=1)] = msgspec.field(
        default_factory=lambda: ["at+jwt"]
    )
    """Accepted access-token ``typ`` values (RFC 9068: ``at+jwt``; add ``JWT`` only for an
    issuer that cannot say ``at+jwt``). Compared as media types, case-insensitively."""
    public_base_url: str | None = None
    """External origin (``https://host[:port]``) for DPoP ``htu`` behind a proxy."""
    dpop: Dpop = msgspec.field(default_factory=Dpop)
    webhooks: list[WebhookSource] = []
    webhook_window_s: Annotated[int, Meta(ge=30, le=3600)] = 300
    replay_cache_size: Annotated[int, Meta(ge=1000)] = 3_000_000
    """Live ids (webhook deliveries, DPoP proofs) the replay bucket shared by every replica
    holds; a request that would need one more is refused with 503."""
    replay_per_client: Annotated[int, Meta(ge=10)] = 100_000
    """Live ids one client (a webhook source, a DPoP key) may hold through one replica;
    beyond it, 429 until its oldest expire."""
    max_body: Annotated[int, Meta(ge=1024)] | None = None
    """Compressed (on-the-wire) body cap; default: the process's ``http_max_body``."""
    max_decompressed_body: Annotated[int, Meta(ge=1024)] | None = None
    """Cap on a body after gzip/zstd decoding; default: the same as ``max_body``."""
    wait_timeout_s: Annotated[float, Meta(gt=0, le=120)] = 10.0
    preview_timeout_s: Annotated[float, Meta(gt=0, le=120)] = 5.0
    """Deadline of an impact preview asked of the planners over NATS (503 past it)."""
    verify_timeout_s: Annotated[float, Meta(gt=0, le=600)] = 120.0
    """Deadline of a chain verification asked of the auditors over NATS (503 past it)."""
    access_log: str = "stderr"
    """``stderr``, a file path (JSON lines, buffered), ``logger`` (the logging module's
    ``streamproc.gateway.access`` at INFO), or ``off``."""
    tls: Tls | None = None

    def __post_init__(self) -> None:
        names = [s.name for s in self.webhooks]
        if len(set(names)) != len(names):
            raise ValueError("webhook source names must be unique")
        if FEEDS_SOURCE in names:
            raise ValueError(
                f"webhook source name {FEEDS_SOURCE!r} is the feeds role's: its exports are "
                "recorded as that source"
            )
        kids = [k.kid for i in self.issuers for k in i.keys]
        if len(set(kids)) != len(kids):
            raise ValueError("issuer key ids (kid) must be unique across issuers")
        if "dpop+jwt" in {t.lower().removeprefix("application/") for t in self.token_types}:
            raise ValueError("token_types: a DPoP proof (dpop+jwt) is not an access token")


def resolve_ref(value: str, env: Mapping[str, str]) -> str:
    """``file:PATH`` → the file's trimmed content, ``env:NAME`` → the variable (in ``env``,
    the process's configuration), else as is."""
    if value.startswith("file:"):
        path = Path(value[5:])
        try:
            return path.read_text().strip()
        except OSError as exc:
            raise GatewayConfigError(f"cannot read secret file {path}: {exc.strerror}") from None
    if value.startswith("env:"):
        name = value[4:]
        if name not in env:
            raise GatewayConfigError(f"environment variable {name} (a secret reference) is unset")
        return env[name]
    return value


_SCALARS = {
    "AUDIENCE": "audience",
    "PUBLIC_BASE_URL": "public_base_url",
    "MAX_BODY": "max_body",
    "MAX_DECOMPRESSED_BODY": "max_decompressed_body",
    "WAIT_TIMEOUT_S": "wait_timeout_s",
    "ACCESS_LOG": "access_log",
    "LEEWAY_S": "leeway_s",
    "WEBHOOK_WINDOW_S": "webhook_window_s",
    "REPLAY_CACHE_SIZE": "replay_cache_size",
    "REPLAY_PER_CLIENT": "replay_per_client",
    "PREVIEW_TIMEOUT_S": "preview_timeout_s",
    "VERIFY_TIMEOUT_S": "verify_timeout_s",
    "MAX_TOKEN_LIFETIME_S": "max_token_lifetime_s",
}
_DPOP_SCALARS = {
    "DPOP_NONCE_SECRET": "nonce_secret",
    "DPOP_NONCE_TTL_S": "nonce_ttl_s",
    "DPOP_IAT_WINDOW_S": "iat_window_s",
}


class _Given(msgspec.Struct, kw_only=True):
    """What the settings give over the gateway's files: the file to read, and the scalar
    keys that were set (a key left at its default does not replace a file's value)."""

    file: str | None = None
    scalars: dict[str, object] = {}
    dpop: dict[str, object] = {}
    issuer: dict[str, object] | None = None


def load(env: Mapping[str, str], document: Mapping[str, object] | None = None) -> GatewaySettings:
    """``document`` (the config file's ``gateway`` tables), the file named by
    ``STREAMPROC_GATEWAY_CONFIG`` over it, then scalar overrides from the text of ``env``;
    raises GatewayConfigError. ``config check`` reads the text this way: each bad value is
    refused in the gateway's own words, attributed to its key (a process builds from its
    typed sections, :func:`configured`)."""
    given = _Given(file=env.get(ENV_FILE) or None)
    for suffix, field in _SCALARS.items():
        if env.get(ENV_PREFIX + suffix):
            given.scalars[field] = env[ENV_PREFIX + suffix]
    for suffix, field in (("REQUIRED_MODES", "required_modes"), ("TOKEN_TYPES", "token_types")):
        if env.get(ENV_PREFIX + suffix):
            given.scalars[field] = _listed(env[ENV_PREFIX + suffix])
    for suffix, field in _DPOP_SCALARS.items():
        if env.get(ENV_PREFIX + suffix):
            given.dpop[field] = env[ENV_PREFIX + suffix]
    if env.get(ENV_PREFIX + "DPOP_REQUIRE_NONCE"):
        given.dpop["require_nonce"] = flag(env[ENV_PREFIX + "DPOP_REQUIRE_NONCE"]) is True
    if env.get(ENV_PREFIX + "ISSUER") and env.get(ENV_PREFIX + "ISSUER_KEY"):
        tenants = env.get(ENV_PREFIX + "ISSUER_TENANTS")
        given.issuer = _issuer(
            env[ENV_PREFIX + "ISSUER"], env[ENV_PREFIX + "ISSUER_KEY"],
            _listed(tenants) if tenants else None,
        )  # fmt: skip
    return _merged(document, given)


def from_sections(
    sections: Sections, document: Mapping[str, object] | None, *, given: Collection[str]
) -> GatewaySettings:
    """:func:`load` from the typed ``[gateway]`` and ``[gateway.dpop]`` sections: the keys
    whose environment names are in ``given`` override the files'."""
    gateway, typed_dpop = sections.gateway, sections.gateway_dpop
    out = _Given(file=gateway.config)
    for suffix, field in _SCALARS.items():
        if ENV_PREFIX + suffix in given:
            out.scalars[field] = getattr(gateway, field)
    for suffix, field in (("REQUIRED_MODES", "required_modes"), ("TOKEN_TYPES", "token_types")):
        if ENV_PREFIX + suffix in given:
            out.scalars[field] = list(getattr(gateway, field))
    for suffix, field in _DPOP_SCALARS.items():
        if ENV_PREFIX + suffix in given:
            out.dpop[field] = getattr(typed_dpop, field)
    if ENV_PREFIX + "DPOP_REQUIRE_NONCE" in given:
        out.dpop["require_nonce"] = typed_dpop.require_nonce
    if gateway.issuer and gateway.issuer_key:
        tenants = list(gateway.issuer_tenants) if gateway.issuer_tenants else None
        out.issuer = _issuer(gateway.issuer, gateway.issuer_key, tenants)
    return _merged(document, out)


def _issuer(issuer: str, kid_key: str, tenants: list[str] | None) -> dict[str, object]:
    """The issuer the scalar keys name: ``issuer_key`` is ``KID=KEY``."""
    kid, _, key = kid_key.partition("=")
    out: dict[str, object] = {"issuer": issuer, "keys": [{"kid": kid, "public_key": key}]}
    if tenants:
        out["tenants"] = tenants
    return out


def _merged(document: Mapping[str, object] | None, given: _Given) -> GatewaySettings:
    """The tables, the gateway file over them, then what ``given`` sets."""
    base = dict(document or {})
    raw: dict[str, object] = {}
    path = given.file
    if path:
        try:
            text = Path(path).read_bytes()
        except OSError as exc:
            raise GatewayConfigError(f"{ENV_FILE}={path}: {exc.strerror}") from None
        try:
            raw = (
                tomllib.loads(text.decode())
                if path.endswith(".toml")
                else msgspec.json.decode(text)
            )
        except (tomllib.TOMLDecodeError, msgspec.DecodeError, UnicodeDecodeError) as exc:
            raise GatewayConfigError(f"{path}: {exc}") from None
        if not isinstance(raw, dict):
            raise GatewayConfigError(f"{path}: the top level must be an object")
    raw = {**base, **raw, **given.scalars}
    raw["dpop"] = {**dict(raw.get("dpop") or {}), **given.dpop}  # type: ignore[call-overload]  # raw is the config mapping (object values); dpop is a table there
    if given.issuer is not None:
        raw["issuers"] = [*list(raw.get("issuers") or []), given.issuer]  # type: ignore[call-overload]  # raw is the config mapping (object values); issuers is a list there
    try:
        return msgspec.convert(raw, GatewaySettings, strict=False)
    except msgspec.ValidationError as exc:
        raise GatewayConfigError(f"gateway configuration: {exc}") from None


def configured(configuration: Configuration) -> GatewaySettings:
    """The gateway's settings in the process's configuration: its file tables and typed
    sections (which keys were given is read off the text, not parsed again)."""
    given = {k for k, v in configuration.values.items() if v and k.startswith(ENV_PREFIX)}
    return from_sections(configuration.sections, configuration.document("gateway"), given=given)


def _listed(text: str) -> list[str]:
    """A comma-separated environment value."""
    return [v.strip() for v in text.split(",") if v.strip()]
