"""The client side of the API's authentication against a real DPoP-only gateway (real
nats-server, aiohttp on loopback): the key in the data directory, the nonce challenge, static
tokens and client credentials at a token endpoint, and no request without a token."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import stat
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from streamproc.client import cli as api_cli_module
from streamproc.client.dpop import KEY_FILE, DpopKey, KeyFileError
from streamproc.client.http import ApiClient, Unreachable
from streamproc.client.settings import client_of, dpop_key, token_source
from streamproc.client.tokens import ClientCredentials, StaticToken, TokenRefused, TokenUnavailable
from streamproc.config import ConfigError, Configuration
from streamproc.configfile.sections import Client as ClientSection
from streamproc.gateway.auth import jwt
from streamproc.gateway.auth.dpop import normalize_htu
from streamproc.natsd.server import EmbeddedNats, free_port
from tests.client.authority import Authority, Client, running
from tests.gateway.conftest import drop_streams
from tests.gateway.harness import (
    BASE,
    ISSUER,
    ISSUER_KEY,
    Harness,
    default_settings,
    signed_headers,
    start,
    stop,
    token,
)

LIST = f"{BASE}/schedules"
CLI = [sys.executable, "-m", "streamproc.cli"]


@pytest.fixture
async def dpop_gw(tmp_path: Path, nats_server: EmbeddedNats, prefix: str) -> AsyncIterator[Harness]:
    """A gateway that accepts DPoP-bound tokens only, with server nonces (the defaults)."""
    h = await start(
        tmp_path, nats_server.url, prefix, default_settings(tmp_path, required_modes=["dpop"])
    )
    try:
        yield h
    finally:
        await stop(h)
        await drop_streams(nats_server.url, prefix)


def test_the_key_is_made_once_in_the_data_directory_readable_by_its_owner_only(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    key = dpop_key(data, ClientSection())
    path = data / KEY_FILE
    assert key.path == path and path.exists()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert dpop_key(data, ClientSection()).jkt == key.jkt  # the same key next time
    doc = json.loads(path.read_text())
    assert doc["kty"] == "OKP" and doc["crv"] == "Ed25519" and "d" in doc
    assert jwt.jwk_thumbprint(doc) == key.jkt
    os.chmod(path, 0o644)
    with pytest.raises(KeyFileError, match="chmod 600"):
        dpop_key(data, ClientSection())
    os.chmod(path, 0o600)
    path.write_text("{}")
    with pytest.raises(KeyFileError, match="DPoP key"):
        dpop_key(data, ClientSection())


async def test_commands_started_together_share_one_key(tmp_path: Path) -> None:
    path = tmp_path / "k" / "dpop.jwk"
    keys = await asyncio.gather(
        *(asyncio.to_thread(DpopKey.load_or_create, path) for _ in range(8))
    )
    assert len({k.jkt for k in keys}) == 1
    assert [p.name for p in path.parent.iterdir()] == ["dpop.jwk"]


def test_proofs_carry_what_the_gateway_checks(tmp_path: Path) -> None:
    key = dpop_key(tmp_path, ClientSection())
    proof = jwt.parse(key.proof("get", "http://h:80/a/b?x=1#f", access_token="T", nonce="N"))
    claims = json.loads(proof.payload)
    assert proof.header.typ == "dpop+jwt" and proof.header.jwk == key.jwk
    assert claims["htm"] == "GET" and normalize_htu(claims["htu"]) == "http://h/a/b"
    assert claims["ath"] == jwt.b64url(hashlib.sha256(b"T").digest())
    assert claims["nonce"] == "N" and len(claims["jti"]) >= 16
    other = jwt.parse(key.proof("GET", "http://h/a"))
    assert json.loads(other.payload)["jti"] != claims["jti"]


def test_no_credentials_is_refused_before_any_request(tmp_path: Path) -> None:
    key = dpop_key(tmp_path, ClientSection())
    with pytest.raises(ConfigError, match="never sent without a token") as e:
        token_source(key, token=None, token_flag="--token", scopes=(), client=ClientSection())
    assert key.jkt in str(e.value)
    url, cid, secret = (f"STREAMPROC_CLIENT_{n}" for n in ("TOKEN_URL", "ID", "SECRET"))
    with pytest.raises(ConfigError, match=secret):
        env = {url: "http://127.0.0.1:1/t", cid: "c"}
        token_source(
            key,
            token=None,
            token_flag="--token",
            scopes=(),
            client=client_of(Configuration(values=env)),
        )
    with pytest.raises(ConfigError, match="absolute http"):
        env = {url: "http://u:p@127.0.0.1/t", cid: "c", secret: "s"}
        token_source(
            key,
            token=None,
            token_flag="--token",
            scopes=(),
            client=client_of(Configuration(values=env)),
        )


def test_a_static_token_must_be_bound_to_this_clients_key(tmp_path: Path) -> None:
    key = dpop_key(tmp_path, ClientSection())
    with pytest.raises(TokenRefused, match="not DPoP-bound"):
        StaticToken(token(), key)
    with pytest.raises(TokenRefused, match=f"not to this client's key {key.jkt}"):
        StaticToken(token(cnf={"jkt": "someone-else"}), key)
    assert StaticToken(token(cnf={"jkt": key.jkt}), key).tenant == "acme"


async def test_a_static_token_through_the_nonce_challenge_on_a_dpop_only_gateway(
    dpop_gw: Harness, tmp_path: Path
) -> None:
    key = dpop_key(tmp_path / "data", ClientSection())
    tok = token(scopes="scheduler.read", cnf={"jkt": key.jkt})
    async with ApiClient(key, StaticToken(tok, key)) as api:
        first = await api.request("GET", dpop_gw.url + LIST, params={"limit": "5"})
        assert first.status == 200, first.body
        # The nonce is kept: the next call needs no challenge (one request, checked below).
        sent: list[str] = []
        original = api._send

        async def counting(*a: object) -> object:
            sent.append("x")
            return await original(*a)  # type: ignore[arg-type]

        api._send = counting  # type: ignore[method-assign]
        again = await api.request("GET", dpop_gw.url + LIST)
        assert again.status == 200 and len(sent) == 1
        # Another tenant's token is a different token source, never a silent fallback.
        with pytest.raises(TokenRefused, match="for tenant acme, not globex"):
            await api.request("GET", dpop_gw.url + LIST, tenant="globex")
    # A proof signed with another key than the token's is refused by the gateway.
    stranger = DpopKey.load_or_create(tmp_path / "other.jwk")
    async with ApiClient(stranger, StaticToken.__new__(StaticToken)) as api:
        api.tokens.value = tok  # type: ignore[attr-defined]  # bypass the client-side check
        api.tokens.tenant = None  # type: ignore[attr-defined]
        r = await api.request("GET", dpop_gw.url + LIST)
        assert r.status == 401 and "not the key the token is bound to" in r.detail()


async def test_client_credentials_get_a_bound_token_per_tenant(
    dpop_gw: Harness, tmp_path: Path
) -> None:
    key = dpop_key(tmp_path / "data", ClientSection())
    authority = Authority(
        ISSUER, ISSUER_KEY, "k1",
        {"notify": Client("s3cret", ("acme", "globex"))},
    )  # fmt: skip
    async with running(authority):
        source = ClientCredentials(
            authority.url, "notify", "s3cret", key, scopes=("scheduler.read",)
        )
        async with ApiClient(key, source) as api:
            for tenant in ("acme", "globex", "acme"):
                r = await api.request("GET", dpop_gw.url + LIST, tenant=tenant)
                assert r.status == 200, r.body
            # One nonce challenge, then one token per tenant (cached).
            tenants = [f.get("tenant") for f in authority.requests]
            assert tenants == ["acme", "acme", "globex"]
            assert {f["scope"] for f in authority.requests} == {"scheduler.read"}
            # A tenant the client may not have is the issuer's refusal, not a request.
            with pytest.raises(TokenRefused, match="tenant initech not allowed"):
                await api.request("GET", dpop_gw.url + LIST, tenant="initech")
            # A token the gateway calls invalid is fetched again once.
            source._cache["acme"] = (token(ttl=-100, cnf={"jkt": key.jkt}), 2**40)
            r = await api.request("GET", dpop_gw.url + LIST, tenant="acme")
            assert r.status == 200, r.body
        wrong = ClientCredentials(authority.url, "notify", "nope", key)
        async with ApiClient(key, wrong) as api:
            with pytest.raises(TokenRefused, match="invalid_client"):
                await api.request("GET", dpop_gw.url + LIST, tenant="acme")
        authority.bearer_only = True
        unbound = ClientCredentials(authority.url, "notify", "s3cret", key)
        async with ApiClient(key, unbound) as api:
            with pytest.raises(TokenRefused, match="not a DPoP-bound one"):
                await api.request("GET", dpop_gw.url + LIST, tenant="acme")
        authority.bearer_only, authority.fail = False, 1
        async with ApiClient(key, ClientCredentials(authority.url, "notify", "s3cret", key)) as api:
            with pytest.raises(TokenUnavailable):
                await api.request("GET", dpop_gw.url + LIST, tenant="acme")
    async with ApiClient(key, ClientCredentials(authority.url, "notify", "s3cret", key)) as api:
        with pytest.raises(TokenUnavailable, match="not reachable"):
            await api.request("GET", dpop_gw.url + LIST, tenant="acme")


async def test_an_unreachable_gateway_is_unreachable_not_a_crash(tmp_path: Path) -> None:
    key = dpop_key(tmp_path, ClientSection())
    async with ApiClient(key, StaticToken(token(cnf={"jkt": key.jkt}), key), timeout_s=5) as api:
        with pytest.raises(Unreachable, match="not reachable"):
            await api.request("GET", f"http://127.0.0.1:{free_port()}{LIST}")


async def api_cli(
    data: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPROC_")}
    return await asyncio.to_thread(
        subprocess.run, [*CLI, "api", "--data-dir", str(data), *args],
        capture_output=True, text=True, timeout=60, env={**run_env, **(env or {})},
    )  # fmt: skip


async def test_streamproc_api_is_curl_for_a_dpop_only_gateway(
    dpop_gw: Harness, tmp_path: Path
) -> None:
    data = tmp_path / "cli"
    refused = await api_cli(data, "GET", "/schedules", "--url", dpop_gw.url)
    assert refused.returncode == 2 and "never sent without a token" in refused.stderr
    key = dpop_key(data, ClientSection())
    tok = token(scopes="scheduler.admin", cnf={"jkt": key.jkt})
    body = json.dumps(
        {"id": "nightly", "name": "Nightly", "whenCron": "0 2 * * *", "timezone": "UTC"}
    )
    made = await api_cli(data, "POST", "/schedules?wait=true", "--url", dpop_gw.url,
                         "--data", body, env={"STREAMPROC_TOKEN": tok})  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["id"] == "nightly"
    listed = await api_cli(data, "GET", "/schedules", "--url", dpop_gw.url, "--token", tok)
    assert listed.returncode == 0, listed.stderr
    assert [s["id"] for s in json.loads(listed.stdout)["items"]] == ["nightly"]
    missing = await api_cli(data, "GET", "schedules/nope", "--url", dpop_gw.url, "--token", tok)
    assert missing.returncode == 1 and "404" in missing.stderr and "detail" in missing.stdout
    # A large answer into a pipe its reader drains late arrives whole (stdout may be a raw,
    # unbuffered file whose one write takes only part of it).
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPROC_")}
    proc = await asyncio.create_subprocess_exec(
        *CLI, "api", "--data-dir", str(data), "GET", "/openapi.json", "--url", dpop_gw.url,
        "--token", tok, stdout=asyncio.subprocess.PIPE, env={**env, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert proc.stdout is not None
    first = await proc.stdout.read(1)  # the answer has begun: the rest waits in a full pipe
    await asyncio.sleep(0.5)
    rest = await proc.stdout.read()
    assert await proc.wait() == 0
    assert json.loads(first + rest)["openapi"] == "3.1.0" and len(first + rest) > 65536


def test_api_writes_a_large_answer_whole_through_partial_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An unbuffered stdout is a raw file: one write may take part of the data (a pipe), or
    none (a non-blocking one that is full). Everything still goes out, in order."""
    read_end, write_end = os.pipe()

    class Raw:
        def __init__(self) -> None:
            self.got = bytearray()
            self.calls = 0

        def write(self, data: memoryview) -> int | None:
            self.calls += 1
            if self.calls == 2:
                return None  # full for now
            part = bytes(data[:1000])
            self.got += part
            return len(part)

        def flush(self) -> None: ...

        def fileno(self) -> int:
            return write_end  # writable: select answers at once

    class Out:
        buffer = Raw()

        def flush(self) -> None: ...

    out = Out()
    monkeypatch.setattr(sys, "stdout", out)
    data = bytes(range(256)) * 300
    try:
        api_cli_module._write_all(data)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert bytes(out.buffer.got) == data and out.buffer.calls > 70


