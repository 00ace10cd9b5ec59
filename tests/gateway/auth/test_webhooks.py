"""Signed export webhooks: HMAC and Ed25519 (with rotation), the time window, replayed
deliveries, per-tenant recording with de-duplication, exports scoped by source, no hashing
for a caller without credentials, and input hardening."""

from __future__ import annotations

import asyncio
import gzip
import hmac
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import msgspec
import pytest
import zstandard
from nacl.signing import SigningKey, VerifyKey

from streamproc.events import payloads as p
from streamproc.events.envelope import decode, encode, new_event
from streamproc.gateway import accesslog
from streamproc.gateway.auth import webhooks
from streamproc.ids import derive_id, shard_token
from streamproc.names import EXPORT_SHARDS
from streamproc.natsd.server import EmbeddedNats
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


def shard(ref: str) -> str:
    """The subject token of an export's shard: exports share a few subjects per tenant."""
    return shard_token(ref, EXPORT_SHARDS)


async def stored(gw: Harness, first: int, last: int) -> list:
    assert gw.system.nc is not None
    js = gw.system.nc.jetstream()
    out = []
    for seq in range(first, last + 1):
        m = await js.get_msg(gw.system.settings.events_stream, seq)
        out.append((m.subject, decode(m.data)))
    return out


async def test_feedser_export_is_recorded_once_per_allowed_tenant(gw_tokenless: Harness) -> None:
    """A source that takes no token records each export for every tenant it lists."""
    gw = gw_tokenless
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
        assert ev.payload.source == "feedser-main" and ev.schema == 3
        assert ev.payload.revision == 1
        assert subject.endswith(f".events.{ev.tenant}.feedser.{shard('feedser-main:exp-1')}")
    assert len({ev.id for _, ev in events}) == 2
    assert {e["outcome"] for e in res["events"]} == {"recorded"}
    # A second delivery of the same export (new delivery id), before and after the read
    # model has it: one event per tenant, no more.
    status, res, _ = await post(gw, FEEDSER, body)
    assert status == 200 and res["duplicate"] is True
    assert await gw.last_seq() == seq + 2
    await gw.system.contexts["gateway-test"].wait_for(seq + 2, 5)
    status, res, _ = await post(gw, FEEDSER, body)
    assert status == 200 and res["duplicate"] is True
    assert {e["seq"] for e in res["events"]} == {seq + 1, seq + 2}
    assert {e["outcome"] for e in res["events"]} == {"duplicate"}
    assert res["revision"] == 1 and {e["revision"] for e in res["events"]} == {1}
    # Same exportId with a different body is its next revision, for every tenant.
    status, res, _ = await post(gw, FEEDSER, export("exp-1", kev=[]))
    assert status == 202 and res["revision"] == 2, res
    assert [(e["outcome"], e["revision"]) for e in res["events"]] == [("recorded", 2)] * 2
    assert await gw.last_seq() == seq + 4
    for subject, ev in await stored(gw, seq + 3, seq + 4):
        assert subject.endswith(f".events.{ev.tenant}.feedser.{shard('feedser-main:exp-1')}")
        assert ev.payload.revision == 2 and ev.payload.kev == []
        assert ev.id == derive_id("feedser-main", "exp-1", ev.tenant, "revision", 2)


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
    assert await gw.last_seq() == seq + 2
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
    assert await gw.last_seq() == seq + 2


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


# ------------------------------------------------------------------ M1: no unauthenticated CPU


class Hashing:
    """Every HMAC and Ed25519 verification the process makes, with the bytes and thread."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, str]] = []

    def big(self) -> list[tuple[str, int, str]]:
        return [c for c in self.calls if c[1] > 100_000]

    def bodies(self) -> list[tuple[str, int, str]]:
        """Verifications of more than an access token's bytes (each delivery's token is
        checked like any API call's: one small Ed25519 verification, cached per token)."""
        return [c for c in self.calls if c[1] > 1024]


