"""Offline merge between installations (separate stream prefixes on one real nats-server):
signed bundles, idempotent imports, deterministic chains, and what import order changes."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest

from streamproc.audit import layout
from streamproc.audit.bundle import (
    BundleBody,
    BundleError,
    ImportReport,
    build_bundle,
    import_bundle,
    open_bundle,
    read_tenant_messages,
)
from streamproc.audit.dsse import Keyring, Signer
from streamproc.audit.verify import verify_tenant
from streamproc.bus import jsapi, streams
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.events.envelope import Envelope
from streamproc.hlc import Timestamp
from streamproc.state.store import RocksStore
from tests.audit.helpers import chained_events, fold, signer
from tests.samples import BASE_MS

T = "acme"
NOW = BASE_MS + 10_000_000  # the importer's clock in these tests
SKEW = 5_000
_n = itertools.count()


@dataclass
class Installation:
    prefix: str
    stream: str
    publisher: Publisher
    state: Path
    signer: Signer


Make = Callable[[str, int], Awaitable[Installation]]


@pytest.fixture
async def make(nc: FastClient, tmp_path: Path) -> AsyncIterator[Make]:
    made: list[Installation] = []

    async def factory(name: str, seed: int) -> Installation:
        prefix = f"inst{next(_n)}{name}"
        await streams.apply(nc, streams.definitions(prefix))
        pub = await Publisher(nc, prefix=prefix).start()
        inst = Installation(
            prefix,
            streams.stream_names(prefix)[0],
            pub,
            tmp_path / prefix / "auditor",
            signer(bytes([seed]) * 32, f"key-{name}"),
        )
        made.append(inst)
        return inst

    yield factory
    for inst in made:
        await inst.publisher.close()
        for s in streams.stream_names(inst.prefix):
            with contextlib.suppress(jsapi.JsApiError):
                await jsapi.request(nc, f"STREAM.DELETE.{s}")


def trusting(*installations: Installation) -> Keyring:
    return Keyring({i.signer.key_id: i.signer.signing_key.verify_key for i in installations})


async def publish(inst: Installation, events: list[Envelope]) -> None:
    await inst.publisher.publish_events(events)


async def audit(nc: FastClient, inst: Installation) -> layout.Head:
    info = await jsapi.stream_info(nc, inst.stream)
    assert info is not None
    await fold(nc, inst.stream, inst.state, info.state.last_seq)
    store = RocksStore(inst.state, read_only=True)
    try:
        head = layout.read_head(store, T)
        assert head is not None
        assert verify_tenant(store, T, Keyring(), count_metrics=False).ok
        return head
    finally:
        store.close()


async def export(nc: FastClient, inst: Installation, since: str | None = None) -> bytes:
    store = RocksStore(inst.state, read_only=True)
    head = layout.read_head(store, T)
    store.close()
    messages = await read_tenant_messages(nc, inst.stream, inst.prefix, T)
    data, _ = build_bundle(
        T,
        messages,
        since=since,
        exported_by=inst.prefix,
        exported_hlc=Timestamp(NOW, 0, "exporter"),
        chain_head=head,
        signer=inst.signer,
    )
    return data


async def load(nc: FastClient, inst: Installation, data: bytes, ring: Keyring) -> ImportReport:
    return await import_bundle(
        nc, inst.publisher, inst.stream, data, ring, now_ms=NOW, max_skew_ms=SKEW
    )


def log_rows(inst: Installation) -> list[tuple[str, str, str, str]]:
    """The HLC-ordered view: what happened, independent of commit order."""
    store = RocksStore(inst.state, read_only=True)
    try:
        rows = []
        for item in layout.log_view(store, T):
            e = layout.entry_at(store, T, item.position)
            assert e is not None
            rows.append((e.t_hlc, e.job_id, e.action, e.event_id))
        return rows
    finally:
        store.close()


def history() -> list[Envelope]:
    """The connected installations' own history (identical on each of them)."""
    return chained_events(40, node="hq", step_ms=3)


