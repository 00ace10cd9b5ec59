"""Pure pieces: JOSE parsing, thumbprints, decoding caps, settings, token CLI."""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import msgspec
import pytest
import zstandard
from nacl.signing import SigningKey

from streamproc.configfile.loader import environ
from streamproc.gateway import settings, tokens_cli
from streamproc.gateway.auth import jwt
from streamproc.gateway.hardening import decode_content, field_of
from streamproc.problems import ProblemError


def test_b64url_is_strict_and_thumbprint_matches_rfc_8037_example() -> None:
    assert jwt.b64url_decode("AQID") == b"\x01\x02\x03"
    for bad in ("AQ==", "A+B/", "A!"):
        with pytest.raises(jwt.JwtError):
            jwt.b64url_decode(bad)
    # RFC 8037 appendix A.3: the thumbprint of its Ed25519 example key.
    jwk = {"crv": "Ed25519", "kty": "OKP", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}
    assert jwt.jwk_thumbprint(jwk) == "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"


def test_parse_refuses_other_algorithms_before_anything_else() -> None:
    key = SigningKey(b"\x01" * 32)
    good = jwt.sign({"a": 1}, key, {"kid": "k"})
    c = jwt.parse(good)
    assert jwt.verify(c, key.verify_key)
    assert not jwt.verify(c, SigningKey(b"\x02" * 32).verify_key)
    head, body, sig = good.split(".")
    for alg in ("none", "HS256", "RS256", "ES256", "eddsa"):
        h = jwt.b64url(json.dumps({"alg": alg}).encode())
        with pytest.raises(jwt.JwtError, match="not accepted"):
            jwt.parse(f"{h}.{body}.{sig}")
    with pytest.raises(jwt.JwtError, match="64 bytes"):
        jwt.parse(f"{head}.{body}.{jwt.b64url(b'x')}")
    with pytest.raises(jwt.JwtError, match="too long"):
        jwt.parse("a" * 9000)


def test_decoding_caps_and_errors() -> None:
    data = b"x" * 5000
    assert decode_content(gzip.compress(data), "gzip", 5000) == data
    assert decode_content(zstandard.ZstdCompressor().compress(data), "zstd", 5000) == data
    assert decode_content(data, None, 10) == data  # identity: the wire cap applies, not this
    for enc, blob in (
        ("gzip", gzip.compress(data)),
        ("zstd", zstandard.ZstdCompressor().compress(data)),
    ):
        with pytest.raises(ProblemError) as e:
            decode_content(blob, enc, 4999)
        assert e.value.status == 413
    with pytest.raises(ProblemError) as e:
        decode_content(gzip.compress(data) + b"junk", "gzip", 10_000)
    assert e.value.status == 400
    assert field_of("Expected `str`, got `int` - at `$.a[0].b`") == "$.a[0].b"
    assert field_of("Object contains unknown field `x` - at `$.sel`") == "$.sel.x"
    assert field_of("Object contains unknown field `x`") == "$.x"
    assert field_of("invalid cron expression 'x': bad") == "$.whenCron"