@pytest.fixture
def hashing(monkeypatch: pytest.MonkeyPatch) -> Iterator[Hashing]:
    seen = Hashing()
    digest, verify = hmac.digest, VerifyKey.verify

    def counted_digest(key: bytes, msg: bytes, name: str) -> bytes:
        seen.calls.append(("hmac", len(msg), threading.current_thread().name))
        return digest(key, msg, name)

    def counted_verify(self: VerifyKey, smessage: bytes, signature: bytes | None = None) -> bytes:
        seen.calls.append(("ed25519", len(smessage), threading.current_thread().name))
        return verify(self, smessage, signature)

    monkeypatch.setattr(hmac, "digest", counted_digest)
    monkeypatch.setattr(VerifyKey, "verify", counted_verify)
    yield seen


def big_export(export_id: str) -> bytes:
    """About 2 MiB of valid export: what an attacker makes the gateway hash."""
    return export(export_id, changedProductKeys=[f"pkg:npm/{'p' * 40}{i}" for i in range(40_000)])


async def test_nothing_is_hashed_before_the_headers_check_out(
    gw: Harness, hashing: Hashing
) -> None:
    """The attack: fresh-looking deliveries with a large body and many signature values made
    the gateway hash the body once per value and key before looking at the timestamp. Now
    every delivery that the headers alone condemn is refused without hashing anything, and
    one that must be hashed is hashed once per secret or key, on a worker thread."""
    body = big_export("big-1")
    assert len(body) > 2_000_000
    mac = "sha256=" + hmac.new(HMAC_SECRET.encode(), b"0." + body, "sha256").hexdigest()
    four = ",".join([mac] * 4)
    status, _, _ = await post(gw, FEEDSER, export("small"), delivery="taken")
    assert status == 202
    seq = await gw.last_seq()
    hashing.calls.clear()
    now = int(time.time())
    refused = [
        ({"ts": now - 301, "headers": {"X-Scheduler-Signature": four}}, 401, "stale-delivery"),
        ({"headers": {"X-Scheduler-Signature": ",".join([mac] * 5)}}, 401, "bad-signature"),
        ({"headers": {"X-Scheduler-Signature": "sha256=" + "0" * 63}}, 401, "bad-signature"),
        ({"headers": {"X-Scheduler-Delivery": "no spaces allowed"}}, 401, "bad-signature"),
        ({"delivery": "taken"}, 409, "replayed-delivery"),
        ({"headers": {"X-Scheduler-Signature": "ed25519=" + "A" * 86}}, 401, "bad-signature"),
    ]
    for sign, want, slug in refused:
        status, problem, _ = await post(gw, FEEDSER, body, **sign)  # type: ignore[arg-type]
        assert (status, problem["type"].rsplit(":", 1)[1]) == (want, slug), (sign, problem)
    two_ed = ",".join(["ed25519=" + "A" * 86] * 2)
    status, _, _ = await post(gw, VEXER, body, headers={"X-Scheduler-Signature": two_ed})
    assert status == 401
    assert hashing.bodies() == [], "refused from the headers alone, unhashed"
    # Past the headers: four wrong values, one secret -> one MAC over the body, off the loop.
    status, problem, _ = await post(gw, FEEDSER, body, headers={"X-Scheduler-Signature": four})
    assert status == 401 and problem["detail"] == "signature does not verify"
    assert [(kind, thread[:14]) for kind, _, thread in hashing.big()] == [
        ("hmac", "webhook-verify")
    ]
    # Ed25519: the one signature is tried with each of the source's two keys.
    hashing.calls.clear()
    sig = "ed25519=" + "A" * 86
    status, _, _ = await post(gw, VEXER, body, headers={"X-Scheduler-Signature": sig})
    assert status == 401 and [c[0] for c in hashing.big()] == ["ed25519", "ed25519"]
    # A good signature still works, and large deliveries at once are bounded (503, unread).
    status, res, _ = await post(gw, FEEDSER, body)
    assert status == 202, res
    gw.gateway.webhooks.large_in_flight = webhooks.LARGE_IN_FLIGHT
    hashing.calls.clear()
    status, problem, headers = await post(gw, FEEDSER, big_export("big-2"))
    assert status == 503 and problem["type"].endswith(":busy") and headers["Retry-After"] == "1"
    assert hashing.bodies() == []
    gw.gateway.webhooks.large_in_flight = 0
    assert await gw.last_seq() == seq + 1, "one export, recorded for the token's tenant"


