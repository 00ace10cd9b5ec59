"""``streamproc token keygen|issue|dpop-proof``: development keys, access tokens and DPoP
proofs. Key files are private JWKs (OKP, Ed25519) written with mode 0600."""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from nacl.signing import SigningKey

from streamproc import exitcodes
from streamproc.cliargs import add_config_flag, configuration
from streamproc.client.settings import client_of, dpop_key
from streamproc.config import load
from streamproc.gateway.auth import jwt
from streamproc.gateway.auth.dpop import access_token_hash
from streamproc.gateway.auth.tls import x5t_s256
from streamproc.names import (
    ADMIN_SCOPE,
    AUDIENCE,
    IMAGES_WRITE_SCOPE,
    READ_SCOPE,
    VEX_WRITE_SCOPE,
    WEBHOOK_SCOPE,
)

DEFAULT_ISSUER = "https://authority.local"


class KeyFileError(ValueError):
    """A ``--key`` file that is not one ``token keygen`` wrote."""


def load_key_file(path: str | Path) -> tuple[SigningKey, dict[str, Any]]:
    """A private JWK written by ``token keygen`` (or ``up --demo``): the key and the doc."""
    try:
        doc = json.loads(Path(path).read_text())
        seed = jwt.b64url_decode(doc["d"])
    except (OSError, ValueError, KeyError, TypeError, jwt.JwtError) as exc:
        raise KeyFileError(f"{path} is not a key file from `token keygen`: {exc}") from None
    return SigningKey(seed), doc


def write_key_file(path: Path, key: SigningKey, **extra: str) -> dict[str, Any]:
    """Write ``key`` as a private JWK (mode 0600) with ``extra`` members; the doc."""
    doc = {**jwt.okp_jwk(key.verify_key), "d": jwt.b64url(bytes(key)), **extra}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    return doc


def mint_token(
    key: SigningKey,
    doc: dict[str, Any],
    *,
    tenant: str,
    scope: str,
    issuer: str | None = None,
    audience: str = AUDIENCE,
    sub: str = "dev",
    ttl: int = 3600,
    cnf: dict[str, str] | None = None,
    now: int | None = None,
) -> str:
    """An access token (``typ: at+jwt``) signed with an issuer key file's key."""
    iat = int(time.time()) if now is None else now
    claims: dict[str, Any] = {
        "iss": issuer or doc.get("iss") or DEFAULT_ISSUER,
        "aud": audience,
        "sub": sub,
        "tenant": tenant,
        "scope": scope,
        "iat": iat,
        "nbf": iat,
        "exp": iat + ttl,
        "jti": uuid.uuid4().hex,
    }
    if cnf:
        claims["cnf"] = cnf
    return jwt.sign(claims, key, {"typ": "at+jwt", "kid": doc.get("kid")})


def dpop_proof(
    key: SigningKey,
    *,
    htm: str,
    htu: str,
    token: str | None = None,
    ath: str | None = None,
    nonce: str | None = None,
) -> str:
    """A DPoP proof (RFC 9449) for one request, signed with the client's key."""
    claims: dict[str, Any] = {
        "jti": uuid.uuid4().hex,
        "htm": htm.upper(),
        "htu": htu,
        "iat": int(time.time()),
    }
    if token:
        claims["ath"] = access_token_hash(token)
    elif ath:
        claims["ath"] = ath
    if nonce:
        claims["nonce"] = nonce
    return jwt.sign(claims, key, {"typ": "dpop+jwt", "jwk": jwt.okp_jwk(key.verify_key)})


def cmd_keygen(args: argparse.Namespace) -> int:
    key = SigningKey.generate()
    kid = args.kid or uuid.uuid4().hex[:16]
    public = jwt.okp_jwk(key.verify_key)
    out = Path(args.out)
    if out.exists() and not args.force:
        print(f"streamproc: {out} exists (use --force to replace it)", file=sys.stderr)
        return exitcodes.USAGE
    write_key_file(out, key, kid=kid, iss=args.issuer)
    tenants = args.tenant or ["*"]
    snippet = {
        "issuer": args.issuer,
        "tenants": tenants,
        "keys": [{"kid": kid, "public_key": public["x"]}],
    }
    print(f"wrote {out} (private; keep it secret)")
    print(f"jkt (for --jkt / DPoP binding): {jwt.jwk_thumbprint(public)}")
    where = "every tenant" if tenants == ["*"] else ", ".join(tenants)
    print(f"gateway config (issuers entry; its tokens may speak for {where}):")
    print(json.dumps(snippet, indent=2))
    return 0


