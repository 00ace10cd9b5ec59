"""Audit chain tests: known answers, tamper detection with exact positions, signed snapshots."""

from __future__ import annotations

import base64
import hashlib
from itertools import pairwise

import msgspec
import pytest
from nacl.signing import SigningKey

from streamproc.audit import merkle
from streamproc.audit.chain import (
    SNAPSHOT_PAYLOAD_TYPE,
    ChainEntry,
    SnapshotBody,
    VerifyResult,
    batch_merkle_root,
    chain_link,
    encode_snapshot_body,
    make_snapshot_body,
    next_entry,
    sign_snapshot,
    verify_entries,
    verify_rows,
    verify_snapshot,
)
from streamproc.audit.dsse import Envelope, Keyring, Signer

replace = msgspec.structs.replace
DIGEST = hashlib.sha256(b'{"verdict":"clean"}').hexdigest()


def _chain(n: int) -> list[ChainEntry]:
    entries: list[ChainEntry] = []
    prev = None
    for i in range(n):
        digest = hashlib.sha256(i.to_bytes(4, "big")).hexdigest()
        prev = next_entry(prev, f"{1735689600000 + i:016d}-0000", f"job-{i % 3}", "scan", digest)
        entries.append(prev)
    return entries


def _as_rows(entries: list[ChainEntry]) -> list[tuple[object, ...]]:
    return [msgspec.structs.astuple(e) for e in entries]


def _check(
    entries: list[ChainEntry],
    head: str | None,
    start_position: int = 0,
    start_prev_link: str | None = None,
) -> VerifyResult:
    """Run both verifiers; they must agree exactly."""
    kw = {"start_position": start_position, "start_prev_link": start_prev_link}
    result = verify_entries(entries, head, **kw)
    assert verify_rows(_as_rows(entries), head, **kw) == result
    return result


# --- known answers ---


def test_chain_link_known_answer() -> None:
    t0, t1 = "0001735689600000-0000", "0001735689600001-0000"
    by_hand = hashlib.sha256(f"{t0}job-42scan.completedgenesis{DIGEST}".encode()).hexdigest()
    assert by_hand == "244795ad8eba0d520824e658c24c8967ab5bb2bca005c8fdb1b3701e66b1bb79"
    link0 = chain_link(t0, "job-42", "scan.completed", None, DIGEST)
    assert link0 == by_hand
    link1 = chain_link(t1, "job-42", "verdict.published", link0, DIGEST)
    assert link1 == "b9a40a781d6c20e14f3f6d21eb46d03ec67196bb1ca2ad60e7e1dae0cfb7df2f"
    # "genesis" is literally what a missing prev link hashes as.
    assert chain_link(t0, "job-42", "scan.completed", "genesis", DIGEST) == link0


def test_next_entry_builds_a_valid_chain() -> None:
    entries = _chain(5)
    assert [e.position for e in entries] == [0, 1, 2, 3, 4]
    assert entries[0].prev_chain_link is None
    assert all(b.prev_chain_link == a.chain_link for a, b in pairwise(entries))
    result = _check(entries, entries[-1].chain_link)
    assert result == VerifyResult(ok=True, checked=5, head=entries[-1].chain_link)


def test_empty_chain() -> None:
    assert _check([], None).ok
    result = _check([], "ab" * 32)
    assert (result.ok, result.broken_position, result.field) == (False, 0, "head")


def test_segment_verification() -> None:
    entries = _chain(10)
    seg = entries[4:]
    head = entries[-1].chain_link
    assert _check(seg, head, start_position=4, start_prev_link=entries[3].chain_link).ok
    wrong = _check(seg, head, start_position=4, start_prev_link=entries[2].chain_link)
    assert (wrong.broken_position, wrong.field, wrong.checked) == (4, "prev_chain_link", 0)


# --- tampering: each must be caught at the right position, with what differs ---

N = 50
K = 17


def test_changed_payload_digest() -> None:
    entries = _chain(N)
    original = entries[K]
    entries[K] = replace(original, payload_digest="00" * 32)
    result = _check(entries, entries[-1].chain_link)
    assert not result.ok
    assert (result.broken_position, result.field, result.checked) == (K, "chain_link", K)
    assert result.found == original.chain_link
    o = original
    expected = chain_link(o.t_hlc, o.job_id, o.action, o.prev_chain_link, "00" * 32)
    assert result.expected == expected
    assert f"position {K}" in result.reason and expected in result.reason


def test_changed_digest_with_recomputed_link_breaks_the_next_entry() -> None:
    entries = _chain(N)
    e = entries[K]
    forged = chain_link(e.t_hlc, e.job_id, e.action, e.prev_chain_link, "00" * 32)
    entries[K] = replace(e, payload_digest="00" * 32, chain_link=forged)
    result = _check(entries, entries[-1].chain_link)
    assert (result.broken_position, result.field) == (K + 1, "prev_chain_link")
    assert (result.expected, result.found) == (forged, e.chain_link)


