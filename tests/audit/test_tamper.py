"""Tampering with a real auditor state directory (built through nats-server and RocksDB) is
caught by verification and located: the first broken position and what differs."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
from nacl.signing import SigningKey
from prometheus_client import REGISTRY

from streamproc.audit import layout, verify
from streamproc.audit.dsse import Signer
from streamproc.audit.entry import Entry, entry_encoder, link_of
from streamproc.audit.snapshots import from_wire, to_wire
from streamproc.audit.verify import verify_all, verify_tenant
from streamproc.state.store import RocksStore
from tests.audit.conftest import Pristine
from tests.audit.helpers import keyring

T = "acme"
Writes = dict[str, dict[bytes, bytes | None]]


def _entry(store: RocksStore, position: int) -> Entry:
    e = layout.entry_at(store, T, position)
    assert e is not None
    return e


def _put(position: int, e: Entry) -> Writes:
    return {layout.CHAIN_CF: {layout.chain_key(T, position): entry_encoder.encode(e)}}


def change_digest(s: RocksStore) -> Writes:
    e = _entry(s, 120)
    return _put(120, msgspec.structs.replace(e, payload_digest="00" * 32))


def change_payload(s: RocksStore) -> Writes:
    e = _entry(s, 130)
    return _put(130, msgspec.structs.replace(e, payload=e.payload.replace('"', "'", 2)))


def shift_field(s: RocksStore) -> Writes:
    """Move the HLC's last node character into job_id: the link input is unchanged."""
    e = _entry(s, 140)
    shifted = msgspec.structs.replace(e, t_hlc=e.t_hlc[:-1], job_id=e.t_hlc[-1] + e.job_id)
    assert shifted.recompute_link(e.prev_chain_link) == e.chain_link  # the hole...
    return _put(140, shifted)


def delete_entry(s: RocksStore) -> Writes:
    return {layout.CHAIN_CF: {layout.chain_key(T, 77): None}}


def swap_entries(s: RocksStore) -> Writes:
    a, b = _entry(s, 30), _entry(s, 31)
    return {
        **_put(30, b),
        layout.CHAIN_CF: {**_put(30, b)[layout.CHAIN_CF], **_put(31, a)[layout.CHAIN_CF]},
    }


def swap_renumbered(s: RocksStore) -> Writes:
    a, b = _entry(s, 30), _entry(s, 31)
    w = _put(30, msgspec.structs.replace(b, position=30))
    w[layout.CHAIN_CF].update(_put(31, msgspec.structs.replace(a, position=31))[layout.CHAIN_CF])
    return w


def rewrite_suffix(s: RocksStore) -> Writes:
    """Change entry 160 and rewrite every later link, both indexes and the head consistently:
    only the signed snapshot covering 150..199 can tell."""
    head = layout.read_head(s, T)
    assert head is not None
    w: Writes = {layout.CHAIN_CF: {}, layout.LOG_CF: {}, layout.HEADS_CF: {}}
    prev = _entry(s, 159).chain_link
    for e in layout.iter_entries(s, T, 160):
        if e.position == 160:
            e = msgspec.structs.replace(e, payload=e.payload.replace("seg-", "SEG-", 1))
        digest = e.recompute_digest()
        link = link_of(e.t_hlc, e.job_id, e.action, prev, digest)
        new = msgspec.structs.replace(
            e, payload_digest=digest, prev_chain_link=prev, chain_link=link
        )
        w[layout.CHAIN_CF][layout.chain_key(T, e.position)] = entry_encoder.encode(new)
        prev = link
    head.head_chain_link = prev
    w[layout.HEADS_CF][T.encode()] = layout.head_encoder.encode(head)
    return w


def _snapshot_record(s: RocksStore, from_position: int) -> layout.SnapshotRecord:
    raw = s.get(layout.SNAPSHOTS_CF, layout.snapshot_key(T, from_position))
    assert raw is not None
    return layout.snapshot_decoder.decode(raw)


def _put_snapshot(record: layout.SnapshotRecord) -> Writes:
    key = layout.snapshot_key(T, record.snapshot.from_position)
    return {layout.SNAPSHOTS_CF: {key: msgspec.json.encode(record)}}


def forge_signature(s: RocksStore) -> Writes:
    """Re-sign snapshot 100..149's exact body with an attacker's key, claiming our key id."""
    record = _snapshot_record(s, 100)
    env = from_wire(record.snapshot.envelope)
    attacker = Signer(env.signatures[0].keyid, SigningKey(b"\x66" * 32))
    forged = attacker.sign(env.payloadType, base64.b64decode(env.payload))
    snap = msgspec.structs.replace(record.snapshot, envelope=to_wire(forged))
    return _put_snapshot(msgspec.structs.replace(record, snapshot=snap))


def change_snapshot_fields(s: RocksStore) -> Writes:
    record = _snapshot_record(s, 50)
    snap = msgspec.structs.replace(record.snapshot, merkle_root="11" * 32)
    return _put_snapshot(msgspec.structs.replace(record, snapshot=snap))