def cmd_issue(args: argparse.Namespace) -> int:
    key, doc = load_key_file(args.key)
    scopes = " ".join(s for group in args.scope for s in group.split()) or READ_SCOPE
    cnf: dict[str, str] = {}
    if args.dpop_key:
        _, client = load_key_file(args.dpop_key)
        cnf["jkt"] = jwt.jwk_thumbprint(client)
    elif args.jkt:
        cnf["jkt"] = args.jkt
    if args.cert:
        cnf["x5t#S256"] = x5t_s256(ssl.PEM_cert_to_DER_cert(Path(args.cert).read_text()))
    print(
        mint_token(
            key,
            doc,
            tenant=args.tenant,
            scope=scopes,
            issuer=args.issuer,
            audience=args.audience,
            sub=args.sub,
            ttl=args.ttl,
            cnf=cnf,
        )
    )
    return 0


def cmd_dpop_proof(args: argparse.Namespace) -> int:
    key, _ = load_key_file(args.key)
    print(
        dpop_proof(
            key, htm=args.htm, htu=args.htu, token=args.token, ath=args.ath, nonce=args.nonce
        )
    )
    return 0


def cmd_client_key(args: argparse.Namespace) -> int:
    """This data directory's DPoP client key: created on first use, its thumbprint printed
    (what ``token issue --jkt`` binds a token to)."""
    settings = load({"data_dir": args.data_dir}, configuration(args))
    key = dpop_key(settings.data_dir, client_of(settings.configuration))
    print(key.jkt)
    print(f"{key.path} (private; every command on this data directory signs with it)",
          file=sys.stderr)  # fmt: skip
    return 0


def register(subparsers: Any) -> None:
    """Add ``token`` and its subcommands to the CLI's subparsers."""
    token = subparsers.add_parser("token", help="development keys, tokens and DPoP proofs")
    sub = token.add_subparsers(dest="token_command", required=True)

    p = sub.add_parser("keygen", help="create an Ed25519 key file (issuer or DPoP client)")
    p.add_argument("--out", required=True)
    p.add_argument("--kid", help="key id (default: random)")
    p.add_argument("--issuer", default=DEFAULT_ISSUER, help="iss of tokens signed with it")
    p.add_argument(
        "--tenant",
        action="append",
        default=[],
        help="a tenant (or prefix* pattern) the printed issuers entry may speak for "
        "(repeatable; default *: every tenant)",
    )
    p.add_argument("--force", action="store_true")
    p.set_defaults(fn=cmd_keygen)

    p = sub.add_parser("issue", help="mint an access token (JWT, EdDSA)")
    p.add_argument("--key", required=True, help="issuer key file")
    p.add_argument("--tenant", required=True)
    p.add_argument(
        "--scope",
        action="append",
        default=[],
        help=f"{READ_SCOPE}, {ADMIN_SCOPE}, {IMAGES_WRITE_SCOPE}, {VEX_WRITE_SCOPE} and/or "
        f"{WEBHOOK_SCOPE} (repeatable)",
    )
    p.add_argument("--audience", default=AUDIENCE)
    p.add_argument("--issuer", help="default: the key file's iss")
    p.add_argument("--sub", default="dev", help="subject (who)")
    p.add_argument(
        "--ttl", type=int, default=3600, help="lifetime in seconds (gateways accept at most 86400)"
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument("--jkt", help="bind to a DPoP key thumbprint (cnf.jkt)")
    g.add_argument("--dpop-key", help="bind to this DPoP key file")
    p.add_argument("--cert", help="bind to this client certificate (PEM; cnf.x5t#S256)")
    p.set_defaults(fn=cmd_issue)

    p = sub.add_parser(
        "client-key",
        help="print the thumbprint (jkt) of this data directory's DPoP client key, creating it",
    )
    p.add_argument("--data-dir", help="default: ./data or $STREAMPROC_DATA_DIR")
    add_config_flag(p)
    p.set_defaults(fn=cmd_client_key)

    p = sub.add_parser("dpop-proof", help="mint a DPoP proof for one request")
    p.add_argument("--key", required=True, help="DPoP client key file")
    p.add_argument("--htm", required=True, help="HTTP method")
    p.add_argument("--htu", required=True, help="request URL without query")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--ath", help="base64url SHA-256 of the access token")
    g.add_argument("--token", help="the access token (ath is computed)")
    p.add_argument("--nonce", help="the server's DPoP-Nonce")
    p.set_defaults(fn=cmd_dpop_proof)
