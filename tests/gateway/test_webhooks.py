"""Signed export webhooks: HMAC and Ed25519 (with rotation), the time window, replayed
deliveries, per-tenant recording with de-duplication, and input hardening."""

from __future__ import annotations

import gzip
import time
import uuid
from pathlib import Path

import msgspec
import pytest
import zstandard
from nacl.signing import SigningKey

from streamproc.bus.server import EmbeddedNats
from streamproc.events.envelope import decode
from streamproc.gateway import accesslog
from tests.gateway.conftest import drop_streams
from tests.gateway.harness import (
    BASE,
    HMAC_SECRET,
    VEXER_KEYS,
    Harness,
    default_settings,
    signed_headers,
    start,
    stop,
    token,
)

FEEDSER = f"{BASE}/events/feedser-export"
VEXER = f"{BASE}/events/vexer-export"


def export(export_id: str | None = None, **kw: object) -> bytes:
    doc = {
        "exportId": export_id or uuid.uuid4().hex,
        "changedProductKeys": ["pkg:rpm/openssl", "pkg:deb/debian/zlib"],
        "kev": ["CVE-2025-1"],
        "window": {"from": "2025-10-01T00:00:00Z", "to": "2025-10-02T00:00:00Z"},
    }
    doc.update(kw)
    return msgspec.json.encode(doc)


async def post(gw: Harness, path: str, body: bytes, **sign: object) -> tuple[int, dict, object]:
    extra = sign.pop("headers", {})
    headers = {**signed_headers(body, **sign), **extra}  # type: ignore[arg-type]
    return await gw.call("POST", path, data=body, headers=headers)


async def stored(gw: Harness, first: int, last: int) -> list:
    assert gw.system.nc is not None
    js = gw.system.nc.jetstream()
    out = []
    for seq in range(first, last + 1):
        m = await js.get_msg(gw.system.settings.events_stream, seq)
        out.append((m.subject, decode(m.data)))
    return out


async def test_feedser_export_is_recorded_once_per_allowed_tenant(gw: Harness) -> None:
    seq = await gw.last_seq()
    body = export("exp-1")
    status, res, _ = await post(gw, FEEDSER, body)
    assert status == 202, res
    assert res["source"] == "feedser-main" and res["duplicate"] is False
    assert sorted(e["tenant"] for e in res["events"]) == ["acme", "globex"]
    assert await gw.last_seq() == seq + 2
    events = await stored(gw, seq + 1, seq + 2)
    for subject, ev in events:
        assert ev.kind == "export.feedser" and ev.payload.export_id == "exp-1"
        assert subject.endswith(f".events.{ev.tenant}.feedser.exp-1")
    assert len({ev.id for _, ev in events}) == 2
    # A second delivery of the same export (new delivery id), before and after the read
    # model has it: one event per tenant, no more.
    status, res, _ = await post(gw, FEEDSER, body)
    assert status == 200 and res["duplicate"] is True
    assert await gw.last_seq() == seq + 2
    await gw.system.contexts["gateway-test"].wait_for(seq + 2, 5)
    status, res, _ = await post(gw, FEEDSER, body)
    assert status == 200 and res["duplicate"] is True
    assert {e["seq"] for e in res["events"]} == {seq + 1, seq + 2}
    # Same exportId with a different body is a conflict, not a silent duplicate.
    status, problem, _ = await post(gw, FEEDSER, export("exp-1", kev=[]))
    assert status == 409 and problem["type"].endswith("export-conflict")
    assert await gw.last_seq() == seq + 2