def test_rewritten_suffix_is_caught_by_the_head() -> None:
    entries = _chain(N)
    head = entries[-1].chain_link
    rewritten = entries[:K]
    prev = rewritten[-1]
    for e in entries[K:]:
        prev = next_entry(prev, e.t_hlc, e.job_id, e.action, "ff" * 32)
        rewritten.append(prev)
    result = _check(rewritten, head)
    assert (result.broken_position, result.field, result.checked) == (N, "head", N)
    assert (result.expected, result.found) == (head, rewritten[-1].chain_link)


def test_deleted_entry() -> None:
    entries = _chain(N)
    del entries[K]
    result = _check(entries, entries[-1].chain_link)
    assert (result.broken_position, result.field) == (K, "position")
    assert (result.expected, result.found) == (str(K), str(K + 1))


def test_deleted_entry_with_renumbered_positions() -> None:
    entries = _chain(N)
    removed = entries.pop(K)
    entries = [replace(e, position=i) for i, e in enumerate(entries)]
    result = _check(entries, entries[-1].chain_link)
    assert (result.broken_position, result.field) == (K, "prev_chain_link")
    assert (result.expected, result.found) == (entries[K - 1].chain_link, removed.chain_link)


def test_deleted_last_entry() -> None:
    entries = _chain(N)
    head = entries[-1].chain_link
    result = _check(entries[:-1], head)
    assert (result.broken_position, result.field) == (N - 1, "head")


def test_deleted_genesis_entry() -> None:
    entries = _chain(N)
    result = _check(entries[1:], entries[-1].chain_link)
    assert (result.broken_position, result.field, result.found) == (0, "position", "1")


def test_swapped_entries() -> None:
    entries = _chain(N)
    entries[K], entries[K + 1] = entries[K + 1], entries[K]
    result = _check(entries, entries[-1].chain_link)
    assert (result.broken_position, result.field) == (K, "position")
    assert (result.expected, result.found) == (str(K), str(K + 1))


def test_swapped_entries_with_swapped_positions() -> None:
    entries = _chain(N)
    a, b = entries[K], entries[K + 1]
    entries[K], entries[K + 1] = replace(b, position=K), replace(a, position=K + 1)
    result = _check(entries, entries[-1].chain_link)
    assert (result.broken_position, result.field) == (K, "prev_chain_link")
    assert (result.expected, result.found) == (entries[K - 1].chain_link, a.chain_link)


def test_duplicated_entry() -> None:
    entries = _chain(N)
    entries.insert(K, entries[K])
    result = _check(entries, entries[-1].chain_link)
    assert (result.broken_position, result.field) == (K + 1, "position")


def test_genesis_must_have_no_prev_link() -> None:
    entries = _chain(3)
    entries[0] = replace(entries[0], prev_chain_link="genesis")
    result = _check(entries, entries[-1].chain_link)
    assert (result.broken_position, result.field, result.expected) == (0, "prev_chain_link", None)


def test_wrong_or_missing_expected_head() -> None:
    entries = _chain(N)
    result = _check(entries, None)
    assert (result.ok, result.broken_position, result.field) == (False, N, "head")
    assert result.head == entries[-1].chain_link


def test_each_field_is_covered_by_the_link() -> None:
    entries = _chain(5)
    for field in ("t_hlc", "job_id", "action", "payload_digest"):
        tampered = list(entries)
        tampered[2] = replace(entries[2], **{field: getattr(entries[2], field) + "x"})
        result = _check(tampered, entries[-1].chain_link)
        assert (result.broken_position, result.field) == (2, "chain_link"), field


# --- snapshots ---

TRUSTED = Signer("audit-2025", SigningKey(b"\x01" * 32))
ATTACKER = SigningKey(b"\x02" * 32)
RING = Keyring({TRUSTED.key_id: TRUSTED.signing_key.verify_key})


def _snapshot(links: list[str], from_position: int = 0) -> tuple[SnapshotBody, Envelope]:
    body = make_snapshot_body("tenant-a", links, from_position, "0001735689600099-0000")
    return body, sign_snapshot(TRUSTED, body)


def test_batch_merkle_root_uses_raw_link_bytes_as_leaves() -> None:
    a, b = "11" * 32, "22" * 32
    h = hashlib.sha256
    by_hand = h(
        b"\x01" + h(b"\x00" + bytes.fromhex(a)).digest() + h(b"\x00" + bytes.fromhex(b)).digest()
    ).hexdigest()
    assert batch_merkle_root([a, b]) == by_hand
    links = [e.chain_link for e in _chain(37)]
    assert batch_merkle_root(links) == merkle.root([bytes.fromhex(x) for x in links]).hex()


