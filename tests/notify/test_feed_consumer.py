"""The HTTP feed's consumer (``streamproc.notify.feed_consumer``) against a real DPoP-only
gateway on a real nats-server, tokens from a token endpoint per tenant: partitions with their
own progress, positions reported before and after each batch, identities checked, failures
that keep progress while the other tenants go on, fail-closed ends, and the lease that fences
the checkpoint."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from streamproc import exitcodes
from streamproc.bus import jsapi, streams
from streamproc.client.dpop import DpopKey
from streamproc.client.http import ApiClient, Reply
from streamproc.client.tokens import ClientCredentials
from streamproc.config import ConfigError
from streamproc.configfile.registry import BY_PATH
from streamproc.configfile.sections import Notify
from streamproc.natsd.server import EmbeddedNats, free_port
from streamproc.notify import messages as nm
from streamproc.notify.feed_consumer import (
    ConsumerSettings,
    FeedClosed,
    FeedConsumer,
    Partition,
    PartitionFailed,
    from_section,
    load_settings,
)
from streamproc.notify.feed_state import Checkpoint, FeedState
from tests.client.authority import Authority, Client, running
from tests.gateway.harness import ISSUER, ISSUER_KEY
from tests.notify.feedkit import CONSUMER, Feed, delta, running_feed


class Recording(ApiClient):
    """Our client, noting each call: (method, path end, tenant, body)."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.calls: list[tuple[str, str, str | None, Any]] = []

    async def request(
        self, method: str, url: str, *, tenant: str | None = None, **kw: Any
    ) -> Reply:
        self.calls.append((method, url.rsplit("/", 1)[1], tenant, kw.get("json")))
        return await super().request(method, url, tenant=tenant, **kw)


@pytest.fixture
async def env(
    tmp_path: Path, nats_server: EmbeddedNats, prefix: str
) -> AsyncIterator[tuple[Feed, Authority]]:
    authority = Authority(ISSUER, ISSUER_KEY, "k1", {
        CONSUMER: Client("s3cret", ("acme", "globex"), sub="svc-notify")})  # fmt: skip
    async with running_feed(tmp_path, nats_server, prefix) as feed, running(authority):
        yield feed, authority


def consumer_for(
    feed: Feed, authority: Authority, tenants: tuple[str, ...], seen: list[tuple[str, int]],
    *, state: FeedState | None = None, handler: Any = None, url: str | None = None,
) -> tuple[FeedConsumer, Recording]:  # fmt: skip
    key = DpopKey.load_or_create(feed.tmp / "consumer" / "dpop.jwk")
    tokens = ClientCredentials(authority.url, CONSUMER, "s3cret", key, scopes=("scheduler.read",))
    api = Recording(key, tokens, timeout_s=5)
    settings = ConsumerSettings(base_url=url or feed.url, tenants=tenants, batch_size=2,
                                poll_interval_s=0.05, lease_ttl_s=3)  # fmt: skip
    state = state or FeedState(feed.tmp / "consumer" / "state.sqlite", ttl_s=3)

    def note(msg: nm.AnyMessage, seq: int) -> None:
        seen.append((msg.tenant, seq))

    return FeedConsumer(settings, api, state, handler or note, say=lambda _: None), api


async def test_each_tenant_is_a_partition_with_its_own_progress_and_token(
    env: tuple[Feed, Authority],
) -> None:
    feed, authority = env
    acme = await feed.publish([delta("acme", i) for i in range(3)])
    globex = await feed.publish([delta("globex", i) for i in range(2)])
    seen: list[tuple[str, int]] = []
    consumer, api = consumer_for(feed, authority, ("acme", "globex", "initech"), seen)
    async with api:
        code = await consumer.round()
        # initech: the issuer refuses the client that tenant; the others go on.
        assert code == exitcodes.USAGE
        initech = consumer.partitions[2]
        assert "tenant initech not allowed" in initech.problem
        assert [s for t, s in seen if t == "acme"] == acme
        assert [s for t, s in seen if t == "globex"] == globex
        state = consumer.state
        assert state.checkpoint("acme", "rescan.delta").seq == acme[-1]  # type: ignore[union-attr]
        assert state.checkpoint("globex", "rescan.delta").seq == globex[-1]  # type: ignore[union-attr]
        assert state.checkpoint("initech", "rescan.delta") is None
        # One token per tenant from the token endpoint (DPoP nonce challenge first).
        assert [f["tenant"] for f in authority.requests] == ["acme", "acme", "globex", "initech"]
        # Before each batch the persisted position, after each processed batch the new one.
        acme_calls = [(m, what, body) for m, what, t, body in api.calls if t == "acme"]
        epoch = consumer.state.checkpoint("acme", "rescan.delta").epoch  # type: ignore[union-attr]
        pos = lambda s: {"streamEpoch": epoch, "seq": s}  # noqa: E731
        assert acme_calls == [
            ("POST", "consumer-checkpoint", {"streamEpoch": None, "seq": None}),
            ("GET", "events", None),
            ("POST", "consumer-checkpoint", pos(acme[1])),  # batch size 2
            ("POST", "consumer-checkpoint", pos(acme[1])),  # before the next batch
            ("GET", "events", None),
            ("POST", "consumer-checkpoint", pos(acme[2])),
        ]
        api.calls.clear()
        await consumer.round()  # caught up: the position is reported all the same
        acme_calls = [(m, what, body) for m, what, t, body in api.calls if t == "acme"]
        assert acme_calls == [
            ("POST", "consumer-checkpoint", pos(acme[2])),
            ("GET", "events", None),
        ]


