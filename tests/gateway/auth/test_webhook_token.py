"""Webhooks take an Authority token besides their signature (or certificate), checked as
any API call's token is: issuer, audience, DPoP binding and proof replay; the export is
recorded for the tenants both the token and the source admit; a source may be configured
to take none, and the gateway says so at start."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest
from nacl.signing import SigningKey

from streamproc import roles
from streamproc.natsd.server import EmbeddedNats
from tests.gateway.conftest import drop_streams
from tests.gateway.harness import (
    BASE,
    Harness,
    default_settings,
    dpop_jkt,
    dpop_proof,
    signed_headers,
    start,
    stop,
    token,
)

FEEDSER = f"{BASE}/events/feedser-export"
VEXER = f"{BASE}/events/vexer-export"
WEBHOOK = "scheduler.webhook"


def export(export_id: str | None = None) -> bytes:
    return msgspec.json.encode(
        {"exportId": export_id or uuid.uuid4().hex, "changedProductKeys": ["pkg:rpm/openssl"]}
    )


async def deliver(gw: Harness, body: bytes, auth: dict[str, str], path: str = FEEDSER):
    headers = {**signed_headers(body, tenant=None), **auth}
    return await gw.call("POST", path, data=body, headers=headers)


def bearer(tok: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {tok}"}


@pytest.fixture
async def dpop_only(
    tmp_path: Path, nats_server: EmbeddedNats, prefix: str
) -> AsyncIterator[Harness]:
    """A gateway with the production default: tokens must be DPoP- or mTLS-bound."""
    h = await start(
        tmp_path, nats_server.url, prefix, default_settings(tmp_path, required_modes=["dpop"])
    )
    try:
        yield h
    finally:
        await stop(h)
        roles.ROLES.pop("gateway-test", None)
        await drop_streams(nats_server.url, prefix)


async def test_a_webhook_without_a_valid_token_is_401_and_records_nothing(gw: Harness) -> None:
    seq = await gw.last_seq()
    status, problem, headers = await deliver(gw, export(), {})
    assert status == 401 and problem["detail"] == "an access token is required", problem
    assert 'Bearer realm="scheduler"' in headers.getall("WWW-Authenticate")
    cases = [
        (token(scopes=WEBHOOK, aud="someone-else"), "token audience is not scheduler"),
        (token(scopes=WEBHOOK, iss="https://impostor.test"), "issuer does not match"),
        (token(scopes=WEBHOOK, key=SigningKey(b"\x09" * 32)), "signature does not verify"),
        (token(scopes=WEBHOOK, ttl=-120), "token expired"),
    ]
    for tok, words in cases:
        status, problem, _ = await deliver(gw, export(), bearer(tok))
        assert status == 401 and words in problem["detail"], (words, problem)
    assert await gw.last_seq() == seq, "nothing recorded"


async def test_the_token_decides_the_tenant_within_the_sources_allowlist(gw: Harness) -> None:
    """feedser-main lists acme and globex: a token for acme records for acme only, one for
    globex for globex only, and one for a tenant the source does not list is 403."""
    seq = await gw.last_seq()
    body = export("tenanted-1")
    status, res, _ = await deliver(gw, body, bearer(token("acme", WEBHOOK)))
    assert status == 202, res
    assert [(e["tenant"], e["outcome"]) for e in res["events"]] == [("acme", "recorded")]
    assert await gw.last_seq() == seq + 1
    status, res, _ = await deliver(gw, body, bearer(token("globex", WEBHOOK)))
    assert status == 202 and [e["tenant"] for e in res["events"]] == ["globex"], res
    status, problem, _ = await deliver(gw, body, bearer(token("initech", WEBHOOK)))
    assert status == 403 and problem["type"].endswith(":tenant-not-allowed"), problem
    assert "initech" in problem["detail"] and problem["reason"] == "tenant_not_allowed"
    # vexer-main lists acme only.
    vex = msgspec.json.encode({"exportId": "v-1"})
    status, problem, _ = await gw.call(
        "POST",
        VEXER,
        data=vex,
        headers={**signed_headers(vex, scheme="ed25519", ed_key=VEXER_KEY, tenant="globex")},
    )
    assert status == 403 and problem["type"].endswith(":tenant-not-allowed"), problem
    assert await gw.last_seq() == seq + 2, "only the admitted tenants' exports"


async def test_a_webhook_token_needs_the_webhook_scope(gw: Harness) -> None:
    seq = await gw.last_seq()
    status, problem, headers = await deliver(gw, export(), bearer(token("acme", "scheduler.read")))
    assert status == 403 and problem["reason"] == "insufficient_scope", problem
    assert 'scope="scheduler.webhook"' in headers["WWW-Authenticate"]
    for scopes in (WEBHOOK, "scheduler.admin"):  # admin implies it
        status, res, _ = await deliver(gw, export(), bearer(token("acme", scopes)))
        assert status == 202, res
    assert await gw.last_seq() == seq + 2


async def test_dpop_bound_webhook_tokens_nonce_and_replay(dpop_only: Harness) -> None:
    gw = dpop_only
    url = gw.url + FEEDSER
    seq = await gw.last_seq()
    # An unbound bearer token is refused where the gateway requires DPoP.
    status, problem, _ = await deliver(gw, export(), bearer(token("acme", WEBHOOK)))
    assert status == 401 and "sender-constrained" in problem["detail"], problem
    bound = token("acme", WEBHOOK, cnf={"jkt": dpop_jkt()})
    # The first proof has no nonce: 401 use_dpop_nonce; the same delivery id then succeeds.
    body = export("dpop-1")
    delivery = signed_headers(body, tenant=None)
    auth = {"Authorization": f"DPoP {bound}", "DPoP": dpop_proof("POST", url, bound)}
    status, problem, headers = await gw.call(
        "POST", FEEDSER, data=body, headers={**delivery, **auth}
    )
    assert status == 401 and problem["reason"] == "use_dpop_nonce", problem
    nonce = headers["DPoP-Nonce"]
    proof = dpop_proof("POST", url, bound, nonce=nonce)
    auth = {"Authorization": f"DPoP {bound}", "DPoP": proof}
    status, res, headers = await gw.call("POST", FEEDSER, data=body, headers={**delivery, **auth})
    assert status == 202 and [e["tenant"] for e in res["events"]] == ["acme"], res
    assert headers["DPoP-Nonce"], "a fresh nonce for the sender's next delivery"
    # The same proof again, on a new delivery of a new export: the replay is refused.
    again = export("dpop-2")
    status, problem, _ = await gw.call(
        "POST", FEEDSER, data=again, headers={**signed_headers(again, tenant=None), **auth}
    )
    assert status == 401 and problem["detail"] == "proof jti was already used", problem
    # A proof signed with another key than the token is bound to.
    other = dpop_proof("POST", url, bound, nonce=nonce, key=SigningKey(b"\x08" * 32))
    status, problem, _ = await gw.call(
        "POST",
        FEEDSER,
        data=again,
        headers={**signed_headers(again, tenant=None), "Authorization": f"DPoP {bound}",
                 "DPoP": other},
    )  # fmt: skip
    assert status == 401 and "not the key the token is bound to" in problem["detail"], problem
    assert await gw.last_seq() == seq + 1


async def test_a_source_may_take_no_token_and_the_gateway_warns_at_start(
    tmp_path: Path, nats_server: EmbeddedNats, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = default_settings(tmp_path)
    open_source = msgspec.structs.replace(settings.webhooks[0], require_token=False)
    settings = msgspec.structs.replace(settings, webhooks=[open_source, settings.webhooks[1]])
    with caplog.at_level(logging.WARNING, logger="streamproc.gateway.webhooks"):
        h = await start(tmp_path, nats_server.url, prefix, settings)
    try:
        warned = [r.getMessage() for r in caplog.records if "takes no access token" in r.message]
        assert len(warned) == 1 and "feedser-main" in warned[0], caplog.records
        assert "acme, globex" in warned[0]
        seq = await h.last_seq()
        body = export("open-1")
        status, res, _ = await deliver(h, body, {})
        assert status == 202, res
        assert [e["tenant"] for e in res["events"]] == ["acme", "globex"]
        assert await h.last_seq() == seq + 2
        # The other source still takes one.
        vex = msgspec.json.encode({"exportId": "v-open"})
        headers = signed_headers(vex, scheme="ed25519", ed_key=VEXER_KEY, tenant=None)
        status, problem, _ = await h.call("POST", VEXER, data=vex, headers=headers)
        assert status == 401 and problem["detail"] == "an access token is required"
    finally:
        await stop(h)
        roles.ROLES.pop("gateway-test", None)
        await drop_streams(nats_server.url, prefix)


VEXER_KEY = SigningKey(b"\x04" * 32)
"""One of the harness's vexer-main keys."""