def test_make_snapshot_body_fields_and_json() -> None:
    links = [e.chain_link for e in _chain(N)][10:30]
    body, _ = _snapshot(links, from_position=10)
    assert body.from_chain_link == links[0] and body.to_chain_link == links[-1]
    assert (body.from_position, body.to_position, body.entry_count) == (10, 29, 20)
    assert body.merkle_root == batch_merkle_root(links)
    assert list(msgspec.json.decode(encode_snapshot_body(body))) == [
        "tenant",
        "from_chain_link",
        "to_chain_link",
        "from_position",
        "to_position",
        "entry_count",
        "merkle_root",
        "snapshot_hlc",
    ]
    with pytest.raises(ValueError):
        make_snapshot_body("t", [], 0, "h")
    with pytest.raises(ValueError, match="link 1"):
        make_snapshot_body("t", [links[0], links[1].upper()], 0, "h")
    with pytest.raises(ValueError, match="link 0"):
        make_snapshot_body("t", [" " + links[0][1:]], 0, "h")


def test_snapshot_roundtrip() -> None:
    links = [e.chain_link for e in _chain(N)]
    body, env = _snapshot(links)
    result = verify_snapshot(env, RING, links, expected_tenant="tenant-a", expected_from_position=0)
    assert result.ok, result.reason
    assert (result.body, result.key_id) == (body, "audit-2025")


def test_forged_snapshot_signature() -> None:
    links = [e.chain_link for e in _chain(N)]
    body, _ = _snapshot(links)
    forged = sign_snapshot(Signer(TRUSTED.key_id, ATTACKER), body)  # claims the trusted key id
    result = verify_snapshot(forged, RING, links)
    assert not result.ok and result.reason.startswith("signature:") and result.body is None


def test_snapshot_body_altered_after_signing() -> None:
    links = [e.chain_link for e in _chain(N)]
    body, env = _snapshot(links)
    altered = encode_snapshot_body(replace(body, merkle_root="00" * 32))
    tampered = Envelope(env.payloadType, base64.b64encode(altered).decode(), env.signatures)
    result = verify_snapshot(tampered, RING, links)
    assert not result.ok and result.reason.startswith("signature:")


def test_signed_but_wrong_merkle_root() -> None:
    links = [e.chain_link for e in _chain(N)]
    body, _ = _snapshot(links)
    env = sign_snapshot(TRUSTED, replace(body, merkle_root="00" * 32))
    result = verify_snapshot(env, RING, links)
    assert not result.ok and "merkle_root" in result.reason and body.merkle_root in result.reason


def test_snapshot_detects_changed_or_missing_links() -> None:
    links = [e.chain_link for e in _chain(N)]
    _, env = _snapshot(links)
    changed = list(links)
    changed[K] = "ab" * 32
    result = verify_snapshot(env, RING, changed)
    assert not result.ok and "merkle_root" in result.reason
    result = verify_snapshot(env, RING, links[:K] + links[K + 1 :])
    assert not result.ok and f"batch has {N - 1} links" in result.reason
    result = verify_snapshot(env, RING, ["cd" * 32, *links[1:]])
    assert not result.ok and "from_chain_link" in result.reason
    result = verify_snapshot(env, RING, [*links[:-1], "cd" * 32])
    assert not result.ok and "to_chain_link" in result.reason
    result = verify_snapshot(env, RING, [links[0], "XY" * 32, *links[2:]])
    assert not result.ok and "link 1 " in result.reason


def test_snapshot_context_checks() -> None:
    links = [e.chain_link for e in _chain(N)]
    body, env = _snapshot(links)
    assert "tenant" in verify_snapshot(env, RING, links, expected_tenant="tenant-b").reason
    assert "from_position" in verify_snapshot(env, RING, links, expected_from_position=5).reason
    bad_counts = sign_snapshot(TRUSTED, replace(body, to_position=body.to_position + 1))
    assert "inconsistent counts" in verify_snapshot(bad_counts, RING, links).reason
    other_type = TRUSTED.sign("application/json", encode_snapshot_body(body))
    assert "payload type" in verify_snapshot(other_type, RING, links).reason
    not_a_snapshot = TRUSTED.sign(SNAPSHOT_PAYLOAD_TYPE, b'{"tenant": "x"}')
    assert "not a snapshot" in verify_snapshot(not_a_snapshot, RING, links).reason
    retired = verify_snapshot(env, Keyring(), links)
    assert not retired.ok and "keyring is empty" in retired.reason