@pytest.mark.parametrize("bad", ["tenant", "malformed", "handler"])
async def test_a_bad_event_or_handler_stops_its_partition_at_the_previous_event(
    env: tuple[Feed, Authority], bad: str
) -> None:
    """A tampered payload (its tenant changed), a payload that is not a Notify message, or
    a handler failure: acme stays at its last good event, poll after poll; globex goes on."""
    feed, authority = env
    good = await feed.publish([delta("acme", 0), delta("acme", 1)])
    subject = nm.subject(feed.prefix, "acme", "rescan.delta")
    if bad == "tenant":
        body = nm.encode(delta("globex", 2))  # on acme's subject, saying globex
    elif bad == "malformed":
        body = b'{"kind": "rescan.delta", "id": "d-acme-2", "tenant": "acme"}'
    else:
        body = nm.encode(delta("acme", 2))
    (poison,) = [a.seq for a in await feed.publisher.publish_many([(subject, body, "p-2")])]
    after = await feed.publish([delta("acme", 3), delta("globex", 0)])
    seen: list[tuple[str, int]] = []

    def handler(msg: nm.AnyMessage, seq: int) -> None:
        if bad == "handler" and seq == poison:
            raise RuntimeError("the pager is down")
        seen.append((msg.tenant, seq))

    consumer, api = consumer_for(feed, authority, ("acme", "globex"), seen, handler=handler)
    async with api:
        for _ in range(2):  # the next poll does not skip it either
            assert await consumer.round() == exitcodes.FAILED
            assert consumer.state.checkpoint("acme", "rescan.delta").seq == good[-1]  # type: ignore[union-attr]
            assert consumer.partitions[0].problem
            assert consumer.state.checkpoint("globex", "rescan.delta").seq == after[-1]  # type: ignore[union-attr]
        assert [s for t, s in seen if t == "acme"] == good
        assert ("globex", after[-1]) in seen
        reason = {"tenant": "payload tenant 'globex', not acme", "malformed": "malformed payload",
                  "handler": "the handler failed"}[bad]  # fmt: skip
        assert reason in consumer.partitions[0].problem
        # The feed was told the last good position, no further.
        acme_reports = [b for m, _, t, b in api.calls if m == "POST" and t == "acme" and b]
        assert acme_reports[-1]["seq"] == good[-1]


async def test_an_unavailable_owner_keeps_progress(env: tuple[Feed, Authority]) -> None:
    feed, authority = env
    seen: list[tuple[str, int]] = []
    dead = f"http://127.0.0.1:{free_port()}"
    consumer, api = consumer_for(feed, authority, ("acme",), seen, url=dead)
    async with api:
        assert await consumer.round() == exitcodes.FAILED
    assert "cannot be reached" in consumer.partitions[0].problem
    assert consumer.state.checkpoint("acme", "rescan.delta") is None and seen == []


