"""The audit projection folded through the real Folder, into memory and into RocksDB."""

from __future__ import annotations

from pathlib import Path

import msgspec

from streamproc.audit import layout
from streamproc.audit.held import held_view
from streamproc.audit.log import AuditLog
from streamproc.audit.snapshots import snapshot_event
from streamproc.audit.verify import verify_tenant
from streamproc.events.envelope import Envelope, encode
from streamproc.hlc import Timestamp
from streamproc.runtime.projection import Folder
from streamproc.state import keys
from streamproc.state.digest import state_digest
from streamproc.state.store import MemoryStore, RocksStore, Store
from tests.audit.helpers import chained_events, keyring, signer
from tests.samples import BASE_MS, sample_event


def apply(folder: Folder, events: list[Envelope], first_seq: int = 1, batch: int = 0) -> int:
    msgs = [(first_seq + i, "s", encode(e)) for i, e in enumerate(events)]
    step = batch or len(msgs) or 1
    for start in range(0, len(msgs), step):
        chunk = msgs[start : start + step]
        folder.apply(chunk, keys.Checkpoint("S", "e", chunk[-1][0]))
    return first_seq + len(msgs)


def rejections(store: Store) -> list[keys.Rejected]:
    return [
        msgspec.json.decode(v, type=keys.Rejected)
        for _, v in store.scan(keys.META_CF, keys.REJECTION_PREFIX)
    ]


def test_chain_per_tenant_skips_unaudited_kinds_and_keeps_both_orders() -> None:
    store = MemoryStore()
    folder = Folder(store, [AuditLog()])
    mixed = [sample_event(i, tenants=2) for i in range(44)]  # every kind, twice
    apply(folder, mixed)
    chained = [e for e in mixed if e.kind in AuditLog.kinds and e.kind != "audit.snapshot"]
    assert sorted(layout.tenants(store)) == ["tenant-0", "tenant-1"]
    for tenant in ("tenant-0", "tenant-1"):
        mine = [e for e in chained if e.tenant == tenant]
        entries = list(layout.iter_entries(store, tenant))
        assert [e.event_id for e in entries] == [e.id for e in mine]
        assert [e.position for e in entries] == list(range(len(mine)))
        head = layout.read_head(store, tenant)
        assert head is not None and head.entries == len(mine)
        assert head.head_chain_link == entries[-1].chain_link
        assert head.head_hlc == entries[-1].t_hlc
        view = list(layout.log_view(store, tenant))
        assert [Timestamp.parse(v.t_hlc) for v in view] == sorted(
            Timestamp.parse(e.hlc) for e in mine
        )
        assert verify_tenant(store, tenant, keyring()).ok
    # the sample audit.snapshots fit no chain: refused with their reason, nothing recorded
    assert [(r.reason, r.event_id) for r in rejections(store)] == [
        ("snapshot_link_mismatch", "sample-21"),
        ("snapshot_link_mismatch", "sample-43"),
    ]
    assert not list(store.scan(layout.SNAPSHOTS_CF))


def test_commit_order_not_hlc_order_defines_the_chain() -> None:
    events = chained_events(6)
    shuffled = [events[i] for i in (3, 0, 5, 1, 4, 2)]
    store = MemoryStore()
    apply(Folder(store, [AuditLog()]), shuffled)
    chain = [e.event_id for e in layout.iter_entries(store, "acme")]
    assert chain == [e.id for e in shuffled]
    by_hlc = [layout.entry_at(store, "acme", v.position) for v in layout.log_view(store, "acme")]
    assert [e.event_id for e in by_hlc if e] == [e.id for e in events]


def test_batch_boundaries_and_backends_do_not_change_state(tmp_path: Path) -> None:
    events = chained_events(700, tenant="acme") + chained_events(300, tenant="beta", node="n2")
    one = MemoryStore()
    apply(Folder(one, [AuditLog()]), events)
    many = MemoryStore()
    apply(Folder(many, [AuditLog()]), events, batch=37)
    rocks = RocksStore(tmp_path / "s")
    apply(Folder(rocks, [AuditLog()]), events, batch=100)

    # checkpoints differ with the batch split; compare the audit families only
    def audit_items(s: Store) -> list[tuple[str, bytes, bytes]]:
        return [(cf, k, v) for cf in layout.FAMILIES for k, v in s.scan(cf)]

    assert audit_items(one) == audit_items(many) == audit_items(rocks)
    rocks.close()


