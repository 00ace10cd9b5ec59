"""The Notify HTTP feed on a real gateway (DPoP-only, real nats-server): pages of the caller's
own tenant and kind read in one batched direct get, parameters and bodies validated as the
contract writes them, registrations only by the configured consumer and shared by every
gateway, a transient JetStream failure answered 503 (never a complete page), and retention
held by registrations: a lagging registered consumer keeps what it has not reported, an
unregistered reader sees the gap, an expired registration releases its hold."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from nats.aio.msg import Msg

from streamproc.bus import jsapi
from streamproc.names import PAGE_BYTES
from streamproc.natsd.server import EmbeddedNats
from streamproc.notify import messages as nm
from streamproc.notify.feed_http import epoch_of
from streamproc.problems import PROBLEM_TYPE
from tests.gateway.harness import start, stop
from tests.helpers import eventually
from tests.notify.feedkit import CONSUMER, Feed, delta, feed, running_feed

__all__ = ["feed"]  # the fixture


def problem(r: object) -> str:
    doc = r.json()  # type: ignore[attr-defined]
    return str(doc.get("type", "")).removeprefix(PROBLEM_TYPE)


async def test_events_pages_in_order_for_the_callers_tenant_and_kind_only(feed: Feed) -> None:
    msgs = []
    for i in range(7):
        msgs += [delta("acme", i), delta("globex", i)]
    await feed.publish(msgs)
    requests: list[str] = []

    async def note(m: Msg) -> None:
        requests.append(m.subject)

    spy = await feed.nc.subscribe("$JS.API.>", cb=note)
    async with feed.client("acme") as acme:
        r = await feed.page(acme, limit=3)
        assert r.status == 200, r.body
        page = r.json()
        assert page["tenant"] == "acme" and page["kind"] == "rescan.delta"
        # the epoch: a positive integer, the stream's creation time in microseconds
        assert page["epoch"] == epoch_of((await feed.info()).created) and page["epoch"] > 0
        # head and horizon of acme's own rescan.delta messages, not of the shared stream
        assert page["head"] == 13 and page["retentionHorizon"] == 1 and not page["complete"]
        assert [e["seq"] for e in page["events"]] == [1, 3, 5]
        assert [e["payload"]["id"] for e in page["events"]] == ["d-acme-0", "d-acme-1", "d-acme-2"]
        assert [e["id"] for e in page["events"]] == ["d-acme-0", "d-acme-1", "d-acme-2"]
        assert page["events"][0]["schemaVersion"] == 1
        await feed.nc.flush()
        direct = [x for x in requests if x.startswith("$JS.API.DIRECT.GET.")]
        assert len(direct) == 3 and "$JS.API.STREAM.MSG.GET" not in " ".join(requests)
        requests.clear()
        r = await feed.page(acme, afterSeq=5, streamEpoch=page["epoch"], limit=500)
        rest = r.json()
        assert [e["seq"] for e in rest["events"]] == [7, 9, 11, 13] and rest["complete"]
        await feed.nc.flush()
        assert len([x for x in requests if x.startswith("$JS.API.DIRECT.GET.")]) == 3
        empty = (await feed.page(acme, kind="report.ready")).json()
        assert (empty["head"], empty["retentionHorizon"], empty["events"]) == (0, 0, [])
        assert empty["complete"]
        for field, bad in (
            ("limit", "0"), ("limit", "501"), ("afterSeq", "-1"), ("limit", "x"),
            ("afterSeq", "\u00b2"), ("afterSeq", "\u0663"), ("limit", " 5"),
            ("streamEpoch", "0"), ("streamEpoch", "-3"),
            ("streamEpoch", "2026-01-01T00:00:00Z"),  # an epoch is an integer now
        ):  # fmt: skip
            r = await feed.page(acme, **{field: bad})
            assert r.status == 400 and r.json()["field"] == field, (field, bad, r.body)
        r = await feed.page(acme, afterSeq=15)
        assert r.status == 409 and problem(r) == "beyond-head"
        r = await feed.page(acme, streamEpoch=page["epoch"] + 1)
        assert r.status == 409 and problem(r) == "epoch-mismatch"
        assert r.json()["epoch"] == page["epoch"]
        r = await acme.request("GET", f"{feed.url}/api/v1/scheduler/feeds/nonsense/events")
        assert r.status == 404 and r.headers["Content-Type"] == "application/problem+json"
    await spy.unsubscribe()
    async with feed.client("globex") as globex:
        other = (await feed.page(globex)).json()
    assert (other["head"], other["retentionHorizon"]) == (14, 2)
    assert all(e["payload"]["tenant"] == "globex" for e in other["events"])
    async with feed.client("acme", scopes="scheduler.images.write") as ingest:
        r = await feed.page(ingest)
        assert r.status == 403, "reads need scheduler.read"
    r = await feed.h.call("GET", "/api/v1/scheduler/feeds/rescan.delta/events")
    assert r[0] == 401, "no tenant without a credential"


async def test_only_the_configured_consumer_reports_and_every_gateway_shares_it(
    feed: Feed, tmp_path: Path, nats_server: EmbeddedNats, prefix: str
) -> None:
    two = await start(tmp_path / "two", nats_server.url, prefix, feed.h.gateway.s, node_id="gw-2")
    try:
        (first, *_) = await feed.publish([delta("acme", i) for i in range(3)])
        async with (
            feed.client("acme") as reader,
            feed.client("acme", scopes="scheduler.admin") as admin,
            feed.consumer("acme") as consumer,
            feed.client("acme", azp=CONSUMER) as by_azp,
            feed.client("acme", sub=CONSUMER) as by_sub,
        ):
            for who in (reader, admin):  # a reader, even an admin, may not report
                r = await feed.report(who, None, None)
                assert r.status == 403 and problem(r) == "not-the-feed-consumer", r.body
            assert not await feed.hold_exists("acme"), "a refused report holds nothing"
            r = await feed.report(consumer, None, None)
            reg = r.json()
            assert r.status == 200 and reg["seq"] == 0 and reg["registered"] and reg["head"] == 3
            assert reg["leaseSeconds"] == 86400 and reg["epoch"] > 0
            for who in (by_azp, by_sub):  # azp or sub name the client as well
                assert (await feed.report(who, reg["epoch"], 1)).status == 200
            # The second gateway sees the same registration and moves the same hold.
            two_url = two.url
            r = await consumer.request(
                "POST", f"{two_url}/api/v1/scheduler/feeds/rescan.delta/consumer-checkpoint",
                json={"streamEpoch": reg["epoch"], "seq": 2},
            )  # fmt: skip
            assert r.status == 200 and r.json()["seq"] == 2 and not r.json()["registered"]
            hold = await jsapi.request(
                feed.nc, f"CONSUMER.INFO.{feed.stream}.feed-rescan-delta-acme"
            )
            assert hold["ack_floor"]["stream_seq"] == 2, "held after the reported position"
            assert hold["config"]["filter_subject"] == f"{prefix}.notify.acme.rescan.delta"
            assert hold["config"]["inactive_threshold"] == 86400 * 10**9, "the lease"
            r = await feed.report(consumer, reg["epoch"], 4)
            assert r.status == 409 and problem(r) == "beyond-head"
            r = await feed.report(consumer, reg["epoch"] + 1, 1)
            assert r.status == 409 and problem(r) == "epoch-mismatch"
            for body, field in (
                ({"streamEpoch": reg["epoch"], "seq": None}, "seq"),
                ({"streamEpoch": None, "seq": 1}, "streamEpoch"),
                ({"streamEpoch": 0, "seq": 1}, "streamEpoch"),
                ({"streamEpoch": reg["epoch"], "seq": -1}, "seq"),
                ({"streamEpoch": "x", "seq": 1}, "streamEpoch"),
                ({"seq": 1}, "streamEpoch"),
                ({"streamEpoch": None, "seq": None, "more": 1}, "more"),
            ):
                r = await consumer.request(
                    "POST", f"{feed.url}/api/v1/scheduler/feeds/rescan.delta/consumer-checkpoint",
                    json=body,
                )  # fmt: skip
                assert r.status == 400 and field in r.json().get("field", ""), (body, r.body)
        kv = await feed.nc.jetstream().key_value(f"{prefix}_feed")
        entry = await kv.get("acme.rescan.delta")
        assert entry.value is not None and b'"seq":2' in entry.value
        assert b'"consumer":"streamproc-notify"' in entry.value
        # Another tenant's consumer token neither sees nor reports acme's stream.
        async with feed.consumer("globex") as globex:
            r = await feed.report(globex, reg["epoch"], first)
            assert r.status == 200 and r.json()["tenant"] == "globex" and r.json()["head"] == 0
            page = (await feed.page(globex)).json()
            assert page["tenant"] == "globex" and page["events"] == []
        entry = await kv.get("acme.rescan.delta")
        assert entry.value is not None and b'"seq":2' in entry.value, "acme's is untouched"
    finally:
        await stop(two)


async def test_a_transient_jetstream_failure_is_a_503_never_a_complete_page(feed: Feed) -> None:
    await feed.publish([delta("acme", i) for i in range(3)])
    info = await feed.info()
    await jsapi.request(
        feed.nc, f"STREAM.UPDATE.{feed.stream}", {**info.config, "allow_direct": False}
    )
    async with feed.client("acme") as acme:
        r = await feed.page(acme, afterSeq=1)
        assert r.status == 503 and r.headers["Retry-After"] == "1"
        assert problem(r) == "feed-unavailable" and "complete" not in r.json()
        await jsapi.request(feed.nc, f"STREAM.UPDATE.{feed.stream}", info.config)
        r = await feed.page(acme, afterSeq=1)
        assert r.status == 200 and [e["seq"] for e in r.json()["events"]] == [2, 3]


async def test_a_lagging_registered_consumer_loses_nothing_past_a_short_window(
    tmp_path: Path, nats_server: EmbeddedNats, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 10 s delivery window, moved by the gateway as in production: acme's consumer
    registers and then lags; globex reads without a registration. Past the window every
    acme message is still there for its consumer; globex's reader is told of the gap."""
    monkeypatch.setenv("STREAMPROC_NOTIFY_MAX_AGE_S", "10")
    async with running_feed(tmp_path, nats_server, prefix) as feed:
        info = await feed.info()
        assert info.config["retention"] == "interest"
        assert info.config["max_age"] == 7 * 86400 * 10**9, "the hold's limit"
        async with (
            feed.consumer("acme") as acme,
            feed.client("globex") as globex,
        ):
            epoch = (await feed.report(acme, None, None)).json()["epoch"]
            seqs = await feed.publish(
                [m for i in range(5) for m in (delta("acme", i), delta("globex", i))]
            )
            page = (await feed.page(globex, limit=1)).json()
            globex_at = page["events"][0]["seq"]  # it read one message and stopped there
            # Until the window (10 s, moved every second) has let go of every message.
            await eventually(lambda: window_past(feed, seqs[-1]), timeout=40, every=0.5)
            kept = (await feed.page(acme, afterSeq=0, streamEpoch=epoch)).json()
            assert [e["id"] for e in kept["events"]] == [f"d-acme-{i}" for i in range(5)]
            assert kept["complete"]
            r = await feed.page(globex, afterSeq=globex_at, streamEpoch=epoch)
            assert r.status == 409 and problem(r) == "retention-gap", r.body
            assert (await feed.info()).state.messages == 5, "only acme's are held"
            # Reporting them releases them; nothing is left and nothing is missing.
            last = kept["events"][-1]["seq"]
            assert (await feed.report(acme, epoch, last)).status == 200
            await eventually(lambda: stream_empty(feed), timeout=20, every=0.2)
            r = await feed.page(acme, afterSeq=last, streamEpoch=epoch)
            assert r.status == 200 and r.json()["events"] == []


