"""Caller authentication over real HTTP: JWT checks, 401 vs 403, DPoP with nonces."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from nacl.signing import SigningKey

from streamproc.gateway.auth import jwt
from streamproc.gateway.auth.dpop import access_token_hash
from streamproc.natsd.server import EmbeddedNats
from tests.gateway.conftest import drop_streams
from tests.gateway.harness import (
    BASE,
    DPOP_KEY,
    ISSUER,
    ISSUER_KEY,
    OTHER_KEY,
    Harness,
    default_settings,
    dpop_jkt,
    dpop_proof,
    start,
    stop,
    token,
)

LIST = f"{BASE}/schedules"


def unsigned(header: dict[str, object], claims: dict[str, object], sig: bytes = b"") -> str:
    h = jwt.b64url(json.dumps(header).encode())
    c = jwt.b64url(json.dumps(claims).encode())
    return f"{h}.{c}.{jwt.b64url(sig)}"


async def test_missing_token_is_401_with_both_challenges(gw: Harness) -> None:
    seq = await gw.last_seq()
    status, body, headers = await gw.call("POST", LIST, json={"name": "x"})
    assert status == 401
    assert body["type"] == "urn:streamproc:problem:unauthorized"
    challenges = headers.getall("WWW-Authenticate")
    assert 'Bearer realm="scheduler"' in challenges
    assert 'DPoP realm="scheduler", algs="EdDSA ES256"' in challenges
    assert await gw.last_seq() == seq


@pytest.mark.parametrize(
    ("tok", "why"),
    [
        (
            unsigned(
                {"alg": "none"},
                {
                    "iss": ISSUER,
                    "aud": "scheduler",
                    "exp": 2**40,
                    "tenant": "acme",
                    "scope": "scheduler.admin",
                },
            ),
            "alg 'none'",
        ),
        (unsigned({"alg": "HS256", "kid": "k1"}, {"tenant": "acme"}, b"x" * 32), "alg 'HS256'"),
        (unsigned({"alg": "EdDSA", "kid": "k1", "crit": ["b64"]}, {}, b"x" * 64), "critical"),
        (token(key=OTHER_KEY), "signature does not verify"),
        (token(kid="nope"), "unknown signing key"),
        (token(ttl=-120), "expired"),
        # Made when the test runs: made at collection, they would come due on a slow run.
        (lambda: token(nbf=int(time.time()) + 600), "not yet valid"),
        (lambda: token(iat=int(time.time()) + 600), "issued in the future"),
        (token(aud="other"), "audience"),
        (token(iss="https://evil"), "issuer"),
        (token(tenant=None), "tenant"),
        (token(tenant="Bad.Tenant"), "tenant"),
        ("abc", "compact JWS"),
        ("a.b.c", "base64url"),
    ],
)
async def test_bad_tokens_are_401(gw: Harness, tok: str | Callable[[], str], why: str) -> None:
    status, body, headers = await gw.call("GET", LIST, tok=tok() if callable(tok) else tok)
    assert status == 401, body
    assert why in body["detail"]
    assert any('error="invalid_token"' in c for c in headers.getall("WWW-Authenticate"))


async def test_scopes_403_not_401(gw: Harness) -> None:
    seq = await gw.last_seq()
    reader = token(scopes="scheduler.read")
    status, _, _ = await gw.call("GET", LIST, tok=reader)
    assert status == 200
    status, body, headers = await gw.call(
        "POST", LIST, tok=reader, json={"name": "n", "whenCron": "* * * * *", "timezone": "UTC"}
    )
    assert status == 403 and body["reason"] == "insufficient_scope"
    assert 'scope="scheduler.admin"' in headers["WWW-Authenticate"]
    status, _, _ = await gw.call("GET", LIST, tok=token(scopes="other.scope"))
    assert status == 403
    status, _, _ = await gw.call("GET", LIST, tok=token(scopes=None, scp=["scheduler.read"]))
    assert status == 200
    assert await gw.last_seq() == seq


async def test_malformed_authorization_header(gw: Harness) -> None:
    status, body, _ = await gw.call("GET", LIST, headers={"Authorization": "Basic abc"})
    assert status == 401 and body["reason"] == "invalid_request"


async def test_dpop_nonce_dance_binding_and_replay(gw: Harness) -> None:
    url = gw.url + LIST
    tok = token(scopes="scheduler.read", cnf={"jkt": dpop_jkt()})
    # A DPoP-bound token used as a plain bearer token is refused.
    status, body, _ = await gw.call("GET", LIST, tok=tok)
    assert status == 401 and "DPoP scheme" in body["detail"]
    auth = {"Authorization": f"DPoP {tok}"}
    status, body, h = await gw.call("GET", LIST, headers=auth)
    assert status == 401 and body["reason"] == "invalid_dpop_proof"
    # No nonce yet: the server hands one out with use_dpop_nonce.
    status, body, h = await gw.call(
        "GET", LIST, headers={**auth, "DPoP": dpop_proof("GET", url, tok)}
    )
    assert status == 401 and body["reason"] == "use_dpop_nonce"
    assert 'error="use_dpop_nonce"' in " ".join(h.getall("WWW-Authenticate"))
    nonce = h["DPoP-Nonce"]
    proof = dpop_proof("GET", url, tok, nonce=nonce)
    status, body, h = await gw.call("GET", LIST, headers={**auth, "DPoP": proof})
    assert status == 200, body
    assert h["DPoP-Nonce"]
    # The same proof again is a replay.
    status, body, _ = await gw.call("GET", LIST, headers={**auth, "DPoP": proof})
    assert status == 401 and "already used" in body["detail"]
    bad = {
        "htm": dpop_proof("POST", url, tok, nonce=nonce),
        "htu": dpop_proof("GET", gw.url + "/elsewhere", tok, nonce=nonce),
        "iat": dpop_proof("GET", url, tok, nonce=nonce, iat=time.time() - 3600),
        "ath": dpop_proof("GET", url, token(), nonce=nonce),
        "key": dpop_proof("GET", url, tok, nonce=nonce, key=SigningKey(b"\x09" * 32)),
        "nonce": dpop_proof("GET", url, tok, nonce="AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
    }
    for what, p in bad.items():
        status, body, _ = await gw.call("GET", LIST, headers={**auth, "DPoP": p})
        assert status == 401, what
        expected = "use_dpop_nonce" if what == "nonce" else "invalid_dpop_proof"
        assert body["reason"] == expected, (what, body)
    # A proof that carries its private key is refused outright.
    header = {"typ": "dpop+jwt", "jwk": {**jwt.okp_jwk(DPOP_KEY.verify_key), "d": "x"}}
    leaked = jwt.sign(
        {"jti": "j", "htm": "GET", "htu": url, "iat": int(time.time())}, DPOP_KEY, header
    )
    status, body, _ = await gw.call("GET", LIST, headers={**auth, "DPoP": leaked})
    assert status == 401 and "private" in body["detail"]


async def test_unbound_token_with_dpop_scheme_is_refused(gw: Harness) -> None:
    tok = token()
    proof = dpop_proof("GET", gw.url + LIST, tok)
    status, body, _ = await gw.call(
        "GET", LIST, headers={"Authorization": f"DPoP {tok}", "DPoP": proof}
    )
    assert status == 401 and "not DPoP-bound" in body["detail"]


async def test_sender_constraint_can_be_required(
    tmp_path: Path, nats_server: EmbeddedNats, prefix: str
) -> None:
    settings = default_settings(tmp_path, required_modes=["dpop"], dpop={"require_nonce": False})
    h = await start(tmp_path, nats_server.url, prefix, settings)
    try:
        status, body, _ = await h.call("GET", LIST, tok=token())
        assert status == 401 and "sender-constrained" in body["detail"]
        tok = token(cnf={"jkt": dpop_jkt()})
        proof = dpop_proof("GET", h.url + LIST, tok)
        status, body, hdrs = await h.call(
            "GET", LIST, headers={"Authorization": f"DPoP {tok}", "DPoP": proof}
        )
        assert status == 200, body
        assert "DPoP-Nonce" not in hdrs
        assert [c for c in hdrs.getall("WWW-Authenticate", [])] == []
    finally:
        await stop(h)
        await drop_streams(nats_server.url, prefix)


# ---------------------------------------------------------------------- hostile tokens

OTHER_ISSUER = "https://other-authority.test"


@pytest.fixture
async def two_issuers(
    tmp_path: Path, nats_server: EmbeddedNats, prefix: str
) -> AsyncIterator[Harness]:
    """The test issuer may speak for ``acme`` and ``team-*``; a second one for ``globex``."""
    issuers = [
        {
            "issuer": ISSUER,
            "tenants": ["acme", "team-*"],
            "keys": [{"kid": "k1", "public_key": jwt.b64url(bytes(ISSUER_KEY.verify_key))}],
        },
        {
            "issuer": OTHER_ISSUER,
            "tenants": ["globex"],
            "keys": [{"kid": "o1", "public_key": jwt.b64url(bytes(OTHER_KEY.verify_key))}],
        },
    ]
    h = await start(tmp_path, nats_server.url, prefix, default_settings(tmp_path, issuers=issuers))
    try:
        yield h
    finally:
        await stop(h)
        await drop_streams(nats_server.url, prefix)


def other(tenant: str, **claims: object) -> str:
    return token(tenant, key=OTHER_KEY, kid="o1", iss=OTHER_ISSUER, **claims)


async def test_an_issuer_speaks_only_for_its_own_tenants(two_issuers: Harness) -> None:
    gw = two_issuers
    created = {"id": "acme-only", "name": "n", "whenCron": "0 2 * * *", "timezone": "UTC"}
    status, body, _ = await gw.call("POST", LIST + "?wait=true", tok=token("acme"), json=created)
    assert status == 201, body
    seq = await gw.last_seq()
    # The attack: the second issuer mints a token for acme and reads acme's schedules.
    for path in (LIST, f"{LIST}/acme-only", f"{BASE}/runs"):
        status, body, headers = await gw.call("GET", path, tok=other("acme"))
        assert status == 401, (path, body)
        assert body["detail"] == f"issuer {OTHER_ISSUER} may not speak for tenant acme"
        assert 'error="invalid_token"' in " ".join(headers.getall("WWW-Authenticate"))
    status, body, _ = await gw.call("POST", LIST, tok=other("acme"), json={**created, "id": "x"})
    assert status == 401 and await gw.last_seq() == seq
    # Each issuer keeps its own tenants, patterns included.
    status, body, _ = await gw.call("GET", LIST, tok=other("globex"))
    assert status == 200 and body["items"] == []
    status, _, _ = await gw.call("GET", LIST, tok=token("team-blue"))
    assert status == 200
    for tok, tenant, iss in (
        (token("globex"), "globex", ISSUER),
        (other("team-a"), "team-a", OTHER_ISSUER),
        (token("teamx"), "teamx", ISSUER),
    ):
        status, body, _ = await gw.call("GET", LIST, tok=tok)
        assert status == 401 and body["detail"] == f"issuer {iss} may not speak for tenant {tenant}"


def appended(tok: str, junk: str) -> str:
    return tok + junk


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda: appended(token(), "$$$$"), "not base64url"),
        (lambda: appended(token(), "=="), "not base64url"),
        (lambda: token(ttl=10 * 365 * 86400), "exceeds the maximum of 86400 s"),
        (lambda: token(ttl=86400 + 31), "exceeds the maximum of 86400 s"),
        (lambda: token(iat=None), "no iat"),
        (lambda: token(typ=None), "typ must be at+jwt"),
        (lambda: token(typ="JWT"), "typ must be at+jwt"),
        (lambda: token(typ="dpop+jwt"), "typ must be at+jwt"),
        (lambda: token(exp=None), "exp"),
    ],
    ids=[
        "junk",
        "padding",
        "10-years",
        "a-day-and-more",
        "no-iat",
        "no-typ",
        "typ-JWT",
        "typ-dpop",
        "no-exp",
    ],
)
async def test_lenient_or_unbounded_tokens_are_401(gw: Harness, make: object, why: str) -> None:
    assert callable(make)
    status, body, _ = await gw.call("GET", LIST, tok=make())
    assert status == 401, body
    assert why in body["detail"], body


async def test_the_longest_lifetime_and_every_spelling_of_at_jwt_pass(gw: Harness) -> None:
    for tok in (token(ttl=86400), token(typ="application/at+jwt"), token(typ="AT+JWT")):
        status, body, _ = await gw.call("GET", LIST, tok=tok)
        assert status == 200, body


def deep(n: int) -> str:
    return "[" * n + "]" * n


async def test_deeply_nested_jose_json_is_401_not_500(gw: Harness) -> None:
    """No token needed for the header; a proof's jwk and claims are the client's own."""
    url = gw.url + LIST
    header = jwt.b64url(('{"alg":"EdDSA","kid":"k1","x":' + deep(2500) + "}").encode())
    forged = f"{header}.{jwt.b64url(b'{}')}.{jwt.b64url(bytes(64))}"
    status, body, _ = await gw.call("GET", LIST, tok=forged)
    assert status == 401 and "nested deeper than 16 levels" in body["detail"], body
    tok = token(scopes="scheduler.read", cnf={"jkt": dpop_jkt()})
    auth = {"Authorization": f"DPoP {tok}"}
    jwk = json.dumps(jwt.okp_jwk(DPOP_KEY.verify_key))[:-1] + ',"ext":' + deep(1500) + "}"
    claims = json.dumps(
        {
            "jti": "j1",
            "htm": "GET",
            "htu": url,
            "iat": int(time.time()),
            "ath": access_token_hash(tok),
        }
    )
    for head, payload in (
        ('{"alg":"EdDSA","typ":"dpop+jwt","jwk":' + jwk + "}", claims),
        (
            json.dumps(
                {"alg": "EdDSA", "typ": "dpop+jwt", "jwk": jwt.okp_jwk(DPOP_KEY.verify_key)}
            ),
            claims[:-1] + ',"x":' + deep(1500) + "}",
        ),
    ):
        h, p = jwt.b64url(head.encode()), jwt.b64url(payload.encode())
        proof = f"{h}.{p}.{jwt.b64url(DPOP_KEY.sign(f'{h}.{p}'.encode()).signature)}"
        status, body, _ = await gw.call("GET", LIST, headers={**auth, "DPoP": proof})
        assert status == 401 and body["reason"] == "invalid_dpop_proof", body
        assert "nested deeper than 16 levels" in body["detail"]


async def test_what_a_refusal_echoes_stays_printable_ascii_and_short(gw: Harness) -> None:
    status, body, headers = await gw.call("GET", LIST, tok=token(typ="\u20ac\r\nX-Evil: 1" * 50))
    assert status == 401 and "X-Evil" not in headers and "typ must be" in body["detail"]
    challenge = headers.getall("WWW-Authenticate")[0]
    assert challenge.isascii() and challenge.isprintable() and len(challenge) < 300, challenge


# ---------------------------------------------------------------------- ES256 proofs


def es256_proof(key: ec.EllipticCurvePrivateKey, claims: dict[str, object], **jwk: str) -> str:
    """A DPoP proof as a browser's WebCrypto signs it: ES256, R ‖ S, the public EC jwk."""
    pub = key.public_key().public_numbers()
    header = {
        "alg": "ES256",
        "typ": "dpop+jwt",
        "jwk": {"kty": "EC", "crv": "P-256", "x": jwt.b64url(pub.x.to_bytes(32, "big")),
                "y": jwt.b64url(pub.y.to_bytes(32, "big")), **jwk},
    }  # fmt: skip
    h = jwt.b64url(json.dumps(header).encode())
    p = jwt.b64url(json.dumps(claims).encode())
    r, s = decode_dss_signature(key.sign(f"{h}.{p}".encode(), ec.ECDSA(hashes.SHA256())))
    return f"{h}.{p}.{jwt.b64url(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