def test_snapshot_in_the_same_batch_as_its_entries_is_recorded() -> None:
    events = chained_events(10)
    store = MemoryStore()
    folder = Folder(store, [AuditLog()])
    scratch = MemoryStore()
    apply(Folder(scratch, [AuditLog()]), events)
    batch = list(layout.iter_entries(scratch, "acme"))[:8]
    snap = snapshot_event("acme", batch, Timestamp(BASE_MS + 99, 0, "aud"), signer())
    apply(folder, [*events, snap])
    head = layout.read_head(store, "acme")
    assert head is not None and (head.snapshotted, head.snapshots) == (8, 1)
    [record] = layout.snapshots(store, "acme")
    assert record.event_id == snap.id and record.snapshot == snap.payload
    report = verify_tenant(store, "acme", keyring())
    assert report.ok and report.snapshots == 1


def test_snapshots_that_do_not_fit_are_rejected_with_a_reason() -> None:
    events = chained_events(10)
    store = MemoryStore()
    folder = Folder(store, [AuditLog()])
    seq = apply(folder, events)
    entries = list(layout.iter_entries(store, "acme"))
    ts = Timestamp(BASE_MS + 99, 0, "aud")
    s = signer()
    bad = [
        snapshot_event("acme", entries[2:5], ts, s),  # does not start at the frontier (0)
        snapshot_event("beta", entries[0:3], ts, s),  # another tenant's chain
    ]
    good = snapshot_event("acme", entries[0:5], ts, s)
    seq = apply(folder, [*bad, good, good], seq)  # the repeat overlaps what is recorded
    assert [r.reason for r in rejections(store)] == [
        "snapshot_out_of_order",
        "snapshot_beyond_head",
        "snapshot_out_of_order",
    ]
    forged = msgspec.structs.replace(
        snapshot_event("acme", entries[5:8], ts, s),
        payload=msgspec.structs.replace(
            snapshot_event("acme", entries[5:8], ts, s).payload, to_chain_link="00" * 32
        ),
    )
    apply(folder, [forged], seq)
    assert rejections(store)[-1].reason == "snapshot_link_mismatch"
    head = layout.read_head(store, "acme")
    assert head is not None and (head.snapshotted, head.snapshots) == (5, 1)


def test_held_view_is_the_unattested_future() -> None:
    now = BASE_MS + 1_000_000
    events = chained_events(5, base_ms=now - 100) + chained_events(3, base_ms=now + 60_000, first=5)
    events += chained_events(2, base_ms=now, first=8)
    store = MemoryStore()
    apply(Folder(store, [AuditLog()]), events)
    view = held_view(store, "acme", now, 5_000)
    assert view is not None
    assert [h.position for h in view.held] == [5, 6, 7]
    assert view.held[0].ahead_ms == 60_005  # the 6th event: base + 5 ms
    assert view.waiting == 5  # positions 5..9 cannot be attested yet
    later = held_view(store, "acme", now + 60_000, 5_000)
    assert later is not None and not later.held and later.waiting == 0
    assert held_view(store, "nobody", now, 5_000) is None


def test_digest_of_identical_folds_is_identical() -> None:
    events = chained_events(300)
    a, b = MemoryStore(), MemoryStore()
    apply(Folder(a, [AuditLog()]), events)
    apply(Folder(b, [AuditLog()]), events)
    assert state_digest(a) == state_digest(b)


def test_hlc_key_is_timestamp_key() -> None:
    for text in [
        "0:0:a",
        "1767225600000:7:node-1",
        f"{10**19 - 1}:999999999:{'z' * 32}",
        "5:12:A.b_c-D",
    ]:
        assert layout.hlc_key(text) == Timestamp.parse(text).key()
    texts = ["2:0:b", "10:0:a", "2:1:a", "2:0:a", "2:0:aa"]
    assert sorted(texts, key=layout.hlc_key) == sorted(texts, key=Timestamp.parse)