async def window_past(feed: Feed, seq: int) -> bool:
    return await feed.window_floor() >= seq


async def stream_empty(feed: Feed) -> bool:
    return (await feed.info()).state.messages == 0


async def test_an_expired_registration_releases_its_hold(
    tmp_path: Path, nats_server: EmbeddedNats, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STREAMPROC_FEED_LEASE_S", "3")
    async with running_feed(tmp_path, nats_server, prefix) as feed, feed.consumer() as acme:
        keeper = feed.h.gateway.window
        epoch = (await feed.report(acme, None, None)).json()["epoch"]
        seqs = await feed.publish([delta("acme", i) for i in range(4)])
        assert (await feed.report(acme, epoch, seqs[0])).status == 200
        await keeper.step(now=time.time() + keeper.max_age_s + 5)  # past the window
        assert (await feed.info()).state.messages == 3, "held: the three not reported"
        r = await feed.page(acme, afterSeq=seqs[0], streamEpoch=epoch)
        assert [e["seq"] for e in r.json()["events"]] == seqs[1:]
        # No report for longer than the lease: JetStream deletes the hold ...
        await eventually(lambda: gone(feed), timeout=30, every=0.25)
        await keeper.step(now=time.time() + keeper.max_age_s + 5)
        assert (await feed.info()).state.messages == 0, "... and retention takes them"
        r = await feed.page(acme, afterSeq=seqs[0], streamEpoch=epoch)
        assert r.status == 409 and problem(r) == "retention-gap"


async def gone(feed: Feed) -> bool:
    return not await feed.hold_exists("acme")


async def test_a_quiet_tenant_is_vouched_for_while_its_registration_lives(feed: Feed) -> None:
    """acme is caught up at its last message; the stream's max_age then takes it and
    globex's messages after it: no gap for acme (its live registration vouches that none of
    its messages lay there) — until the registration is gone, then the gap is reported."""
    async with feed.consumer() as acme:
        epoch = (await feed.report(acme, None, None)).json()["epoch"]
        (one,) = await feed.publish([delta("acme", 0)])
        assert (await feed.report(acme, epoch, one)).status == 200
        more = await feed.publish([delta("globex", i) for i in range(5)])
        assert (await feed.report(acme, epoch, one)).status == 200  # a caught-up poll
        # What max_age does to the oldest messages (a purge keeps the numbering).
        await jsapi.request(feed.nc, f"STREAM.PURGE.{feed.stream}", {"seq": more[-1]})
        (seven,) = await feed.publish([delta("acme", 1)])
        r = await feed.page(acme, afterSeq=one, streamEpoch=epoch)
        assert r.status == 200 and [e["seq"] for e in r.json()["events"]] == [seven]
        assert (await feed.report(acme, epoch, seven)).status == 200
        later = await feed.publish([delta("globex", i) for i in range(5, 8)])
        await jsapi.request(feed.nc, f"STREAM.PURGE.{feed.stream}", {"seq": later[-1]})
        kv = await feed.nc.jetstream().key_value(f"{feed.prefix}_feed")
        await kv.delete("acme.rescan.delta")  # the lease ran out
        await jsapi.request(feed.nc, f"CONSUMER.DELETE.{feed.stream}.feed-rescan-delta-acme")
        await feed.h.gateway.window.step(now=time.time() + 86400 + 5)
        r = await feed.page(acme, afterSeq=seven, streamEpoch=epoch)
        assert r.status == 409 and problem(r) == "retention-gap"


async def test_a_page_is_bounded_by_bytes_as_well_as_by_messages(feed: Feed) -> None:
    """Run summaries can be large (1,000 digests per vulnerability): a page ends before the
    message that would take it past the bound, says it is not complete, and the next page
    goes on from there."""
    digests = [f"sha256:{i:064x}" for i in range(1000)]
    summaries: list[nm.AnyMessage] = [
        nm.RunSummary(
            id=f"s-{i}", tenant="acme", run_id=f"r{i}", ts="2026-01-01T00:00:00.000Z",
            state="completed",
            vulnerabilities=[nm.VulnImages(vuln_id=f"CVE-2026-{i}", severity="high",
                                           image_count=1000, images=digests)],
        )
        for i in range(4)
    ]  # fmt: skip
    await feed.publish(summaries)
    seen: list[str] = []
    after = 0
    async with feed.client("acme") as acme:
        for _ in range(10):
            r = await feed.page(acme, kind="run.summary", afterSeq=after, limit=500)
            page = r.json()
            assert r.status == 200 and len(r.body) <= PAGE_BYTES, len(r.body)
            seen += [e["payload"]["id"] for e in page["events"]]
            if page["complete"]:
                break
            assert len(page["events"]) == 3, "three of ~75 KB fit, the fourth does not"
            after = page["events"][-1]["seq"]
    assert seen == ["s-0", "s-1", "s-2", "s-3"]
