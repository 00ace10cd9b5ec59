"""The snapshot reactor against a real nats-server: deterministic snapshot ids, batch and
interval rules, clock-skew holds, start-up verification, and the auditor role end to end
with a replay that reproduces the state byte for byte."""

from __future__ import annotations

import asyncio
import stat
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from streamproc import roles
from streamproc.audit import layout
from streamproc.audit.entry import entry_encoder
from streamproc.audit.held import held_view
from streamproc.audit.reactor import SnapshotReactor
from streamproc.audit.role import AUDITOR
from streamproc.audit.settings import AuditSettings
from streamproc.audit.signing import build_keyring
from streamproc.audit.verify import verify_all
from streamproc.bus.connect import connect
from streamproc.bus.fastclient import FastClient
from streamproc.bus.publisher import Publisher
from streamproc.config import Configuration, Settings
from streamproc.hlc import HybridLogicalClock
from streamproc.natsd.server import EmbeddedNats
from streamproc.roles import rebuild
from streamproc.state.digest import state_digest
from streamproc.state.store import RocksStore
from tests.audit.conftest import Pristine
from tests.audit.helpers import (
    chained_events,
    fold,
    keyring,
    role_context,
    signer,
    snapshot_events,
)
from tests.audit.test_tamper import change_digest
from tests.helpers import env_configuration
from tests.samples import BASE_MS


def _reactor(
    settings: Settings, monotonic: Callable[[], float] = time.monotonic, **audit: object
) -> SnapshotReactor:
    opts: dict[str, object] = {"verify_on_start": False, "batch_interval_s": 3600.0}
    opts.update(audit)
    return SnapshotReactor(
        settings,
        AuditSettings(**opts),  # type: ignore[arg-type]
        signer=signer(),
        keyring=keyring(),
        min_gap_s=0,
        monotonic=monotonic,
    )


