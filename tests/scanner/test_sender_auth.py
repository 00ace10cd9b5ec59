"""Where `feedser export` (and `vexer export`, with its own settings) gets its tokens: a
configured token (bound to the data directory's client key), client credentials, an issuer
key (with `make run`, the development one, for its source's tenants), or none — and clear
refusals for what cannot work."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pytest
from nacl.signing import SigningKey

from streamproc.client.settings import dpop_key
from streamproc.client.tokens import ClientCredentials, StaticToken, TokenRefused
from streamproc.config import ConfigError, Configuration
from streamproc.configfile.sections import Client
from streamproc.gateway.tokens_cli import mint_token, write_key_file
from streamproc.jose import unverified_claims
from streamproc.scanner.sender_auth import MintedTokens, credentials

ISSUER = SigningKey(b"\x01" * 32)


def issuer_file(path: Path) -> Path:
    write_key_file(path, ISSUER, kid="k1", iss="https://authority.test")
    return path


def demo_dir(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    issuer_file(data / "dev" / "issuer.jwk")
    gateway = {"webhooks": [{"name": "feedser", "kind": "feedser", "tenants": ["demo"]},
                            {"name": "vexer", "kind": "vexer", "tenants": ["other"]}]}  # fmt: skip
    (data / "dev" / "gateway.json").write_text(json.dumps(gateway))
    return data


async def test_with_make_run_tokens_are_minted_for_its_feedser_sources_tenants(
    tmp_path: Path,
) -> None:
    data = demo_dir(tmp_path)
    creds = credentials(data, Configuration(values={}))
    assert creds.tenants == ["demo"] and isinstance(creds.tokens, MintedTokens)
    assert creds.key is not None and creds.key.path == data / "client" / "dpop.jwk"
    async with aiohttp.ClientSession() as http:
        token = await creds.tokens.token(http, "demo")
        assert await creds.tokens.token(http, "demo") == token, "kept until near expiry"
        assert creds.tokens.refused(token) and await creds.tokens.token(http, "demo") != token
        with pytest.raises(TokenRefused):
            await creds.tokens.token(http, None)
    claims = unverified_claims(token)
    assert claims is not None
    assert (claims["tenant"], claims["scope"], claims["cnf"]) == (
        "demo", "scheduler.webhook", {"jkt": creds.key.jkt}
    )  # fmt: skip
    assert claims["exp"] - claims["iat"] == 300
    assert credentials(
        data, Configuration(values={"STREAMPROC_FEEDSER_TENANTS": "a, b"})
    ).tenants == ["a", "b"]
    assert credentials(data, Configuration(values={}), tenants=["c"]).tenants == ["c"]


def test_a_configured_token_must_be_bound_to_the_client_key(tmp_path: Path) -> None:
    data = demo_dir(tmp_path)
    key = dpop_key(data, Client())
    issuer_doc = {"kid": "k1", "iss": "https://authority.test"}
    bound = mint_token(ISSUER, issuer_doc, tenant="demo", scope="scheduler.webhook",
                       cnf={"jkt": key.jkt})  # fmt: skip
    creds = credentials(data, Configuration(values={"STREAMPROC_FEEDSER_TOKEN": bound}))
    assert isinstance(creds.tokens, StaticToken) and creds.tenants == [None]
    assert credentials(data, Configuration(values={}), token=bound).how == "the configured token"
    other = mint_token(ISSUER, issuer_doc, tenant="demo", scope="scheduler.webhook",
                       cnf={"jkt": "someone-elses-key"})  # fmt: skip
    with pytest.raises(ConfigError, match="bound to the key someone-elses-key"):
        credentials(data, Configuration(values={"STREAMPROC_FEEDSER_TOKEN": other}))
    unbound = mint_token(ISSUER, issuer_doc, tenant="demo", scope="scheduler.webhook")
    with pytest.raises(ConfigError, match="not DPoP-bound"):
        credentials(data, Configuration(values={}), token=unbound)


def test_client_credentials_an_explicit_issuer_and_none(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {
        "STREAMPROC_CLIENT_TOKEN_URL": "https://authority.test/token",
        "STREAMPROC_CLIENT_ID": "feedser",
        "STREAMPROC_CLIENT_SECRET": "s3cret",
        "STREAMPROC_FEEDSER_TENANTS": "acme,globex",
    }
    creds = credentials(data, Configuration(values=env))
    assert isinstance(creds.tokens, ClientCredentials) and creds.tenants == ["acme", "globex"]
    assert creds.tokens.scopes == ("scheduler.webhook",)
    with pytest.raises(ConfigError, match="STREAMPROC_CLIENT_SECRET"):
        credentials(
            data,
            Configuration(values={k: v for k, v in env.items() if k != "STREAMPROC_CLIENT_SECRET"}),
        )
    # No development issuer here, nothing configured: no token (a source that takes none).
    assert credentials(data, Configuration(values={})).tokens is None
    issuer = issuer_file(tmp_path / "issuer.jwk")
    with pytest.raises(ConfigError, match="for which tenants"):
        credentials(data, Configuration(values={"STREAMPROC_FEEDSER_ISSUER_KEY": str(issuer)}))
    creds = credentials(
        data,
        Configuration(
            values={"STREAMPROC_FEEDSER_ISSUER_KEY": str(issuer), "STREAMPROC_FEEDSER_TENANTS": "x"}
        ),
    )
    assert isinstance(creds.tokens, MintedTokens) and creds.tenants == ["x"]


async def test_vexer_export_takes_its_own_settings_and_make_runs_vexer_source(
    tmp_path: Path,
) -> None:
    data = demo_dir(tmp_path)
    creds = credentials(data, Configuration(values={}), kind="vexer")
    assert creds.tenants == ["other"] and isinstance(creds.tokens, MintedTokens)
    async with aiohttp.ClientSession() as http:
        claims = unverified_claims(await creds.tokens.token(http, "other"))
    assert claims is not None and (claims["sub"], claims["scope"]) == ("vexer", "scheduler.webhook")
    feedsers = {"STREAMPROC_FEEDSER_TENANTS": "a", "STREAMPROC_FEEDSER_ISSUER_KEY": "/nowhere"}
    assert credentials(data, Configuration(values=feedsers), kind="vexer").tenants == ["other"], (
        "not Feedser's"
    )
    assert credentials(
        data, Configuration(values={"STREAMPROC_VEXER_TENANTS": "a,b"}), kind="vexer"
    ).tenants == [
        "a",
        "b",
    ]
    key = dpop_key(data, Client())
    bound = mint_token(ISSUER, {"kid": "k1", "iss": "https://authority.test"}, tenant="demo",
                       scope="scheduler.webhook", cnf={"jkt": key.jkt})  # fmt: skip
    mine = credentials(data, Configuration(values={"STREAMPROC_VEXER_TOKEN": bound}), kind="vexer")
    assert isinstance(mine.tokens, StaticToken) and mine.how == "the configured token"
    unbound = mint_token(ISSUER, {"kid": "k1", "iss": "https://authority.test"}, tenant="demo",
                         scope="scheduler.webhook")  # fmt: skip
    with pytest.raises(ConfigError, match="STREAMPROC_VEXER_TOKEN is not DPoP-bound"):
        credentials(data, Configuration(values={"STREAMPROC_VEXER_TOKEN": unbound}), kind="vexer")