async def test_signature_time_window_and_replay_refusals_publish_nothing(gw: Harness) -> None:
    body = export()
    delivery = "d-1"
    status, _, _ = await post(gw, FEEDSER, body, delivery=delivery)
    assert status == 202
    seq = await gw.last_seq()
    now = int(time.time())
    cases = [
        ({"delivery": delivery}, 409, "replayed-delivery"),
        ({"secret": "wrong"}, 401, "bad-signature"),
        ({"ts": now - 301}, 401, "stale-delivery"),
        ({"ts": now + 301}, 401, "stale-delivery"),
        ({"headers": {"X-Scheduler-Signature": "sha256=zz"}}, 401, "bad-signature"),
        ({"headers": {"X-Scheduler-Signature": ""}}, 401, "bad-signature"),
        ({"headers": {"X-Scheduler-Timestamp": "soon"}}, 401, "bad-signature"),
        ({"headers": {"X-Scheduler-Delivery": "has space"}}, 401, "bad-signature"),
        ({"headers": {"X-Scheduler-Source": "nobody"}}, 401, "unknown-source"),
        ({"headers": {"Content-Type": "text/plain"}}, 415, "unsupported-media-type"),
    ]
    for sign, status_wanted, slug in cases:
        status, problem, _ = await post(gw, FEEDSER, export(), **sign)
        assert status == status_wanted, (sign, problem)
        assert problem["type"].endswith(slug), (sign, problem)
    # A signature over other bytes than those sent (e.g. re-serialised JSON) fails.
    headers = signed_headers(body)
    status, _, _ = await gw.call("POST", FEEDSER, data=body + b" ", headers=headers)
    assert status == 401
    # The vexer source is Ed25519-only: an HMAC signature is not accepted there.
    status, _, _ = await post(gw, VEXER, msgspec.json.encode({"exportId": "v"}))
    assert status == 401
    assert await gw.last_seq() == seq


async def test_a_refused_delivery_id_can_be_retried(gw: Harness) -> None:
    status, _, _ = await post(gw, FEEDSER, b'{"exportId": 5}', delivery="retry-1")
    assert status == 400
    status, _, _ = await post(gw, FEEDSER, export(), delivery="retry-1")
    assert status == 202


async def test_vexer_ed25519_with_key_rotation_and_one_tenant(gw: Harness) -> None:
    seq = await gw.last_seq()
    claims = [
        {
            "productKey": "pkg:deb/debian/openssl",
            "vulnId": "CVE-2025-2",
            "status": "not_affected→affected",
        }
    ]
    for n, key in enumerate(VEXER_KEYS):
        body = msgspec.json.encode({"exportId": f"vx-{n}", "changedClaims": claims})
        status, res, _ = await post(gw, VEXER, body, scheme="ed25519", ed_key=key)
        assert status == 202, res
        assert [e["tenant"] for e in res["events"]] == ["acme"]
    body = msgspec.json.encode({"exportId": "vx-9", "changedClaims": claims})
    status, _, _ = await post(gw, VEXER, body, scheme="ed25519", ed_key=SigningKey(b"\x07" * 32))
    assert status == 401
    bad = msgspec.json.encode({"exportId": "vx-8", "changedClaims": [{**claims[0], "status": "x"}]})
    status, problem, _ = await post(gw, VEXER, bad, scheme="ed25519", ed_key=VEXER_KEYS[0])
    assert status == 400 and problem["field"] == "$.changedClaims[0].status", problem
    assert await gw.last_seq() == seq + 2


async def test_compressed_bodies_and_bombs(gw: Harness) -> None:
    seq = await gw.last_seq()
    body = gzip.compress(export())
    status, res, _ = await post(gw, FEEDSER, body, headers={"Content-Encoding": "gzip"})
    assert status == 202, res
    body = zstandard.ZstdCompressor().compress(export())
    status, res, _ = await post(gw, FEEDSER, body, headers={"Content-Encoding": "zstd"})
    assert status == 202, res
    assert await gw.last_seq() == seq + 4
    cap = gw.gateway.inflated_cap
    bomb = b'{"exportId":"bomb","kev":["' + b"A" * (cap + 10) + b'"]}'
    for enc, data in [
        ("gzip", gzip.compress(bomb, 9)),
        ("zstd", zstandard.ZstdCompressor(level=19).compress(bomb)),
    ]:
        assert len(data) < cap // 100
        status, problem, _ = await post(gw, FEEDSER, data, headers={"Content-Encoding": enc})
        assert status == 413 and "decompressed" in problem["detail"], problem
    for enc, data, code in [
        ("gzip", b"not gzip", 400),
        ("zstd", b"not zstd", 400),
        ("br", b"x", 415),
        ("gzip", gzip.compress(export())[:-4], 400),
    ]:
        status, problem, _ = await post(gw, FEEDSER, data, headers={"Content-Encoding": enc})
        assert status == code, (enc, problem)
    assert await gw.last_seq() == seq + 4