async def test_offline_merge_is_idempotent_and_deterministic(nc: FastClient, make: Make) -> None:
    a, a2, a3 = [await make(n, i) for i, n in enumerate(("hq", "hqtwin", "hqalt"), 1)]
    b = await make("field1", 7)
    c = await make("field2", 8)
    for inst in (a, a2, a3):
        await publish(inst, history())
    # the offline installations produce their own events, interleaved in HLC with hq's
    await publish(b, chained_events(25, node="field1", base_ms=BASE_MS + 1, step_ms=3))
    await publish(c, chained_events(15, node="field2", base_ms=BASE_MS + 2, step_ms=4))
    b_head, c_head = await audit(nc, b), await audit(nc, c)
    x, y = await export(nc, b), await export(nc, c)
    ring = trusting(b, c)

    r1 = await load(nc, a, x, ring)
    assert (r1.events, r1.published, r1.already_present) == (25, 25, 0)
    assert r1.chain_head_checked and r1.order_preserved and r1.key_id == "key-field1"
    r2 = await load(nc, a, x, ring)  # the same bundle again: nothing new
    assert (r2.published, r2.already_present) == (0, 25)
    await load(nc, a, y, ring)
    head_a = await audit(nc, a)
    assert head_a.entries == 40 + 25 + 15

    # a fresh installation with the same history importing the same bundles in the same
    # order ends with the identical chain head
    await load(nc, a2, x, ring)
    await load(nc, a2, y, ring)
    head_a2 = await audit(nc, a2)
    assert layout.head_encoder.encode(head_a2) == layout.head_encoder.encode(head_a)

    # the other order: the chain (commit order) differs, the HLC log view does not
    await load(nc, a3, y, ring)
    await load(nc, a3, x, ring)
    head_a3 = await audit(nc, a3)
    assert head_a3.entries == head_a.entries
    assert head_a3.head_chain_link != head_a.head_chain_link
    assert log_rows(a3) == log_rows(a) == log_rows(a2)

    # after its own history, each bundle's events are chained in HLC order
    store = RocksStore(a.state, read_only=True)
    merged = list(layout.iter_entries(store, T))
    store.close()
    from_b = [e.t_hlc for e in merged[40:65]]
    assert all(":field1" in h for h in from_b)
    assert [Timestamp.parse(h) for h in from_b] == sorted(Timestamp.parse(h) for h in from_b)
    assert b_head.entries == 25 and c_head.entries == 15


async def test_partial_bundle_since_an_hlc(nc: FastClient, make: Make) -> None:
    a = await make("hq", 1)
    b = await make("field", 2)
    first = chained_events(20, node="field", step_ms=2)
    await publish(b, first)
    await audit(nc, b)
    ring = trusting(b)
    await load(nc, a, await export(nc, b), ring)
    await publish(b, chained_events(10, node="field", step_ms=2, first=20))
    await audit(nc, b)
    since = first[-1].hlc
    partial = await export(nc, b, since=since)
    body, events, _, checked = open_bundle(partial, ring, NOW, SKEW)
    assert body.since == since and len(events) == 10 and not checked
    report = await load(nc, a, partial, ring)
    assert (report.published, report.already_present) == (10, 0)
    assert (await load(nc, a, await export(nc, b), ring)).published == 0
    head_a = await audit(nc, a)
    assert head_a.entries == 30


async def test_bundles_are_refused_as_a_whole(nc: FastClient, make: Make) -> None:
    a = await make("hq", 1)
    b = await make("field", 2)
    await publish(b, chained_events(8, node="field"))
    await audit(nc, b)
    good = await export(nc, b)

    with pytest.raises(BundleError, match="signature"):
        await load(nc, a, good, trusting(a))  # the exporter's key is not trusted here

    env = msgspec.json.decode(good)
    env["payload"] = env["payload"][:-8] + ("A" * 4 + env["payload"][-4:])
    with pytest.raises(BundleError, match="signature"):
        await load(nc, a, msgspec.json.encode(env), trusting(b))

    body, events, _, _ = open_bundle(good, trusting(b), NOW, SKEW)

    def resign(new: BundleBody) -> bytes:
        envelope = b.signer.sign(
            "application/vnd.streamproc.audit.bundle+json", msgspec.json.encode(new)
        )
        return msgspec.json.encode(envelope)

    dropped = msgspec.structs.replace(body, events=body.events[:3] + body.events[4:])
    with pytest.raises(BundleError, match="do not rebuild the exporter's chain head"):
        await load(nc, a, resign(dropped), trusting(b))

    future = chained_events(1, node="field", base_ms=NOW + 60_000, first=99)
    from streamproc.events.envelope import encode

    ahead = msgspec.structs.replace(
        body, chain_head=None, events=[*body.events, msgspec.Raw(encode(future[0]))]
    )
    with pytest.raises(BundleError, match="ahead of this clock"):
        await load(nc, a, resign(ahead), trusting(b))

    other = chained_events(1, tenant="other", node="field", first=100)
    foreign = msgspec.structs.replace(body, events=[msgspec.Raw(encode(other[0]))])
    with pytest.raises(BundleError, match="of tenant other"):
        await load(nc, a, resign(foreign), trusting(b))

    info = await jsapi.stream_info(nc, a.stream)
    assert info is not None and info.state.messages == 0  # nothing was published
    assert events