async def send_headers_only(gw: Harness, path: str, headers: dict[str, str], declared: int):
    """Send a request's head declaring a ``declared``-byte body, and none of the body: the
    answer (status, problem) can only come from a gateway that judged the headers alone."""
    host, port = gw.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        head = {"Host": f"{host}:{port}", "Content-Type": "application/json", **headers}
        head["Content-Length"] = str(declared)
        lines = [f"POST {path} HTTP/1.1", *(f"{k}: {v}" for k, v in head.items()), "", ""]
        writer.write("\r\n".join(lines).encode())
        await writer.drain()
        try:
            async with asyncio.timeout(10):
                head_bytes = await reader.readuntil(b"\r\n\r\n")
                status_line, *fields = head_bytes.decode().split("\r\n")
                length = next(
                    int(f.split(":", 1)[1])
                    for f in fields
                    if f.lower().startswith("content-length:")
                )
                problem = msgspec.json.decode(await reader.readexactly(length))
        except TimeoutError:
            raise AssertionError(f"no answer to {headers} without the body") from None
        return int(status_line.split()[1]), problem
    finally:
        writer.close()


async def test_a_delivery_the_headers_condemn_is_refused_before_its_body_is_read(
    gw: Harness, hashing: Hashing
) -> None:
    """The attack: a sender without a key declares a large body and the gateway reads and
    hashes it before looking at the headers. Each request here sends only its head, with an
    8 MiB body announced: the answer comes at once, from the headers, and nothing is hashed."""
    status, _, _ = await post(gw, FEEDSER, export("small"), delivery="used-id")
    assert status == 202
    seq = await gw.last_seq()
    hashing.calls.clear()
    declared = 8 * 1024 * 1024
    fresh = {
        "X-Scheduler-Timestamp": str(int(time.time())),
        "X-Scheduler-Delivery": "d-" + uuid.uuid4().hex,
        "X-Scheduler-Signature": "sha256=" + "0" * 64,
        "Authorization": f"Bearer {token(scopes='scheduler.webhook')}",
    }
    cases: list[tuple[dict[str, str], int, str, str]] = [
        ({"X-Scheduler-Timestamp": str(int(time.time()) - 301)}, 401, "stale-delivery", "300 s"),
        ({"X-Scheduler-Timestamp": "soon"}, 401, "bad-signature", "Unix seconds"),
        ({"X-Scheduler-Signature": ""}, 401, "bad-signature", "is required"),
        ({"X-Scheduler-Signature": "sha256=abc"}, 401, "bad-signature", "64 hex digits"),
        ({"X-Scheduler-Signature": ",".join(["sha256=" + "0" * 64] * 5)}, 401, "bad-signature",
         "at most 4"),
        ({"X-Scheduler-Signature": "ed25519=" + "A" * 86}, 401, "bad-signature", "no key"),
        ({"X-Scheduler-Delivery": "a/b"}, 401, "bad-signature", "X-Scheduler-Delivery"),
        ({"X-Scheduler-Delivery": "used-id"}, 409, "replayed-delivery", "used-id"),
    ]  # fmt: skip
    for change, want, slug, words in cases:
        headers = {k: v for k, v in {**fresh, **change}.items() if v}
        status, problem = await send_headers_only(gw, FEEDSER, headers, declared)
        assert (status, problem["type"], problem["status"]) == (
            want,
            f"urn:streamproc:problem:{slug}",
            want,
        ), change
        assert words in problem["detail"], problem
    # Headers that check out, a body over the cap: 413 from the declared length, unread.
    cap = gw.gateway.body_cap
    status, problem = await send_headers_only(gw, FEEDSER, fresh, cap + 1)
    assert status == 413 and problem["type"].endswith(":body-too-large"), problem
    assert problem["limit"] == cap
    assert hashing.bodies() == [], "nothing hashed for a delivery the headers condemn"
    assert await gw.last_seq() == seq, "nothing recorded"