async def test_a_batch_signed_twice_is_one_snapshot(
    nc: FastClient,
    prefix: str,
    publisher: Publisher,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    acks = await publisher.publish_events(chained_events(120))
    last = acks[-1].seq
    state = tmp_path / "auditor"
    await fold(nc, stream_names[0], state, last)
    settings = Settings(data_dir=tmp_path, prefix=prefix, node_id="aud")
    store = RocksStore(state)
    try:
        ctx = role_context(settings, store, publisher, HybridLogicalClock("aud"), last)
        first, second = _reactor(settings, batch_size=50), _reactor(settings, batch_size=50)
        assert await first.snapshot(ctx) == 2
        assert await second.snapshot(ctx) == 0  # same ranges, same ids: de-duplicated
        assert await first.snapshot(ctx) == 0  # already published, not yet folded back
    finally:
        store.close()
    snaps = await snapshot_events(nc, stream_names[0], prefix, "acme")
    assert [(s.payload.from_position, s.payload.to_position) for s in snaps] == [(0, 49), (50, 99)]
    await fold(nc, stream_names[0], state, last + 2)
    store = RocksStore(state)
    try:
        head = layout.read_head(store, "acme")
        assert head is not None and (head.snapshotted, head.snapshots) == (100, 2)
        ctx = role_context(settings, store, publisher, HybridLogicalClock("aud"), last + 2)
        late = _reactor(settings, batch_size=50, batch_interval_s=0.01)
        assert await late.snapshot(ctx) == 0  # 20 waiting: the interval starts now
        await asyncio.sleep(0.02)
        assert await late.snapshot(ctx) == 1  # interval passed: 100..119
    finally:
        store.close()
    await fold(nc, stream_names[0], state, last + 3)
    store = RocksStore(state, read_only=True)
    [report] = verify_all(store, keyring())
    store.close()
    assert report.ok and (report.snapshots, report.snapshotted) == (3, 120)


async def test_entries_ahead_of_the_clock_are_held_then_released(
    nc: FastClient,
    prefix: str,
    publisher: Publisher,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    now = [BASE_MS + 10_000_000]
    t0 = now[0]
    events = (
        chained_events(30, base_ms=t0 - 1_000)
        + chained_events(1, base_ms=t0 + 60_000 - 30, first=30)  # a minute in the future
        + chained_events(10, base_ms=t0 - 100, first=31)
    )
    acks = await publisher.publish_events(events)
    last = acks[-1].seq
    state = tmp_path / "auditor"
    await fold(nc, stream_names[0], state, last)
    settings = Settings(data_dir=tmp_path, prefix=prefix, node_id="aud")
    clock = HybridLogicalClock("aud", wall=lambda: now[0], max_clock_skew_ms=5_000)
    reactor = SnapshotReactor(
        settings,
        AuditSettings(batch_size=10, batch_interval_s=3600, verify_on_start=False),
        signer=signer(),
        keyring=keyring(),
        wall=lambda: now[0],
        min_gap_s=0,
    )
    rejected = REGISTRY.get_sample_value("hlc_clock_skew_rejections_total") or 0.0
    store = RocksStore(state)
    try:
        ctx = role_context(settings, store, publisher, clock, last)
        assert await reactor.snapshot(ctx) == 3  # 0..29; position 30 is held
        assert await reactor.snapshot(ctx) == 0
        assert REGISTRY.get_sample_value("hlc_clock_skew_rejections_total") == rejected + 1
        view = held_view(store, "acme", now[0], 5_000)
        assert view is not None
        assert [(h.position, h.ahead_ms) for h in view.held] == [(30, 60_000)]
        assert view.waiting == 11
        assert clock.now().physical < t0 + 1_000  # the future HLC was never merged
    finally:
        store.close()
    await fold(nc, stream_names[0], state, last + 3)
    now[0] = t0 + 56_000  # within 5 s of the held entry: released
    store = RocksStore(state)
    try:
        ctx = role_context(settings, store, publisher, clock, last + 3)
        assert await reactor.snapshot(ctx) == 1  # 30..39 (40 waits for the interval)
        view = held_view(store, "acme", now[0], 5_000)
        assert view is not None and not view.held
    finally:
        store.close()
    await fold(nc, stream_names[0], state, last + 4)
    store = RocksStore(state, read_only=True)
    [report] = verify_all(store, keyring())
    snaps = layout.snapshots(store, "acme")
    store.close()
    assert report.ok and report.snapshotted == 40
    # the snapshot over the released entry is stamped after it, by the merged clock
    assert snaps[-1].snapshot.snapshot_hlc > "1767235660000"


async def test_start_up_verification_stops_signing_for_a_broken_tenant(
    nc: FastClient, publisher: Publisher, auditor_copy: Path, pristine: Pristine
) -> None:
    store = RocksStore(auditor_copy)
    store.commit(change_digest(store))
    settings = Settings(data_dir=auditor_copy.parent, prefix=pristine.prefix, node_id="aud")
    reactor = _reactor(settings, batch_size=50, batch_interval_s=0.001, verify_on_start=True)
    failures = (
        REGISTRY.get_sample_value("scheduler_chain_verification_failures_total", {"tenant": "acme"})
        or 0.0
    )
    try:
        ctx = role_context(settings, store, publisher, HybridLogicalClock("aud"))
        reports = await reactor.verify(ctx, "start-up")  # in a thread, on a read-only view
        assert {r.tenant: r.ok for r in reports} == {"acme": False, "beta": True}
        assert "acme" in reactor.broken and "position 120" in reactor.broken["acme"]
        now_ms, mono = int(time.time() * 1000), time.monotonic()
        assert reactor.plan(store, now_ms, mono) == []  # the interval starts now
        planned = reactor.plan(store, now_ms, mono + 1)
        assert [t for t, _ in planned] == ["beta"]  # nothing more is signed for acme
    finally:
        store.close()
    after = REGISTRY.get_sample_value(
        "scheduler_chain_verification_failures_total", {"tenant": "acme"}
    )
    assert after == failures + 1


async def test_periodic_verification_finds_a_chain_broken_since_the_last_one(
    nc: FastClient,
    prefix: str,
    publisher: Publisher,
    stream_names: tuple[str, str, str],
    auditor_copy: Path,
) -> None:
    """Verified at start-up and every ``verify_period_s``: a chain broken in between is found
    by the next period's pass and signs nothing until a later pass finds it whole again; the
    chain metrics count each verification, failure and snapshot."""

    def count(name: str, tenant: str) -> float:
        return REGISTRY.get_sample_value(name, {"tenant": tenant}) or 0.0

    verifications = "scheduler_chain_verifications_total"
    failures = "scheduler_chain_verification_failures_total"
    snapshots = "scheduler_batch_snapshots_total"

    def counts() -> dict[tuple[str, str], float]:
        names = (verifications, failures, snapshots)
        return {(n, t): count(n, t) for n in names for t in ("acme", "beta")}

    def moved(before: dict[tuple[str, str], float]) -> dict[tuple[str, str], float]:
        return {k: v - before[k] for k, v in counts().items() if v != before[k]}

    period = 0.2
    mono = [1_000.0]  # the reactor's clock, moved by the test: a loaded machine's pauses
    # between two calls must not count as a period passing
    store = RocksStore(auditor_copy)
    settings = Settings(data_dir=auditor_copy.parent, prefix=prefix, node_id="aud")
    reactor = _reactor(
        settings, lambda: mono[0], batch_size=50, batch_interval_s=period * 1.2,
        verify_on_start=True, verify_period_s=period,
    )  # fmt: skip
    try:
        ctx = role_context(settings, store, publisher, HybridLogicalClock("aud"))
        before = counts()
        await reactor.react(ctx)  # start-up: both chains whole; waiting entries start a timer
        assert reactor.broken == {}
        assert moved(before) == {(verifications, "acme"): 1, (verifications, "beta"): 1}

        whole = layout.entry_at(store, "acme", 120)
        assert whole is not None
        before = counts()
        store.commit(change_digest(store))
        await reactor.react(ctx)  # within the period: not verified again
        assert reactor.broken == {} and moved(before) == {}

        mono[0] += period * 1.5
        await reactor.react(ctx)  # the period's pass finds it; only beta is signed
        assert "position 120" in reactor.broken["acme"]
        assert moved(before) == {
            (verifications, "acme"): 1, (verifications, "beta"): 1,
            (failures, "acme"): 1, (snapshots, "beta"): 1,
        }  # fmt: skip

        before = counts()
        store.commit(
            {layout.CHAIN_CF: {layout.chain_key("acme", 120): entry_encoder.encode(whole)}}
        )
        mono[0] += period * 1.5
        await reactor.react(ctx)  # whole again: signed again
        assert reactor.broken == {}
        assert moved(before) == {
            (verifications, "acme"): 1, (verifications, "beta"): 1, (snapshots, "acme"): 1,
        }  # fmt: skip
    finally:
        store.close()


async def test_auditor_role_end_to_end_and_replay_is_byte_identical(
    nats_server: EmbeddedNats,
    prefix: str,
    stream_names: tuple[str, str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from streamproc.roles import System

    monkeypatch.setitem(roles.ROLES, "auditor", AUDITOR)
    for var in ("STREAMPROC_AUDIT_SIGNING_KEY", "STREAMPROC_AUDIT_TRUSTED_KEYS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("STREAMPROC_AUDIT_BATCH_SIZE", "100")
    monkeypatch.setenv("STREAMPROC_AUDIT_BATCH_INTERVAL_S", "0.3")
    data = tmp_path / "data"
    settings = Settings(
        configuration=env_configuration(),
        data_dir=data,
        nats_url=nats_server.url,
        prefix=prefix,
        node_id="aud",
    )
    system = System(settings, ["auditor"], http=False)
    await system.start()
    try:
        seed = data / "keys" / "audit-ed25519.seed"
        assert stat.S_IMODE(seed.stat().st_mode) == 0o600  # generated on first start
        assert system.publisher is not None
        events = chained_events(250, tenant="acme") + chained_events(60, tenant="beta", node="n2")
        await system.publisher.publish_events(events)
        store = system.stores[0]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            heads = [layout.read_head(store, t) for t in ("acme", "beta")]
            if all(h is not None and h.snapshotted == h.entries > 0 for h in heads):
                break
            await asyncio.sleep(0.1)
        assert [h.snapshotted if h else 0 for h in heads] == [250, 60]
        assert [h.snapshots if h else 0 for h in heads] == [3, 1]  # 100, 100, 50 / 60
        live_heads = [layout.head_encoder.encode(h) for h in heads if h]
    finally:
        await system.close()
    live = RocksStore(settings.state_dir("auditor"), read_only=True)
    live_digest = state_digest(live)
    ring = build_keyring(data, env={})  # the generated key, read back from the data dir
    assert all(r.ok for r in verify_all(live, ring))
    live.close()

    nc = await connect(nats_server.url)
    try:
        summary = await rebuild(
            nc,
            stream_names[0],
            "auditor",
            tmp_path / "replay",
            progress=False,
            configuration=Configuration(),
        )
        published = [
            *await snapshot_events(nc, stream_names[0], prefix, "acme"),
            *await snapshot_events(nc, stream_names[0], prefix, "beta"),
        ]
    finally:
        await nc.close()
    assert len(published) == 4  # one per batch; the replay signed nothing anew
    assert summary.digest == live_digest  # chain heads, entries, snapshots: byte-identical
    replayed = RocksStore(tmp_path / "replay", read_only=True)
    try:
        heads = [layout.read_head(replayed, t) for t in ("acme", "beta")]
        assert [layout.head_encoder.encode(h) for h in heads if h] == live_heads
    finally:
        replayed.close()