async def test_streamproc_api_delivers_a_signed_webhook_to_a_dpop_only_gateway(
    dpop_gw: Harness, tmp_path: Path
) -> None:
    """docs/roles.md's delivery: the body's bytes go as given (the signature covers them),
    the nonce challenge does not use up the delivery id, and the same delivery again is 409."""
    data = tmp_path / "cli"
    tok = token(scopes="scheduler.admin", cnf={"jkt": dpop_key(data, ClientSection()).jkt})
    body = b'{"exportId": "try-1",  "changedProductKeys": ["pkg:pypi/setuptools"]}'
    headers = signed_headers(body, delivery="try-1", tenant=None)
    args = ["POST", "/events/feedser-export", "--url", dpop_gw.url, "--token", tok,
            "--data", body.decode()]  # fmt: skip
    for name in ("X-Scheduler-Timestamp", "X-Scheduler-Delivery", "X-Scheduler-Signature"):
        args += ["-H", f"{name}: {headers[name]}"]
    sent = await api_cli(data, *args)
    assert sent.returncode == 0, sent.stderr
    answer = json.loads(sent.stdout)
    assert answer["exportId"] == "try-1" and answer["events"][0]["outcome"] == "recorded"
    again = await api_cli(data, *args)
    assert again.returncode == 1 and "409" in again.stderr
    assert json.loads(again.stdout)["type"].endswith(":replayed-delivery")