# ------------------------------------------------------------------ M5: exports scoped by source

OTHER_SECRET = "another-feedser-source-secret"


@pytest.fixture
async def two_feedsers(
    tmp_path: Path, nats_server: EmbeddedNats, prefix: str
) -> AsyncIterator[Harness]:
    main = default_settings(tmp_path, tokenless=True).webhooks[0]
    other = msgspec.structs.replace(
        main, name="feedser-other", tenants=["acme"], hmac_secrets=[OTHER_SECRET]
    )
    settings = default_settings(tmp_path, tokenless=True)
    settings = msgspec.structs.replace(settings, webhooks=[*settings.webhooks, other])
    h = await start(tmp_path, nats_server.url, prefix, settings)
    try:
        yield h
    finally:
        await stop(h)
        await drop_streams(nats_server.url, prefix)


def main_source(**kw: object) -> dict[str, object]:
    return {"headers": {"X-Scheduler-Source": "feedser-main"}, **kw}


def other_source(**kw: object) -> dict[str, object]:
    return {"headers": {"X-Scheduler-Source": "feedser-other"}, "secret": OTHER_SECRET, **kw}


async def test_another_source_cannot_take_an_export_id(two_feedsers: Harness) -> None:
    """The attack: a second Feedser source sent the real source's export id first, and the
    real delivery got 409 export-conflict for all its tenants, none recorded."""
    gw = two_feedsers
    status, res, _ = await post(gw, FEEDSER, export("exp-x", kev=[]), **other_source())
    assert status == 202 and [e["tenant"] for e in res["events"]] == ["acme"]
    await gw.system.contexts["gateway-test"].wait_for(await gw.last_seq(), 5)
    status, res, _ = await post(gw, FEEDSER, export("exp-x"), **main_source())
    assert status == 202, res
    assert [(e["tenant"], e["outcome"]) for e in res["events"]] == [
        ("acme", "recorded"),
        ("globex", "recorded"),
    ]
    seq = await gw.last_seq()
    subjects = [subject for subject, _ in await stored(gw, seq - 2, seq)]
    # The other source's event first; the main source's tenants are appended side by side.
    assert [s.split(".events.", 1)[1] for s in subjects[:1]] == [
        f"acme.feedser.{shard('feedser-other:exp-x')}"
    ]
    assert sorted(s.split(".events.", 1)[1] for s in subjects[1:]) == [
        f"acme.feedser.{shard('feedser-main:exp-x')}",
        f"globex.feedser.{shard('feedser-main:exp-x')}",
    ]
    await gw.system.contexts["gateway-test"].wait_for(seq, 5)
    rm = gw.gateway.rm
    assert rm.export("globex", "feedser", "feedser-other:exp-x") is None, "not its tenant"
    for tenant, source in (("acme", "feedser-other"), ("acme", "feedser-main"),
                           ("globex", "feedser-main")):  # fmt: skip
        rec = rm.export(tenant, "feedser", f"{source}:exp-x")
        assert rec is not None and rec.event_id == derive_id(source, "exp-x", tenant)
    # Its tenants and its name come from its configuration only: a body cannot name others.
    for field in ({"tenant": "globex"}, {"source": "feedser-main"}):
        status, problem, _ = await post(gw, FEEDSER, export("exp-w", **field), **other_source())
        assert status == 400 and problem["type"].endswith(":invalid-body"), problem
    assert await gw.last_seq() == seq