def test_settings_from_toml_file_env_and_secret_references(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HMAC2", "other")
    (tmp_path / "hmac").write_text("s3cret\n")
    cfg = tmp_path / "gw.toml"
    cfg.write_text(
        'audience = "scheduler"\nrequired_modes = ["dpop"]\n'
        '[[webhooks]]\nname = "feedser"\nkind = "feedser"\ntenants = ["acme"]\n'
        f'hmac_secrets = ["file:{tmp_path / "hmac"}", "env:HMAC2"]\n'
    )
    s = settings.load(
        {
            settings.ENV_FILE: str(cfg),
            "STREAMPROC_GATEWAY_LEEWAY_S": "5",
            "STREAMPROC_GATEWAY_ISSUER": "https://a",
            "STREAMPROC_GATEWAY_ISSUER_KEY": "k1=" + "A" * 43,
            "STREAMPROC_GATEWAY_ISSUER_TENANTS": "acme, team-*",
        }
    )
    assert s.required_modes == ["dpop"] and s.leeway_s == 5 and s.issuers[0].keys[0].kid == "k1"
    assert s.issuers[0].tenants == ["acme", "team-*"]
    assert [settings.resolve_ref(x, environ()) for x in s.webhooks[0].hmac_secrets] == [
        "s3cret",
        "other",
    ]
    for bad, why in [
        ('[[webhooks]]\nname="f"\nkind="feedser"\ntenants=[]\nhmac_secrets=["x"]\n', "length"),
        (
            '[[webhooks]]\nname="f"\nkind="feedser"\ntenants=["Bad.T"]\nhmac_secrets=["x"]\n',
            "invalid tenant",
        ),
        ('[[webhooks]]\nname="f"\nkind="feedser"\ntenants=["a"]\n', "needs hmac_secrets"),
        ("surprise = 1\n", "unknown field"),
        ('required_modes = ["basic"]\n', "required_modes"),
    ]:
        cfg.write_text(bad)
        with pytest.raises(settings.GatewayConfigError, match=why):
            settings.load({settings.ENV_FILE: str(cfg)})
    with pytest.raises(settings.GatewayConfigError, match="secret file"):
        settings.resolve_ref(f"file:{tmp_path / 'missing'}", {})


def test_token_cli_keygen_issue_and_proof(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser()
    tokens_cli.register(parser.add_subparsers(dest="cmd"))

    def run(*argv: str) -> str:
        args = parser.parse_args(list(argv))
        assert args.fn(args) == 0
        return capsys.readouterr().out

    out = run(
        "token",
        "keygen",
        "--out",
        str(tmp_path / "issuer.json"),
        "--kid",
        "dev",
        "--tenant",
        "acme",
        "--tenant",
        "team-*",
    )
    assert oct((tmp_path / "issuer.json").stat().st_mode)[-3:] == "600"
    snippet = json.loads(out[out.index("{") :])
    assert msgspec.convert(snippet, settings.Issuer).tenants == ["acme", "team-*"]
    assert "may speak for acme, team-*" in out
    out = run("token", "keygen", "--out", str(tmp_path / "client.json"))
    assert json.loads(out[out.index("{") :])["tenants"] == ["*"]
    tok = run(
        "token",
        "issue",
        "--key",
        str(tmp_path / "issuer.json"),
        "--tenant",
        "acme",
        "--scope",
        "scheduler.admin",
        "--dpop-key",
        str(tmp_path / "client.json"),
    ).strip()
    c = jwt.parse(tok)
    key = SigningKey(jwt.b64url_decode(json.loads((tmp_path / "issuer.json").read_text())["d"]))
    assert jwt.verify(c, key.verify_key) and c.header.kid == "dev"
    claims = json.loads(c.payload)
    assert claims["tenant"] == "acme" and claims["cnf"]["jkt"] and claims["aud"] == "scheduler"
    assert snippet["keys"][0]["public_key"] == jwt.b64url(bytes(key.verify_key))
    proof = run(
        "token",
        "dpop-proof",
        "--key",
        str(tmp_path / "client.json"),
        "--htm",
        "get",
        "--htu",
        "http://127.0.0.1/x",
        "--token",
        tok,
        "--nonce",
        "n1",
    ).strip()
    p = jwt.parse(proof)
    assert (
        p.header.typ == "dpop+jwt"
        and jwt.jwk_thumbprint(p.header.jwk or {}) == claims["cnf"]["jkt"]
    )
    assert json.loads(p.payload)["htm"] == "GET"


def test_an_issuer_must_say_which_tenants_it_speaks_for() -> None:
    key = {"kid": "k1", "public_key": "A" * 43}
    with pytest.raises(settings.GatewayConfigError) as missing:
        settings.load({}, document={"issuers": [{"issuer": "https://a", "keys": [key]}]})
    assert "issuer https://a: `tenants` is required" in str(missing.value)
    assert "see docs/security.md" in str(missing.value) and "$.issuers[0]" in str(missing.value)
    for tenants, why in (
        ([], "is empty"),
        (["Acme"], "neither"),
        (["a*b"], "neither"),
        (["*x"], "neither"),
    ):
        with pytest.raises(settings.GatewayConfigError, match=why):
            settings.load(
                {}, document={"issuers": [{"issuer": "i", "keys": [key], "tenants": tenants}]}
            )
    with pytest.raises(settings.GatewayConfigError, match="`tenants` is required"):
        settings.load(
            {
                "STREAMPROC_GATEWAY_ISSUER": "https://a",
                "STREAMPROC_GATEWAY_ISSUER_KEY": "k1=" + "A" * 43,
            },
            document={},
        )
    issuer = settings.Issuer(
        issuer="i", keys=[settings.IssuerKey(**key)], tenants=["acme", "team-*"]
    )
    assert [issuer.speaks_for(t) for t in ("acme", "acme2", "team-a", "team-", "teamx")] == [
        True,
        False,
        True,
        True,
        False,
    ]
    anyone = msgspec.structs.replace(issuer, tenants=["*"])
    assert anyone.speaks_for("whoever")


def test_token_types_and_lifetime_settings() -> None:
    s = settings.load(
        {
            "STREAMPROC_GATEWAY_TOKEN_TYPES": "at+jwt, JWT",
            "STREAMPROC_GATEWAY_MAX_TOKEN_LIFETIME_S": "3600",
        },
        document={},
    )
    assert (s.token_types, s.max_token_lifetime_s) == (["at+jwt", "JWT"], 3600)
    with pytest.raises(settings.GatewayConfigError, match="not an access token"):
        settings.load({"STREAMPROC_GATEWAY_TOKEN_TYPES": "application/dpop+jwt"}, document={})
    with pytest.raises(settings.GatewayConfigError, match=">= 60"):
        settings.load({"STREAMPROC_GATEWAY_MAX_TOKEN_LIFETIME_S": "5"}, document={})


def test_a_process_builds_the_gateway_from_its_typed_sections(tmp_path: Path) -> None:
    """What ``configured`` builds equals what the text gives; a key left at its default does
    not replace the gateway file's value, a given one does."""
    from streamproc.config import Configuration

    cfg = tmp_path / "gw.toml"
    cfg.write_text('leeway_s = 7\nrequired_modes = ["dpop"]\n')
    env = {
        settings.ENV_FILE: str(cfg),
        "STREAMPROC_GATEWAY_MAX_TOKEN_LIFETIME_S": "3600",
        "STREAMPROC_GATEWAY_TOKEN_TYPES": "at+jwt, JWT",
        "STREAMPROC_GATEWAY_DPOP_REQUIRE_NONCE": "off",
        "STREAMPROC_GATEWAY_ISSUER": "https://a",
        "STREAMPROC_GATEWAY_ISSUER_KEY": "k1=" + "A" * 43,
        "STREAMPROC_GATEWAY_ISSUER_TENANTS": "acme, team-*",
    }
    s = settings.configured(Configuration(values=env))
    assert s == settings.load(env)
    assert (s.leeway_s, s.required_modes, s.max_token_lifetime_s) == (7, ["dpop"], 3600)
    assert (s.token_types, s.dpop.require_nonce) == (["at+jwt", "JWT"], False)
    assert s.issuers[0].tenants == ["acme", "team-*"] and s.issuers[0].keys[0].kid == "k1"
    given = settings.configured(Configuration(values={**env, "STREAMPROC_GATEWAY_LEEWAY_S": "30"}))
    assert given.leeway_s == 30