async def test_key_limits_and_malformed_bodies(gw: Harness) -> None:
    seq = await gw.last_seq()
    keys = [f"pkg:npm/p{i}" for i in range(100_001)]
    status, problem, _ = await post(gw, FEEDSER, export(changedProductKeys=keys))
    assert status == 413 and problem["count"] == 100_002 and problem["limit"] == 100_000
    split = export(changedProductKeys=keys[:60_000], kev=keys[60_000:])
    status, problem, _ = await post(gw, FEEDSER, split)
    assert status == 413 and problem["count"] == 100_001, "changed keys + kev together"
    for body, field in [
        (b'{"exportId": 1}', "$.exportId"),
        (export(extra=True), "$.extra"),
        (export(window={"from": "a", "until": "b"}), "$.window.until"),
        (b"[1, 2]", "$"),
        (b'{"exportId": "x"', "$"),
        (b"", "$"),
    ]:
        status, problem, _ = await post(gw, FEEDSER, body)
        assert status == 400 and problem["field"] == field, (body[:40], problem)
    assert await gw.last_seq() == seq


@pytest.mark.parametrize("declared", [True, False])
async def test_body_cap(
    tmp_path: Path, nats_server: EmbeddedNats, prefix: str, declared: bool
) -> None:
    h = await start(tmp_path, nats_server.url, prefix, default_settings(tmp_path, max_body=4096))
    try:
        big = export(changedProductKeys=[f"pkg:npm/p{i}" for i in range(1000)])
        headers = signed_headers(big)

        async def chunks():  # type: ignore[no-untyped-def]
            for i in range(0, len(big), 1000):
                yield big[i : i + 1000]

        async with h.session.post(
            h.url + FEEDSER, data=big if declared else chunks(), headers=headers
        ) as r:
            problem = await r.json(content_type=None)
            assert r.status == 413 and problem["limit"] == 4096
        assert await h.last_seq() == 0
        status, _, _ = await h.call("GET", f"{BASE}/schedules", tok=token())
        assert status == 200
    finally:
        await stop(h)
        await drop_streams(nats_server.url, prefix)


async def test_access_log_is_json_without_secrets(gw: Harness) -> None:
    tok = token()
    await gw.call("GET", f"{BASE}/schedules?cursor=secretcursor", tok=tok)
    body = export()
    headers = signed_headers(body)
    await gw.call("POST", FEEDSER, data=body, headers=headers)
    accesslog.flush()
    lines = (Path(gw.gateway.s.access_log)).read_text().splitlines()
    records = [msgspec.json.decode(line) for line in lines]
    assert {r["route"] for r in records} >= {f"{BASE}/schedules", FEEDSER}
    hook = next(r for r in records if r["route"] == FEEDSER)
    assert hook["source"] == "feedser-main" and hook["status"] == 202 and hook["latencyMs"] > 0
    listed = next(r for r in records if r["route"] == f"{BASE}/schedules")
    assert listed["tenant"] == "acme" and listed["requestId"]
    text = "\n".join(lines)
    for secret in (
        tok,
        tok.split(".")[2],
        headers["X-Scheduler-Signature"][7:],
        HMAC_SECRET,
        "secretcursor",
    ):
        assert secret not in text