def ec_jkt(key: ec.EllipticCurvePrivateKey) -> str:
    pub = key.public_key().public_numbers()
    return jwt.jwk_thumbprint({"kty": "EC", "crv": "P-256",
                               "x": jwt.b64url(pub.x.to_bytes(32, "big")),
                               "y": jwt.b64url(pub.y.to_bytes(32, "big"))})  # fmt: skip


async def test_es256_proofs_from_a_p256_key_are_accepted_as_well_as_eddsa(gw: Harness) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    url = gw.url + LIST
    tok = token(scopes="scheduler.read", cnf={"jkt": ec_jkt(key)})
    auth = {"Authorization": f"DPoP {tok}"}

    def claims(**over: object) -> dict[str, object]:
        base = {"jti": uuid.uuid4().hex, "htm": "GET", "htu": url, "iat": int(time.time()),
                "ath": access_token_hash(tok)}  # fmt: skip
        return {**base, **over}

    status, body, h = await gw.call(
        "GET", LIST, headers={**auth, "DPoP": es256_proof(key, claims())}
    )
    assert status == 401 and body["reason"] == "use_dpop_nonce", body
    nonce = h["DPoP-Nonce"]
    good = es256_proof(key, claims(nonce=nonce))
    status, body, _ = await gw.call("GET", LIST, headers={**auth, "DPoP": good})
    assert status == 200, body
    other = ec.generate_private_key(ec.SECP256R1())
    hp, pp, sig = es256_proof(key, claims(nonce=nonce)).split(".")
    flipped = jwt.b64url(bytes([jwt.b64url_decode(sig)[0] ^ 1]) + jwt.b64url_decode(sig)[1:])
    bad = {
        "a signature that does not verify": f"{hp}.{pp}.{flipped}",
        "another P-256 key": es256_proof(other, claims(nonce=nonce)),
        "not a point on P-256": es256_proof(key, claims(nonce=nonce), y=jwt.b64url(b"\x01" * 32)),
        "an OKP key under ES256": es256_proof(key, claims(nonce=nonce), kty="OKP", crv="Ed25519"),
        "a private key in the header": es256_proof(key, claims(nonce=nonce), d="AAAA"),
        # EdDSA over an EC key, and ES256 for an access token, are refused too.
        "EdDSA with an EC jwk": jwt.sign(
            claims(nonce=nonce), DPOP_KEY,
            {"typ": "dpop+jwt", "jwk": {"kty": "EC", "crv": "P-256", "x": "A", "y": "B"}},
        ),
    }  # fmt: skip
    for what, proof in bad.items():
        status, body, _ = await gw.call("GET", LIST, headers={**auth, "DPoP": proof})
        assert status == 401 and body["reason"] == "invalid_dpop_proof", (what, body)
    now = int(time.time())
    es_claims = {"iss": ISSUER, "aud": "scheduler", "tenant": "acme", "exp": now + 60, "iat": now}
    es_token = es256_proof(key, es_claims)
    status, body, _ = await gw.call("GET", LIST, tok=es_token)
    assert status == 401 and "alg 'ES256' is not accepted (EdDSA only)" in body["detail"], body
