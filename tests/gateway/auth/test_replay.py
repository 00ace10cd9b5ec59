"""Replay protection shared by gateway replicas: two gateways (two Systems, own data
directories and read models) on one NATS server, behind one public origin as behind a load
balancer. A webhook delivery or a DPoP proof replayed to the other replica is refused exactly
as on the first; a refused delivery may be retried on either; one client cannot take more
than its share; a proof signed with the wrong key leaves nothing behind."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest
from nacl.signing import SigningKey

from streamproc.bus import jsapi
from streamproc.bus.ttlkv import stream_name
from streamproc.gateway.auth.replay import ClientShare, bucket_name
from streamproc.natsd.server import EmbeddedNats
from streamproc.problems import ProblemError
from tests.gateway.auth.test_webhooks import FEEDSER, VEXER, export, post
from tests.gateway.conftest import drop_streams
from tests.gateway.harness import (
    BASE,
    DPOP_KEY,
    VEXER_KEYS,
    Harness,
    default_settings,
    dpop_jkt,
    dpop_proof,
    start,
    stop,
    token,
)

ORIGIN = "https://scheduler.test"
RUN = f"{BASE}/run"


def test_client_share_counts_live_ids_per_client() -> None:
    now = [1000.0]
    share = ClientShare(3, clock=lambda: now[0])
    for expires in (1010.0, 1005.0, 1020.0):
        share.take("a", expires)
    with pytest.raises(ProblemError) as full:
        share.take("a", 1030.0)
    assert full.value.status == 429 and dict(full.value.headers)["Retry-After"] == "5"
    share.take("b", 1030.0)  # another client is not affected
    now[0] = 1006.0  # a's id expiring at 1005 is gone: room again
    share.take("a", 1030.0)
    share.give_back("a", 1030.0)
    assert share.live("a") == 2
    now[0] = 1100.0
    share.take("c", 1200.0)  # sweeps clients whose ids all expired
    assert share.live("a") == share.live("b") == 0 and share.live("c") == 1


@pytest.fixture
async def pair(
    tmp_path: Path, nats_server: EmbeddedNats, prefix: str
) -> AsyncIterator[tuple[Harness, Harness]]:
    over = {
        "public_base_url": ORIGIN,
        "dpop": {"nonce_secret": "shared-nonce-secret"},
        "replay_per_client": 10,
    }
    one = await start(tmp_path / "g1", nats_server.url, prefix,
                      default_settings(_dir(tmp_path / "g1"), **over), node_id="gw1")  # fmt: skip
    two = await start(tmp_path / "g2", nats_server.url, prefix,
                      default_settings(_dir(tmp_path / "g2"), **over), node_id="gw2")  # fmt: skip
    try:
        yield one, two
    finally:
        await stop(one)
        await stop(two)
        await drop_streams(nats_server.url, prefix)


def _dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


async def test_a_webhook_delivery_replayed_to_the_other_replica_is_refused(
    pair: tuple[Harness, Harness],
) -> None:
    one, two = pair
    body = export("exp-1")
    status, _, _ = await post(one, FEEDSER, body, delivery="d-1")
    assert status == 202
    seq = await one.last_seq()
    for gw in (two, one):  # the same delivery, to either replica: 409, nothing published
        status, problem, _ = await post(gw, FEEDSER, body, delivery="d-1")
        assert status == 409 and problem["type"].endswith("replayed-delivery"), problem
    # The sender's legitimate retry of an export (a new delivery id) is a duplicate anywhere.
    status, doc, _ = await post(two, FEEDSER, body, delivery="d-2")
    assert status == 200 and doc["duplicate"] is True
    assert await one.last_seq() == seq
    # A refused delivery (400) is never claimed: the retry may go to the other replica.
    status, _, _ = await post(one, FEEDSER, b'{"exportId": 5}', delivery="d-3")
    assert status == 400
    status, _, _ = await post(two, FEEDSER, export("exp-3"), delivery="d-3")
    assert status == 202


async def test_one_source_cannot_take_more_than_its_share(pair: tuple[Harness, Harness]) -> None:
    one, two = pair
    for i in range(10):
        status, _, _ = await post(one, FEEDSER, export(f"q-{i}"))
        assert status == 202
    status, problem, headers = await post(one, FEEDSER, export("q-10"))
    assert status == 429 and problem["type"].endswith("client-quota"), problem
    assert int(headers["Retry-After"]) > 0
    status, _, _ = await post(two, FEEDSER, export("q-10"))  # counted per replica
    assert status == 202
    claim = {"productKey": "pkg:deb/debian/openssl", "vulnId": "CVE-2025-2",
             "status": "not_affected→affected"}  # fmt: skip
    vexer = msgspec.json.encode({"exportId": "v-1", "changedClaims": [claim]})
    status, _, _ = await post(one, VEXER, vexer, scheme="ed25519", ed_key=VEXER_KEYS[0])
    assert status == 202, "another source is not affected"


async def test_a_dpop_proof_replayed_to_the_other_replica_is_refused(
    pair: tuple[Harness, Harness],
) -> None:
    one, two = pair
    tok = token(cnf={"jkt": dpop_jkt()})
    auth = {"Authorization": f"DPoP {tok}"}
    status, _, h = await one.call("POST", RUN, headers=auth, json={})
    assert status == 401
    nonce = h["DPoP-Nonce"]  # stateless: valid on both replicas (shared nonce secret)
    proof = dpop_proof("POST", ORIGIN + RUN, tok, nonce=nonce)
    status, accepted, _ = await one.call("POST", RUN, headers={**auth, "DPoP": proof}, json={})
    assert status == 202, accepted
    seq = await one.last_seq()
    for gw in (two, one):
        status, body, _ = await gw.call("POST", RUN, headers={**auth, "DPoP": proof}, json={})
        assert status == 401 and body["reason"] == "invalid_dpop_proof", body
        assert "already used" in body["detail"]
    assert await two.last_seq() == seq, "the replayed POST /run created no second run"


async def test_a_proof_with_the_wrong_key_leaves_nothing_behind(
    pair: tuple[Harness, Harness],
) -> None:
    one, two = pair
    tok = token(scopes="scheduler.read", cnf={"jkt": dpop_jkt()})
    auth = {"Authorization": f"DPoP {tok}"}
    _, _, h = await one.call("GET", f"{BASE}/schedules", headers=auth)
    nonce = h["DPoP-Nonce"]
    stranger = SigningKey(b"\x09" * 32)
    forged = dpop_proof("GET", ORIGIN + f"{BASE}/schedules", tok, nonce=nonce, key=stranger,
                        jti="same-jti")  # fmt: skip
    status, body, _ = await one.call("GET", f"{BASE}/schedules", headers={**auth, "DPoP": forged})
    assert status == 401 and "not the key the token is bound to" in body["detail"]
    good = dpop_proof("GET", ORIGIN + f"{BASE}/schedules", tok, nonce=nonce, jti="same-jti")
    status, body, _ = await two.call("GET", f"{BASE}/schedules", headers={**auth, "DPoP": good})
    assert status == 200, body


async def test_a_thousand_wrong_key_proofs_with_one_bound_token_touch_no_one_else(
    tmp_path: Path, nats_server: EmbeddedNats, prefix: str
) -> None:
    """The attack of a stolen DPoP-bound token: proofs signed with keys of the thief's
    choosing, each with a fresh jti. None of them may be remembered, so the bucket (here at
    its smallest, 1,000 ids) stays empty and every other client works as before."""
    over = {"replay_cache_size": 1000, "replay_per_client": 10, "dpop": {"require_nonce": False}}
    gw = await start(tmp_path, nats_server.url, prefix, default_settings(tmp_path, **over))
    url = gw.url + f"{BASE}/schedules"
    try:
        stolen = token("acme", scopes="scheduler.read", cnf={"jkt": dpop_jkt()})

        async def forged(i: int) -> tuple[int, str]:
            proof = dpop_proof("GET", url, stolen, key=SigningKey(i.to_bytes(32, "big")))
            status, body, _ = await gw.call(
                "GET",
                f"{BASE}/schedules",
                headers={"Authorization": f"DPoP {stolen}", "DPoP": proof},
            )
            return status, body["detail"]

        for start_at in range(1000, 2000, 50):
            answers = await asyncio.gather(*(forged(i) for i in range(start_at, start_at + 50)))
            assert set(answers) == {
                (401, "the DPoP proof key is not the key the token is bound to")
            }
        assert gw.system.nc is not None
        info = await jsapi.stream_info(gw.system.nc, stream_name(bucket_name(prefix)))
        assert info is not None and info.state.messages == 0, "nothing was remembered"
        # Every other DPoP client, of this tenant or another, as before; the key's owner too.
        for tenant, key in (("globex", SigningKey(b"\x0a" * 32)), ("acme", DPOP_KEY)):
            tok = token(tenant, scopes="scheduler.read", cnf={"jkt": dpop_jkt(key)})
            for _ in range(3):
                proof = dpop_proof("GET", url, tok, key=key)
                status, body, _ = await gw.call(
                    "GET",
                    f"{BASE}/schedules",
                    headers={"Authorization": f"DPoP {tok}", "DPoP": proof},
                )
                assert status == 200, (tenant, body)
    finally:
        await stop(gw)
        await drop_streams(nats_server.url, prefix)