async def test_an_export_recorded_before_refs_with_another_body_is_recorded_by_its_ref(
    two_feedsers: Harness,
) -> None:
    """An export recorded before exports were scoped by source (schema 1, keyed by the bare
    id): the same body is a duplicate of it; another body is recorded under the export's
    ref (its first revision there), beside the tenants that never had it, each tenant's
    outcome in the answer, and the delivery is remembered."""
    gw = two_feedsers
    ctx = gw.system.contexts["gateway-test"]
    old_body = export("exp-y", kev=["CVE-OLD"])
    legacy = new_event(
        "export.feedser",
        "acme",
        p.sourced_export(msgspec.json.decode(old_body, type=p.FeedserExportBody), "feedser-main"),
        ctx.clock.now(),
        event_id=derive_id("feedser-main", "exp-y", "acme"),
    )
    legacy = msgspec.structs.replace(legacy, schema=1, payload=p.export_body(legacy.payload))
    subject = f"{gw.system.settings.prefix}.events.acme.feedser.exp-y"
    ack = await ctx.publisher.publish(subject, encode(legacy), legacy.id)
    await ctx.wait_for(ack.seq, 5)
    status, res, _ = await post(gw, FEEDSER, old_body, **main_source(delivery="y-0"))
    assert status == 202, res
    assert [(e["tenant"], e["outcome"], e["seq"]) for e in res["events"]] == [
        ("acme", "duplicate", ack.seq),
        ("globex", "recorded", ack.seq + 1),
    ]
    status, res, _ = await post(gw, FEEDSER, export("exp-y"), **main_source(delivery="y-1"))
    assert status == 202, res
    assert [(e["tenant"], e["outcome"], e["revision"]) for e in res["events"]] == [
        ("acme", "recorded", 1),
        ("globex", "recorded", 2),
    ]
    assert {e["seq"] for e in res["events"]} == {ack.seq + 2, ack.seq + 3}
    status, _, _ = await post(gw, FEEDSER, export("exp-y"), **main_source(delivery="y-1"))
    assert status == 409, "a delivery that recorded something is remembered"
    await ctx.wait_for(ack.seq + 3, 5)
    status, res, _ = await post(gw, FEEDSER, export("exp-y"), **main_source())
    assert status == 200 and [e["outcome"] for e in res["events"]] == ["duplicate"] * 2
    assert await gw.last_seq() == ack.seq + 3


# ------------------------------------------------------------------ revisions (keep last)


async def test_revisions_keep_the_last_body_and_number_each_one_once(gw: Harness) -> None:
    """Another body under the same exportId is the next revision, whatever the read model
    has folded yet; bodies sent at the same moment get distinct numbers; the latest
    revision's body is a duplicate, an earlier one's is a revision again (the last counts)."""
    seq = await gw.last_seq()
    bodies = [export("rev-1", kev=[f"CVE-{i}"]) for i in range(6)]
    status, res, _ = await post(gw, FEEDSER, bodies[0])
    assert (status, res["revision"]) == (202, 1)
    # Two more at once, before the read model has folded anything.
    answers = await asyncio.gather(*(post(gw, FEEDSER, b) for b in bodies[1:3]))
    assert sorted((s, r["revision"]) for s, r, _ in answers) == [(202, 2), (202, 3)]
    assert await gw.last_seq() == seq + 3
    last = bodies[1] if answers[0][1]["revision"] == 3 else bodies[2]
    status, res, _ = await post(gw, FEEDSER, last)
    assert status == 200 and res["duplicate"] and res["revision"] == 3, res
    await gw.system.contexts["gateway-test"].wait_for(seq + 3, 5)
    rec = gw.gateway.rm.export("acme", "feedser", "feedser-main:rev-1")
    assert rec is not None and (rec.revision, rec.seq) == (3, seq + 3)
    status, res, _ = await post(gw, FEEDSER, bodies[0])
    assert status == 202 and res["revision"] == 4, "an earlier body again: the last counts"
    revs = [ev.payload.revision for _, ev in await stored(gw, seq + 1, seq + 4)]
    assert revs == [1, 2, 3, 4]