def delete_snapshot(s: RocksStore) -> Writes:
    return {layout.SNAPSHOTS_CF: {layout.snapshot_key(T, 50): None}}


def delete_log_row(s: RocksStore) -> Writes:
    e = _entry(s, 55)
    return {layout.LOG_CF: {layout.log_key(T, e.t_hlc, 55): None}}


def move_log_row(s: RocksStore) -> Writes:
    """Re-date entry 56 in the HLC view only (the chain itself is untouched)."""
    e = _entry(s, 56)
    return {
        layout.LOG_CF: {
            layout.log_key(T, e.t_hlc, 56): None,
            layout.log_key(T, "1:0:n1", 56): b"",
        }
    }


CASES: list[tuple[Callable[[RocksStore], Writes], int, str, str]] = [
    (change_digest, 120, "payload_digest", "payload_digest does not match"),
    (change_payload, 130, "payload_digest", "payload_digest does not match"),
    (shift_field, 140, "payload_digest", "payload_digest does not match"),
    (delete_entry, 77, "position", "missing or out of sequence"),
    (swap_entries, 30, "position", "stored position differs"),
    (swap_renumbered, 30, "prev_chain_link", "prev_chain_link is not"),
    (rewrite_suffix, 150, "snapshot", "snapshot 150..199"),
    (forge_signature, 100, "snapshot", "signature"),
    (change_snapshot_fields, 50, "snapshot", "differ from the signed body"),
    (delete_snapshot, 50, "snapshot", "not contiguous"),
    (delete_log_row, 55, "log_index", "HLC log view has no"),
    (move_log_row, 56, "log_index", "HLC log view has no row"),
]


def test_pristine_state_verifies(pristine: Pristine) -> None:
    store = RocksStore(pristine.path, read_only=True)
    try:
        reports = {r.tenant: r for r in verify_all(store, keyring())}
    finally:
        store.close()
    acme, beta = reports["acme"], reports["beta"]
    assert (acme.ok, acme.entries, acme.snapshots, acme.snapshotted) == (True, 230, 4, 200)
    assert (beta.ok, beta.entries, beta.snapshots) == (True, 40, 0)


@pytest.mark.parametrize(
    ("tamper", "position", "field", "why"), CASES, ids=lambda c: getattr(c, "__name__", None)
)
def test_tampering_is_caught_and_located(
    auditor_copy: Path,
    tamper: Callable[[RocksStore], Writes],
    position: int,
    field: str,
    why: str,
) -> None:
    store = RocksStore(auditor_copy)
    try:
        store.commit(tamper(store))
    finally:
        store.close()
    view = RocksStore(auditor_copy, read_only=True)
    failures = (
        REGISTRY.get_sample_value("scheduler_chain_verification_failures_total", {"tenant": T})
        or 0.0
    )
    try:
        report = verify_tenant(view, T, keyring())
        other = verify_tenant(view, "beta", keyring())
    finally:
        view.close()
    assert not report.ok
    assert (report.broken_position, report.field) == (position, field), report.reason
    assert why in report.reason
    assert report.reason.startswith(f"position {position}:")
    assert other.ok  # tenants are isolated
    after = REGISTRY.get_sample_value("scheduler_chain_verification_failures_total", {"tenant": T})
    assert after == failures + 1


def test_forged_signature_verifies_only_with_the_forger_key_trusted(auditor_copy: Path) -> None:
    store = RocksStore(auditor_copy)
    store.commit(forge_signature(store))
    store.close()
    view = RocksStore(auditor_copy, read_only=True)
    attacker = SigningKey(b"\x66" * 32)
    ring = keyring()
    ring.add("attacker", attacker.verify_key)
    assert verify_tenant(view, T, ring).ok  # the body is genuine; only the key is foreign
    assert not verify_tenant(view, T, keyring()).ok
    view.close()


@pytest.mark.parametrize(
    ("tamper", "position", "field"),
    [(None, None, None), (delete_entry, 77, "position"), (change_digest, 120, "payload_digest")],
)
def test_parallel_verification_reports_exactly_what_serial_does(
    auditor_copy: Path,
    monkeypatch: pytest.MonkeyPatch,
    tamper: Callable[[RocksStore], Writes] | None,
    position: int | None,
    field: str | None,
) -> None:
    monkeypatch.setattr(verify, "PARALLEL_MIN_ENTRIES", 10)  # 230 entries: split in 3
    if tamper is not None:
        store = RocksStore(auditor_copy)
        store.commit(tamper(store))
        store.close()
    view = RocksStore(auditor_copy, read_only=True)
    try:
        serial = verify_tenant(view, T, keyring(), count_metrics=False)
        assert verify.split_points(230, layout.snapshots(view, T), 3) == [0, 100, 150, 230]
        parallel = verify_tenant(
            view, T, keyring(), count_metrics=False, workers=3, path=auditor_copy
        )
    finally:
        view.close()
    assert parallel == serial
    assert (serial.broken_position, serial.field) == (position, field)