async def test_epoch_change_missing_stream_and_retention_gap_fail_closed(
    env: tuple[Feed, Authority], monkeypatch: pytest.MonkeyPatch
) -> None:
    feed, authority = env
    seen: list[tuple[str, int]] = []
    consumer, api = consumer_for(feed, authority, ("acme",), seen)
    async with api:
        await feed.publish([delta("acme", 0)])
        assert await consumer.round() == exitcodes.OK
        cp = consumer.state.checkpoint("acme", "rescan.delta")
        # The stream is missing while a checkpoint exists.
        await jsapi.request(feed.nc, f"STREAM.DELETE.{feed.stream}")
        with pytest.raises(FeedClosed, match="stream is missing while a checkpoint exists"):
            await consumer.round()
        # Recreated: a new epoch. Never reset, never skipped to the head.
        await streams.apply(feed.nc, streams.definitions(feed.prefix)[2:3])
        await feed.publish([delta("acme", i) for i in range(3)])
        with pytest.raises(FeedClosed, match="epoch changed"):
            await consumer.round()
        assert consumer.state.checkpoint("acme", "rescan.delta") == cp
        assert seen == [("acme", cp.seq)]  # type: ignore[union-attr]


async def test_a_retention_gap_fails_closed(
    tmp_path: Path, nats_server: EmbeddedNats, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The consumer stopped for longer than its registration's lease and the window passed
    what it had not read: it says so and stops, its checkpoint where it was."""
    monkeypatch.setenv("STREAMPROC_FEED_LEASE_S", "3")
    authority = Authority(ISSUER, ISSUER_KEY, "k1", {CONSUMER: Client("s3cret", ("acme",))})
    async with running_feed(tmp_path, nats_server, prefix) as feed, running(authority):
        seen: list[tuple[str, int]] = []
        consumer, api = consumer_for(feed, authority, ("acme",), seen)
        async with api:
            first = await feed.publish([delta("acme", 0)])
            await consumer.round()
            await feed.publish([delta("acme", i) for i in range(1, 4)])
            # stopped: no report for longer than the lease, then the window moves past
            deadline = time.monotonic() + 30
            while await feed.hold_exists("acme"):
                assert time.monotonic() < deadline, "the hold outlived its lease"
                await asyncio.sleep(0.2)
            keeper = feed.h.gateway.window
            await keeper.step(now=time.time() + keeper.max_age_s + 5)
            with pytest.raises(FeedClosed, match="retention gap after checkpoint"):
                await consumer.round()
            assert consumer.state.checkpoint("acme", "rescan.delta").seq == first[-1]  # type: ignore[union-attr]


async def test_two_consumers_on_one_state_only_the_lease_holder_checkpoints(
    env: tuple[Feed, Authority],
) -> None:
    """A stalls in its handler and stops renewing (a frozen process); once its lease has
    run out, B takes the partition and moves on. A's late checkpoint does not land."""
    feed, authority = env
    seqs = await feed.publish([delta("acme", i) for i in range(3)])
    path = feed.tmp / "consumer" / "shared.sqlite"
    release = asyncio.Event()
    seen_a: list[tuple[str, int]] = []
    seen_b: list[tuple[str, int]] = []

    async def stall(msg: nm.AnyMessage, seq: int) -> None:
        seen_a.append((msg.tenant, seq))
        await release.wait()

    a, api_a = consumer_for(feed, authority, ("acme",), seen_a, handler=stall,
                            state=FeedState(path, ttl_s=3))  # fmt: skip
    b, api_b = consumer_for(feed, authority, ("acme",), seen_b, state=FeedState(path, ttl_s=3))

    async def frozen(_lease: object) -> None:  # A's renewals stop, as in a frozen process
        await asyncio.Event().wait()

    a._keep_lease = frozen  # type: ignore[method-assign]
    async with api_a, api_b:
        stuck = asyncio.create_task(a.round())
        while not seen_a:
            await asyncio.sleep(0.01)
        assert await b.round() == exitcodes.FAILED, "A holds the lease"
        assert "another consumer on this state holds its lease" in b.partitions[0].problem
        deadline = time.monotonic() + 20
        while (code := await b.round()) != exitcodes.OK:
            assert time.monotonic() < deadline, b.partitions[0].problem
            await asyncio.sleep(0.2)
        assert [s for _, s in seen_b] == seqs
        release.set()  # A wakes up and tries to write its checkpoint
        assert await stuck == exitcodes.FAILED
        assert "another consumer holds the partition's lease now" in a.partitions[0].problem
        assert b.state.checkpoint("acme", "rescan.delta").seq == seqs[-1]  # type: ignore[union-attr]
        del code


def test_each_event_is_checked_against_its_page_envelope_and_payload() -> None:
    consumer = FeedConsumer(
        ConsumerSettings(base_url="http://x", tenants=("acme",)),
        None,
        None,
        print,  # type: ignore[arg-type]
    )
    p, cp = Partition("acme", "rescan.delta"), Checkpoint(1, 5)
    good = {"seq": 6, "id": "d-acme-1", "kind": "rescan.delta",
            "payload": msgspec_doc(delta("acme", 1))}  # fmt: skip
    assert consumer._checked(p, cp, good).id == "d-acme-1"
    for bad, why in (
        ({**good, "seq": 5}, "a sequence after 5"),
        ({**good, "kind": "report.ready"}, "envelope kind"),
        ({**good, "id": "d-acme-9"}, "does not match the envelope"),
        ({**good, "payload": msgspec_doc(delta("acme", 1), kind="report.ready")}, "malformed"),
        ({**good, "payload": {**msgspec_doc(delta("acme", 1)), "extra": 1}}, "malformed"),
        ({**good, "payload": msgspec_doc(delta("globex", 1))}, "payload tenant"),
    ):
        with pytest.raises(PartitionFailed, match=why):
            consumer._checked(p, cp, bad)


def msgspec_doc(msg: nm.AnyMessage, **over: Any) -> dict[str, Any]:
    return {**msgspec.json.decode(nm.encode(msg)), **over}


def test_settings_are_the_documents_with_their_bounds() -> None:
    s = load_settings(base_url="http://127.0.0.1:8480", tenants=["Acme", "globex"], kinds=[],
                      env={})  # fmt: skip
    assert (s.poll_interval_s, s.batch_size, s.http_timeout_s, s.lease_ttl_s) == (15, 50, 30, 120)
    assert s.tenants == ("acme", "globex") and s.kinds == ("rescan.delta",)
    assert load_settings(base_url="http://h", tenants=[], kinds=[], token_tenant="acme",
                         env={}).tenants == ("acme",)  # fmt: skip
    for typed, why in (  # what the start's decode refuses first; the consumer checks again
        ({"batch_size": 0}, "BATCH_SIZE=0: a whole number from 1 to 500"),
        ({"batch_size": 501}, "BATCH_SIZE=501: a whole number from 1 to 500"),
        ({"lease_ttl_s": 2.9}, "LEASE_TTL_S=2.9: at least 3"),
        ({"poll_interval_s": 0.0}, "POLL_INTERVAL_S=0: positive"),
        ({"http_timeout_s": -1.0}, "HTTP_TIMEOUT_S=-1: positive"),
    ):
        with pytest.raises(ConfigError, match=why):
            from_section(Notify(**typed), base_url="http://h", tenants=["a"], kinds=[])
        text = {BY_PATH[f"notify.{f}"].env: str(v) for f, v in typed.items()}
        with pytest.raises(ConfigError, match=BY_PATH[f"notify.{next(iter(typed))}"].env):
            load_settings(base_url="http://h", tenants=["a"], kinds=[], env=text)
    for env, tenants, url, why in (
        ({}, [], "http://h", "no default or system tenant"),
        ({}, ["acme", "ACME"], "http://h", "listed twice"),
        ({}, ["ac.me"], "http://h", "ASCII letters"),
        ({}, ["a" * 129], "http://h", "1 to 128"),
        ({}, ["a"], "http://u:p@h", "without credentials"),
        ({}, ["a"], "http://h/?q=1", "query"),
        ({}, ["a"], "ftp://h", "absolute http"),
    ):
        with pytest.raises(ConfigError, match=why):
            load_settings(base_url=url, tenants=tenants, kinds=[], env=env)
    env = {"STREAMPROC_NOTIFY_BASE_URL": "https://feed.internal",
           "STREAMPROC_NOTIFY_TENANTS": "acme, globex"}  # fmt: skip
    s = load_settings(base_url=None, tenants=[], kinds=["run.summary"], env=env)
    assert s.base_url == "https://feed.internal" and s.tenants == ("acme", "globex")


def test_the_feeds_registration_lease_is_at_most_a_year() -> None:
    """The bound the typed section leaves to the feed's settings."""
    from streamproc.configfile.sections import Sections
    from streamproc.notify import registrations

    year = 366 * 86_400.0
    assert registrations.from_sections(Sections(notify=Notify(feed_lease_s=year))).lease_s == year
    with pytest.raises(ConfigError, match=r"STREAMPROC_FEED_LEASE_S='31622401': seconds"):
        registrations.from_sections(Sections(notify=Notify(feed_lease_s=year + 1)))
    assert registrations.load_settings({"STREAMPROC_NOTIFY_CONSUMER_CLIENT_IDS": "a, b"}) == (
        registrations.FeedSettings(consumer_client_ids=("a", "b"))
    )
